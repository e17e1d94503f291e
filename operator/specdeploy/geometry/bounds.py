"""Types and sane maxima for the config.json values the rules read, checked before any of them
is used, so a hostile or broken config gives a finding naming the field instead of a crash or
a hang (a `num_key_value_heads` of 1e18+1 made the divisor search loop to n; a
`num_hidden_layers` of 1e7 had transformers build a 10-million-entry layer list; a RoPE factor
of 1e308 overflowed the context length; `group_size: 0` divided by zero).

The maxima are far above any real checkpoint (the largest today: 61-128 layers, 128 heads,
~262k vocab, 384 experts, 10M positions) and far below what would hurt. vLLM itself has no such
limits; it would fail later and less clearly (out of memory, or a ZeroDivisionError at load).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from specdeploy.geometry.context_length import LENGTH_KEYS
from specdeploy.findings import Finding, Stage, error, json_type, shown_value
from specdeploy.geometry.hf_classes import table

CODE = "config-value-invalid"

_HEADS = 2**16
_LAYERS = 2**14
_WIDTH = 2**20
_VOCAB = 2**24
_POSITIONS = 2**40

# key -> (lowest, highest) for integer values (lists of integers are checked item by item).
_INTS: dict[str, tuple[int, int]] = {
    **{k: (0, _HEADS) for k in ("num_attention_heads", "n_head", "num_heads", "n_heads", "num_key_value_heads", "n_head_kv",
                                "num_kv_heads", "multi_query_group_num", "num_attention_groups", "kv_n_heads")},
    **{k: (0, _LAYERS) for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "mtp_num_hidden_layers",
                                 "num_nextn_predict_layers", "num_mtp_modules", "first_k_dense_replace", "num_target_layers")},
    **{k: (0, _WIDTH) for k in ("hidden_size", "n_embd", "d_model", "emb_dim", "intermediate_size", "moe_intermediate_size",
                                "head_dim", "hidden_size_per_head", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                                "qk_nope_head_dim", "v_head_dim", "routed_expert_hidden_size")},
    **{k: (0, _VOCAB) for k in ("vocab_size", "draft_vocab_size")},
    **{k: (0, _HEADS) for k in ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
                                "num_experts_per_token", "top_k_experts", "moe_topk", "moe_top_k", "num_shared_experts",
                                "n_shared_experts")},
    **{k: (0, 4096) for k in ("n_predict", "block_size", "dspark_block_size")},
    **{k: (1, 64) for k in ("bits", "w_bit", "num_bits")},
    # Linear-attention (state) layers and the sparse-MLA indexer, read by planning/kv_cache.py.
    **{k: (0, _HEADS) for k in ("linear_num_key_heads", "linear_num_value_heads", "index_n_heads")},
    **{k: (0, _WIDTH) for k in ("linear_key_head_dim", "linear_value_head_dim", "index_head_dim")},
    **{k: (1, 4096) for k in ("linear_conv_kernel_dim", "short_conv_kernel_size")},  # kernel - 1 + k state columns
    **{k: (1, _LAYERS) for k in ("full_attention_interval", "index_topk_freq")},  # divisors
    "index_skip_topk_offset": (0, _LAYERS),
    # Mamba-1/Mamba-2 mixers and Zamba2's shared attention (geometry/layer_layout.py).
    **{k: (0, _HEADS) for k in ("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "n_groups", "mamba_n_groups",
                                "mamba_ngroups")},
    **{k: (0, _WIDTH) for k in ("mamba_d_head", "mamba_head_dim", "mamba_d_state", "ssm_state_size", "state_size",
                                "mamba_d_ssm", "attention_head_dim")},
    **{k: (1, 4096) for k in ("mamba_d_conv", "conv_kernel")},
    "attn_layer_period": (1, _LAYERS),  # a divisor (Jamba)
    "attn_layer_offset": (0, _LAYERS),
    **{k: (0, int(_POSITIONS)) for k in ("index_topk", "attention_chunk_size")},
}
# Keys whose value is a list of integers: (lowest, highest) per item and the longest list.
_INT_LISTS: dict[str, tuple[int, int, int]] = {
    "full_attn_layers": (1, _LAYERS, _LAYERS),  # 1-based layer numbers (Kimi Linear / K3)
    "no_rope_layers": (0, 1, _LAYERS),  # Llama 4: 0 marks a NoPE (global) layer
    "target_layer_ids": (-_LAYERS, _LAYERS, _LAYERS),  # EAGLE3 / DFlash / DSpark hidden-state taps
    "compress_ratios": (0, 1 << 20, _LAYERS),  # DeepSeek-V4: KV compression ratio per layer (geometry/layer_layout.py, planning/compressed_mla.py)
}
# Keys whose value is a list of strings (layer_types: one per layer).
_STRING_LISTS: dict[str, int] = {"layer_types": _LAYERS, "layers_block_type": _LAYERS}
# An int where the key may also be a list of ints (per-layer expert counts).
_INT_OR_LIST = ("num_experts_per_tok", "num_experts")
_MAX_STRING = 4096
# Numbers that may be floats; only finiteness and the upper bound matter.
_NUMBERS: dict[str, float] = {**{k: float(_POSITIONS) for k in LENGTH_KEYS}, "original_max_position_embeddings": float(_POSITIONS)}
# Mamba's inner-width factor: Falcon-H1 multiplies it by hidden_size and truncates (falcon_h1.py), so it may be a float.
_EXPAND_KEYS = ("mamba_expand", "expand")
_MAX_EXPAND = 1024
# vLLM's MambaDType (config/cache.py); NemotronH configs name their state dtype with it.
_MAMBA_DTYPES = ("auto", "float32", "bfloat16", "float16")
_RoPE_KEYS = ("rope_scaling", "rope_parameters")
# Dicts whose keys are RoPE parameters: the scaling itself, or one per layer type (Gemma 3).
_ROPE_PARENTS = _RoPE_KEYS + ("full_attention", "sliding_attention", "chunked_attention", "linear_attention", "attention")
_ROPE_NUMBERS = ("attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor", "mscale", "mscale_all_dim",
                 "rope_theta", "partial_rotary_factor")
_MAX_ROPE_FACTOR = 1e4
_DICTS = ("text_config", "llm_config", "rope_scaling", "rope_parameters", "quantization_config", "compression_config",
          "linear_attn_config", "attn_config", "mtp_config", "speculators_config", "transformer_layer_config")
_STRINGS = ("model_type", "quant_method", "mamba_ssm_dtype", "speculators_model_type")
# The weights' dtype: transformers' PretrainedConfig.__post_init__ does `getattr(torch, dtype)` at every config
# level it builds (so vLLM's loader fails on any other name), and its to_dict() (dict_dtype_to_str) splits a
# non-string, non-integer `dtype` at any depth on "." (IndexError); vllm/config/model.py _get_and_verify_dtype
# then reads it as a torch.dtype. The names torch 2.x defines as torch.dtype attributes.
_DTYPE_KEYS = ("dtype", "torch_dtype")
TORCH_DTYPES = frozenset((
    "bfloat16", "float16", "half", "float32", "float", "float64", "double", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "complex32", "chalf", "complex64", "cfloat", "complex128", "cdouble",
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short", "int32", "int", "int64", "long", "qint8", "qint32",
    "quint8", "quint4x2", "quint2x4", *(f"int{n}" for n in range(1, 8)), *(f"uint{n}" for n in range(1, 8)),
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "bit"))
# Dicts transformers builds into a PretrainedConfig of their own (a composite model's `sub_configs`, vLLM's
# speculators/EAGLE inner config): a key there is a config attribute, as at the top level.
_QUANT_DICTS = ("quantization_config", "compression_config")
# PretrainedConfig's fine-tuning fields (configuration_utils.py __post_init__ / num_labels setter): id2label's
# keys go through int(), num_labels builds a range() of that many labels, problem_type is a Literal.
_MAX_LABELS = 2**16
_PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
# One letter per layer ("F" full, "S" shared top-k: DeepSeek-V3.2 IndexCache).
# NemotronH's hybrid_override_pattern: one letter per layer ("M" Mamba, "*" attention, "-" MLP, "E" MoE).
_PATTERNS = ("index_topk_pattern", "hybrid_override_pattern")
_MAX_ARCHITECTURES = 64


_NONE = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _is_config_level(parent: str | None) -> bool:
    """The top level, or a dict transformers builds into a config of its own (text_config, vision_config,
    EAGLE's `model`, speculators' transformer_layer_config, ...): any `*_config` that is not a quantization
    config or one of the plain dicts the rules read."""
    return parent is None or parent == "model" or parent.endswith("_config") and parent not in _QUANT_DICTS + _PLAIN_CONFIG_DICTS


def _check_config_attribute(key: str, value: Any, where: str, parent: str | None) -> str | None:
    """Keys every transformers config reads (PretrainedConfig), at any config level; None: not one or fine."""
    if key in _DTYPE_KEYS:
        if value is None or not _is_config_level(parent) and (isinstance(value, str) and len(value) <= 256 or _is_int(value)):
            return None
        if not isinstance(value, str) or value not in TORCH_DTYPES:
            return (f"{where} is {json_type(value)} {shown_value(value)}; it must name a torch dtype such as \"bfloat16\", \"float16\" or "
                    "\"float32\" (without \"torch.\")")
        return None
    if key in _RoPE_KEYS:
        if value is not None and not isinstance(value, dict):
            return f"{where} must be an object of RoPE parameters, e.g. {{\"rope_type\": \"linear\", \"factor\": 2.0}} (got {json_type(value)} {shown_value(value)})"
        return None
    if key == "num_labels":  # a null one too: transformers reads it with kwargs.get() and calls range(None)
        if not _is_int(value) or not 0 <= value <= _MAX_LABELS:
            return f"{where} is {shown_value(value)}; a label count is an integer in 0..{_MAX_LABELS}"
        return None
    if key in ("id2label", "label2id"):
        if value is None:
            return None
        ids_first = key == "id2label"
        ok = isinstance(value, dict) and len(value) <= _MAX_LABELS and all(
            isinstance(k, str) and (re.fullmatch(r"-?\d{1,9}", k) if ids_first else len(k) <= 256)
            and (isinstance(v, str) and len(v) <= 256 if ids_first else _is_int(v)) for k, v in value.items())
        if not ok:
            shape = '{"0": "LABEL_0", "1": "LABEL_1"}' if ids_first else '{"LABEL_0": 0, "LABEL_1": 1}'
            return f"{where} must map {'label ids (integer strings) to names' if ids_first else 'label names to integer ids'}, e.g. {shape}"
        return None
    if key == "problem_type":
        if value is not None and value not in _PROBLEM_TYPES:
            return f"{where} is {shown_value(value)}; it is one of {', '.join(_PROBLEM_TYPES)} (or null)"
        return None
    if key in _CONFIG_CLASS_NAMES and _is_config_level(parent):
        return f"{where} names a method or fixed attribute of transformers' config class; a config.json may not set it"
    return None


def _check(key: str, value: Any, where: str, parent: str | None) -> str | None:
    """What is wrong with one value (None: fine). `parent` is the key of the enclosing dict."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {shown_value(value)}; config.json numbers are finite"
    if key in _CONFIG_ATTRIBUTES or key in _CONFIG_CLASS_NAMES:
        return _check_config_attribute(key, value, where, parent)
    if parent in _ROPE_PARENTS and key == "original_max_position_embeddings":  # null or 0 too: yarn divides by it
        return _check_rope(key, value, where)
    if value is None:
        return None
    if key in _VALUE_CHECKS:
        return _VALUE_CHECKS[key](key, value, where)
    if parent in _ROPE_PARENTS:
        return _check_rope(key, value, where)
    return _NAME_CHECKS[key](key, value, where) if key in _NAME_CHECKS else None


def _check_int(key: str, value: Any, where: str) -> str | None:
    low, high = _INTS[key]
    # Lists only where the geometry reads a list (per-layer expert counts).
    is_list = isinstance(value, list) and key in _INT_OR_LIST
    if is_list and len(value) > _LAYERS:
        return f"{where} lists {len(value)} values; a model has at most {_LAYERS} layers"
    for item in value if is_list else [value]:
        if not _is_int(item):
            return f"{where} must be an integer (got {json_type(item)} {shown_value(item)})"
        if not low <= item <= high:
            return f"{where} is {shown_value(item)}; a model config has {low}..{high}"
    return None


def _check_int_list(key: str, value: Any, where: str) -> str | None:
    low, high, longest = _INT_LISTS[key]
    if not isinstance(value, list) or len(value) > longest:
        return f"{where} must be a list of at most {longest} integers (got {json_type(value)} {shown_value(value)})"
    bad = next((item for item in value if not _is_int(item) or not low <= item <= high), _NONE)
    if bad is not _NONE:
        return f"{where} holds {json_type(bad)} {shown_value(bad)}; each item is an integer in {low}..{high}"
    return None


def _check_string_list(key: str, value: Any, where: str) -> str | None:
    longest = _STRING_LISTS[key]
    if not isinstance(value, list) or len(value) > longest or not all(isinstance(i, str) and len(i) <= 64 for i in value):
        return f"{where} must be a list of at most {longest} layer type names, e.g. [\"full_attention\", \"sliding_attention\"]"
    return None


def _check_pattern(key: str, value: Any, where: str) -> str | None:
    if not isinstance(value, str) or len(value) > _LAYERS:
        return f"{where} must be a string of at most {_LAYERS} letters, one per layer (got {json_type(value)} {shown_value(value)})"
    return None


def _check_sliding_window(key: str, value: Any, where: str) -> str | None:
    if not (isinstance(value, bool) or _is_int(value) and 0 <= value <= _POSITIONS):  # some configs say `false` for "none"
        return f"{where} is {shown_value(value)}; a sliding window is a token count in 0..{_POSITIONS} (or null)"
    return None


def _check_bool(key: str, value: Any, where: str) -> str | None:
    return None if isinstance(value, bool) else f"{where} must be true or false (got {json_type(value)} {shown_value(value)})"


def _check_compress_rates(key: str, value: Any, where: str) -> str | None:
    """DeepSeek-V4 in transformers' form: layer type -> compression ratio."""
    if not isinstance(value, dict) or len(value) > 64 or not all(_is_int(v) and 0 <= v <= 1 << 20 for v in value.values()):
        return f"{where} must map layer type names to integer compression ratios (got {json_type(value)} {shown_value(value)})"
    return None


def _check_group_size(key: str, value: Any, where: str) -> str | None:
    if not _is_int(value) or not (value == -1 or 1 <= value <= _WIDTH):
        return f"{where} is {shown_value(value)}; a quantization group size is a positive integer, or -1 for per-channel"
    return None


def _check_expand(key: str, value: Any, where: str) -> str | None:
    if not _is_number(value) or not 0 <= value <= _MAX_EXPAND:
        return f"{where} is {shown_value(value)}; a Mamba expand factor is a finite number in 0..{_MAX_EXPAND}"
    return None


def _check_mamba_dtype(key: str, value: Any, where: str) -> str | None:
    if value not in _MAMBA_DTYPES:
        return f"{where} is {shown_value(value)}; vLLM's Mamba state dtypes are {', '.join(_MAMBA_DTYPES)}"
    return None


def _check_length(key: str, value: Any, where: str) -> str | None:
    if not _is_number(value) or value > _NUMBERS[key]:
        return f"{where} is {shown_value(value)}; a context length is a finite number up to {int(_NUMBERS[key])}"
    return None


def _check_architectures(key: str, value: Any, where: str) -> str | None:
    if not isinstance(value, list) or len(value) > _MAX_ARCHITECTURES or not all(isinstance(a, str) and 0 < len(a) <= 256 for a in value):
        return f"{where} must be a list of architecture names (strings), e.g. [\"LlamaForCausalLM\"]"
    return None


def _check_string(key: str, value: Any, where: str) -> str | None:
    if not isinstance(value, str) or len(value) > 256:
        return f"{where} must be a string of at most 256 characters (got {json_type(value)} {shown_value(value)})"
    return None


def _check_dict(key: str, value: Any, where: str) -> str | None:
    return None if isinstance(value, dict) else f"{where} must be an object (got {json_type(value)})"


_Check = Callable[[str, Any, str], "str | None"]
# The check for each bounded key (the key sets above do not overlap). Inside RoPE parameters, a
# key not listed here is a RoPE parameter (_check_rope), whatever its name elsewhere.
_VALUE_CHECKS: dict[str, _Check] = {
    **{k: _check_int for k in _INTS}, **{k: _check_int_list for k in _INT_LISTS},
    **{k: _check_string_list for k in _STRING_LISTS}, **{k: _check_pattern for k in _PATTERNS},
    "sliding_window": _check_sliding_window, "use_sliding_window": _check_bool, "compress_rates": _check_compress_rates,
    "group_size": _check_group_size, **{k: _check_expand for k in _EXPAND_KEYS}, "mamba_ssm_cache_dtype": _check_mamba_dtype,
    **{k: _check_length for k in _NUMBERS},
}
_NAME_CHECKS: dict[str, _Check] = {
    "architectures": _check_architectures, **{k: _check_string for k in _STRINGS}, **{k: _check_dict for k in _DICTS},
}


def _check_rope(key: str, value: Any, where: str) -> str | None:
    """The RoPE parameters transformers' rope validation reads (modeling_rope_utils.py) and
    vLLM's context-length derivation multiplies by."""
    if key in _ROPE_PARENTS[len(_RoPE_KEYS):]:  # one set of parameters per layer type (transformers setdefault()s it)
        if not isinstance(value, dict):
            return f"{where} must be an object of RoPE parameters for that layer type (got {json_type(value)} {shown_value(value)})"
    elif key == "original_max_position_embeddings":  # yarn/longrope/llama3 compare and divide by it
        if not _is_number(value) or not 0 < value <= _POSITIONS:
            return f"{where} is {shown_value(value)}; it must be a positive number of positions (omit it for the default)"
    elif key == "factor":
        if not _is_number(value) or not 0 < value <= _MAX_ROPE_FACTOR:
            return f"{where} is {shown_value(value)}; a RoPE scaling factor is a number in (0, {_MAX_ROPE_FACTOR:g}]"
    elif key in ("rope_type", "type"):
        if not isinstance(value, str) or len(value) > 64:
            return f"{where} must be a RoPE type name such as \"linear\", \"yarn\" or \"llama3\" (got {json_type(value)} {shown_value(value)})"
    elif key in _ROPE_NUMBERS:
        if not _is_number(value) or abs(value) > _POSITIONS:
            return f"{where} is {shown_value(value)}; it must be a finite number"
    elif key in ("short_factor", "long_factor"):
        if not isinstance(value, list) or len(value) > _WIDTH or not all(_is_number(v) for v in value):
            return f"{where} must be a list of numbers, one per rotary dimension (got {json_type(value)} {shown_value(value)})"
    elif key == "mrope_section":
        if not isinstance(value, list) or len(value) > 64 or not all(_is_int(v) and 0 <= v <= _WIDTH for v in value):
            return f"{where} must be a list of non-negative integers (got {json_type(value)} {shown_value(value)})"
    return None


def config_bound_findings(raw: dict[str, Any], field_prefix: str) -> list[Finding]:
    """One finding per out-of-bounds value, at any depth, each naming the field."""
    findings: list[Finding] = []
    stack: list[tuple[dict[str, Any], str, str | None]] = [(raw, field_prefix, None)]
    while stack and len(findings) < 20:
        node, path, parent = stack.pop()
        for key, value in node.items():
            if not isinstance(key, str):  # an inline YAML config can say `{1: 2}`; transformers: "keywords must be strings"
                findings.append(error(CODE, f"{path}.{shown_value(key)}", f"{path} has the key {shown_value(key)}; config.json keys are strings",
                                      Stage.CONFIG))
                continue
            where = f"{path}.{key}"
            problem = _check(key, value, where, parent)
            if problem is not None:
                findings.append(error(CODE, where, problem, Stage.CONFIG))
            elif isinstance(value, dict):
                stack.append((value, where, key))
            elif isinstance(value, list):
                stack.extend((item, f"{where}[{i}]", key) for i, item in enumerate(value[:256]) if isinstance(item, dict))
    return findings


# Dicts of `*_config` keys the rules read as plain dicts, not transformers configs.
_PLAIN_CONFIG_DICTS = ("linear_attn_config", "attn_config", "mtp_config", "speculators_config", "dflash_config", "eagle_config")
_CONFIG_ATTRIBUTES = frozenset(_DTYPE_KEYS + _RoPE_KEYS + ("num_labels", "id2label", "label2id", "problem_type"))


def _class_names() -> frozenset[str]:
    """PretrainedConfig's methods, read-only properties and class-level tables (attribute_map, sub_configs): a
    config key of that name replaces them on the instance, and transformers (or vLLM after it) then calls an int
    (`to_dict: 5` made `to_dict()` raise TypeError) or iterates a number (`attribute_map: 5`). Read from
    transformers by scripts/gen_hf_configs.py."""
    return frozenset(set(table()["reserved_names"]) - _CONFIG_ATTRIBUTES)


_CONFIG_CLASS_NAMES = _class_names()

# Every key this module bounds, for the test that keeps it in step with what the rules read.
BOUNDED_KEYS = frozenset(_INTS) | frozenset(_INT_LISTS) | frozenset(_STRING_LISTS) | frozenset(_NUMBERS) | frozenset(
    _DICTS) | frozenset(_STRINGS) | frozenset(_PATTERNS) | _CONFIG_ATTRIBUTES | frozenset(_EXPAND_KEYS) | {
    "group_size", "factor", "architectures", "sliding_window", "use_sliding_window", "compress_rates", "mamba_ssm_cache_dtype"}
