"""Read a config.json into the geometry the rules need, the way vLLM reads it.

Sources for each derivation: vllm/transformers_utils/model_arch_config_convertor.py
(head size, KV heads, experts, MLA detection) and vllm/transformers_utils/config.py
(`get_hf_text_config`: multimodal checkpoints keep the LLM in `text_config`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Sized
from typing import Any, Callable

from specdeploy.geometry.bounds import config_bound_findings, shown_value
from specdeploy.geometry.context_length import derived_max_model_len
from specdeploy.geometry.layer_layout import CacheLayout, read_cache_layout
from specdeploy.geometry.eagle_format import eagle_source_path, eagle_text_config, is_eagle_format
from specdeploy.geometry.hf_classes import HFConfig, base_model, class_for, parse
from specdeploy.geometry.mla_configs import MLA_CONFIG_BUILDERS
from specdeploy.geometry.rejected_keys import MISSING, keys_at_fault, value_at
from specdeploy.geometry.speculators import is_speculators_config, speculators_source_path, speculators_text_config
from specdeploy.findings import MAX_MESSAGE, Finding, cut, error
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.drafts import EAGLE_FORMAT_MODEL_TYPE
from specdeploy.vllm.hf_config import EXPERT_COUNT_KEYS, config_value as _get, first_value as _first
from specdeploy.vllm.methods import METHODS
from specdeploy.vllm.mtp import MtpModule, mtp_module

_SERVED_DTYPE_BYTES = {"float32": 2, "float": 2, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}
_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
_EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_topk", "moe_top_k")


# Drafts with no attention layers: vLLM reports 0 heads, 0 KV heads and head size 0 for
# them (MedusaModelArchConfigConvertor; MLPSpeculatorConfig has no head count at all); a
# Medusa config's `num_heads` counts its MLP heads.
# Configs without attention heads: speculator heads, and Mamba-1 checkpoints (mamba.py: state only).
ATTENTION_FREE_MODEL_TYPES = frozenset({m.draft_model_type for m in METHODS.values() if m.draft_model_type}
                                       | {"mamba", "falcon_mamba"})


def _total_kv_heads(text: Any, model_type: str, heads: int) -> int:
    """KV heads as vLLM's per-family convertors count them (Falcon MQA, DBRX's attn_config)."""
    if model_type in ("falcon", "RefinedWeb", "RefinedWebModel") and not _get(text, "new_decoder_architecture") and _get(text, "multi_query"):
        return 1
    if model_type == "dbrx":
        return int(_get(_get(text, "attn_config") or {}, "kv_n_heads") or heads)
    return int(_first(text, _KV_HEAD_KEYS, heads))


class ConfigRejected(ValueError):
    """The config's own class (transformers or ours) refused it, as vLLM's loader would.
    `paths`: the keys at fault, where they could be found (geometry/rejected_keys.py)."""

    def __init__(self, config_class: str, reason: str, paths: tuple[tuple[str, ...], ...] = ()) -> None:
        super().__init__(f"{config_class} rejects this config: {reason}")
        self.config_class, self.reason, self.paths = config_class, reason, paths


@dataclass(frozen=True)
class Geometry:
    """The attention/MLA/MoE shape of one model, as vLLM will see it."""

    model_type: str
    text_model_type: str
    architectures: tuple[str, ...]
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_size: int  # KV-cache head size: kv_lora_rank + qk_rope_head_dim for MLA
    head_dim: int  # per-head q/k width (not hidden / heads when the config says so)
    uses_mla: bool
    num_layers: int
    num_kv_cache_layers: int  # layers holding a per-token KV cache (full attention)
    num_state_layers: int  # linear-attention layers holding a fixed per-sequence state
    vocab_size: int
    draft_vocab_size: int | None
    num_experts: int
    dtype: str
    weight_bits: float | None
    derived_max_model_len: int  # the longest --max-model-len vLLM accepts for this config
    block_size: int | None
    n_predict: int | None
    mtp: MtpModule | None  # the MTP module vLLM would build from this model as a target
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    intermediate_size: int = 0
    moe_intermediate_size: int = 0
    expert_hidden_size: int = 0  # latent MoE (Kimi-K3) runs experts in a smaller width
    num_shared_experts: int = 0
    num_experts_per_token: int = 0  # routed experts a token uses: the speculation cost model's MoE bytes
    first_dense_layers: int = 0
    linear_attn_heads: int = 0
    linear_attn_head_dim: int = 0
    tie_word_embeddings: bool = False
    # Which cache each layer holds and the state's sizes, read once (geometry/layer_layout.py).
    layout: CacheLayout = field(default_factory=lambda: CacheLayout(kinds=()), compare=False, repr=False)
    # How many layers extract_hidden_states captures (the config's eagle_aux_hidden_state_layer_ids).
    aux_hidden_state_layers: int = 0
    # The keys the config states: at its top level as written, and in its LLM config.
    config_keys: frozenset[str] = frozenset()
    text_config_keys: frozenset[str] = frozenset()
    dflash_markov_rank: Any = None  # a DSpark draft's markov_rank kept only inside dflash_config
    # The LLM config as vLLM reads it, for vLLM's per-model layer tables (geometry/splits.py).
    text_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The vision tower's config, for the sizes its layers split over TP (geometry/splits.py).
    vision_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The checkpoint's quantization_config, for the widths its weight blocks need (geometry/splits.py).
    quantization: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def served_dtype_bytes(self) -> int:
        """Bytes per weight as vLLM serves them: float32 checkpoints in 16-bit under dtype=auto,
        so 4 never appears."""
        return _SERVED_DTYPE_BYTES.get(self.dtype, 2)


def parse_config(raw: dict[str, Any]) -> HFConfig | dict[str, Any]:
    """Parse with the class vLLM's loader would use (its defaults, attribute map, sub-configs and
    validators, as geometry/hf_classes.py applies them), so its refusals are found here rather
    than in the pod. Types neither we nor transformers know stay a plain dict (vLLM would need
    the checkpoint's remote code for those)."""
    model_type = raw.get("model_type")
    mla = MLA_CONFIG_BUILDERS.get(model_type) if isinstance(model_type, str) else None
    class_name = mla[0] if mla else class_for(model_type)
    if class_name is None:
        return raw
    construct: Callable[[dict[str, Any]], HFConfig] = mla[1] if mla else (lambda config: parse(class_name, config))

    def accepts(config: dict[str, Any]) -> bool:
        try:
            construct(config)
        except Exception:
            return False
        return True

    try:
        return construct(raw)
    except Exception as exc:  # the classes raise several types; all mean "rejected"
        raise ConfigRejected(class_name, _reason(exc), keys_at_fault(accepts, raw)) from exc


def _reason(exc: Exception) -> str:
    """transformers' words for a refusal; Python's own (a missing attribute of a sub-config, a
    KeyError's quotes) restated."""
    text = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        text = exc.args[0]
    message = text.splitlines()[-1].strip() if text else type(exc).__name__
    message = re.sub(r"^\w+Error: ", "", message)  # the cause's type, as huggingface_hub's strict dataclasses prefix it
    missing = re.fullmatch(r"'(\w+)' object has no attribute '(\w+)'", message)
    if missing:
        return f"building {missing[1]} needs {missing[2]}, which it does not have"
    return re.sub(r"'[^']{57,}'", lambda quoted: quoted[0][:54] + "...'", message)  # a value transformers quotes whole


def text_config_of(config: HFConfig | dict[str, Any]) -> Any:
    """The LLM part: `text_config` (Kimi-K3, Llama-4, Qwen3-VL) or the config itself."""
    if isinstance(config, HFConfig):
        return config.get_text_config()
    for key in ("text_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and "num_attention_heads" in sub:
            return sub
    return config


def _quantization(config: Any, text: Any) -> dict[str, Any] | None:
    quant = _get(config, "quantization_config") or _get(config, "compression_config") or _get(text, "quantization_config")
    return dict(quant) if isinstance(quant, dict) else None


def _weight_bits(quant: dict[str, Any] | None) -> float | None:
    """Bits per quantized weight, including block-scale overhead where the format has it."""
    if not quant:
        return None
    method = str(quant.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors") or None
    fmt = str(quant.get("format", "")).lower()
    bits = quant.get("bits") or quant.get("w_bit")
    groups = quant.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        weights = weights if isinstance(weights, dict) else {}
        bits = weights.get("num_bits") or bits
        group_size = weights.get("group_size")
        if bits and group_size and group_size > 0:  # bounds.py checked both; -1 is per-channel
            return float(bits) + 8.0 / float(group_size)  # one 8-bit scale per group
    if method == "mxfp4" or "mxfp4" in fmt:
        return 4.25
    if method in {"fp8", "fbgemm_fp8", "modelopt"} or "fp8" in fmt:
        return 8.0
    if bits:
        group_size = quant.get("group_size") or 128
        return float(bits) + (16.0 / float(group_size) if group_size > 0 else 0.0)  # -1: per-channel
    return None


def _experts_per_token(text: Any) -> int:
    value = _first(text, _EXPERTS_PER_TOKEN_KEYS, 0) or 0
    return int(value[0] if isinstance(value, list) else value)


def _dtype(config: Any, text: Any) -> str:
    value = _get(config, "dtype") or _get(config, "torch_dtype") or _get(text, "dtype") or _get(text, "torch_dtype")
    return str(value).replace("torch.", "") if value else "bfloat16"


def _architectures(config: Any, text: Any, model_type: str) -> tuple[str, ...]:
    """As vLLM names them: a config without `architectures` gets transformers' base model class
    for its model_type (vllm/transformers_utils/config.py get_config)."""
    named = _get(config, "architectures") or _get(text, "architectures")
    if named:
        return tuple(named)
    base = base_model(model_type)
    return (base,) if isinstance(base, str) else ()


# Same config, same release, same field -> same answer: a GitOps stream names one model in many
# CRs, and the operator re-reads the same configs on every reconcile. Bounded; Geometry is frozen.
_MEMO: dict[tuple[str, str, str], tuple[Geometry | None, tuple[Finding, ...]]] = {}
_MEMO_SIZE = 256


def read_geometry(raw: dict[str, Any], field_prefix: str, facts: VllmFacts) -> tuple[Geometry | None, list[Finding]]:
    """`_read_geometry`, memoised on the config's canonical JSON (a fresh findings list each call)."""
    try:
        key = (json.dumps(raw, sort_keys=True, allow_nan=True), field_prefix, facts.version)
    except (TypeError, ValueError):  # not JSON-shaped: judge it uncached
        return _read_geometry(raw, field_prefix, facts)
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        geometry, findings = _read_geometry(raw, field_prefix, facts)
        _MEMO[key] = (geometry, tuple(findings))
    geometry, findings = _MEMO[key]
    return geometry, list(findings)


def _rejection(exc: ConfigRejected, raw: dict[str, Any], wrapper: str | None, field_prefix: str) -> Finding:
    """The refusal, at the key at fault when one is: `field_prefix.<path in the config as written>`
    (a key the unwrapping added, such as the architectures it chose, is not the user's to name)."""
    source = {"speculators": speculators_source_path, EAGLE_FORMAT_MODEL_TYPE: eagle_source_path}.get(wrapper or "", lambda _raw, path: path)
    paths = [path for path in (source(raw, path) for path in exc.paths) if value_at(raw, path, MISSING) is not MISSING]
    if not paths:
        return error("config-rejected", field_prefix, str(exc))
    shown = " or ".join(f"{'.'.join(path)} = {shown_value(value_at(raw, path))}" for path in paths[:3])
    field = f"{field_prefix}.{'.'.join(paths[0])}" if len(paths) == 1 else field_prefix
    return error("config-rejected", field, cut(f"{exc.config_class} rejects {shown}: {exc.reason}", MAX_MESSAGE))


def _read_geometry(raw: dict[str, Any], field_prefix: str, facts: VllmFacts) -> tuple[Geometry | None, list[Finding]]:
    """Geometry of one config.json as `facts`' vLLM release reads it; findings (stage `config`)
    name `field_prefix`.<key> for what is wrong."""
    if not isinstance(raw, dict):
        return None, [error("config-not-object", field_prefix, "config.json must be a JSON object")]
    bounds = config_bound_findings(raw, field_prefix)
    if bounds:
        return None, bounds
    # Wrapper formats vLLM unwraps itself; their architectures are final (no EAGLE re-wrap).
    wrapper = "speculators" if is_speculators_config(raw) else EAGLE_FORMAT_MODEL_TYPE if is_eagle_format(raw) else None
    try:
        unwrapped = {"speculators": speculators_text_config, EAGLE_FORMAT_MODEL_TYPE: eagle_text_config}[wrapper](raw) if wrapper else raw
        config = parse_config(unwrapped)
    except ConfigRejected as exc:
        return None, [_rejection(exc, raw, wrapper, field_prefix)]
    except ValueError as exc:
        return None, [error("config-rejected", field_prefix, str(exc))]
    text = text_config_of(config)
    model_type = str(_get(config, "model_type") or "")
    attention_free = model_type in ATTENTION_FREE_MODEL_TYPES
    counts, findings = _required_counts(config, text, attention_free, field_prefix)
    if findings:
        return None, findings
    attention = _attention_shape(model_type, attention_free, text, counts, facts)
    if attention.num_kv_heads <= 0 and not attention.attention_free:
        return None, [error("config-missing-field", f"{field_prefix}.num_key_value_heads",
                            f"num_key_value_heads is {attention.num_kv_heads}; it must be a positive integer "
                            f"(at most num_attention_heads {counts['num_attention_heads']})")]
    return _geometry(wrapper, config, text, counts, attention, facts, raw), []


def _required_counts(config: Any, text: Any, attention_free: bool, field_prefix: str) -> tuple[dict[str, int], list[Finding]]:
    """Heads, layers and vocabulary: without them vLLM cannot build the model (0 heads and
    layers only for attention-free configs)."""
    required = {"num_attention_heads": 0 if attention_free else _first(text, ("num_attention_heads", "n_head", "num_heads", "n_heads")),
                "num_hidden_layers": _first(text, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"), 0 if attention_free else None),
                "vocab_size": _get(text, "vocab_size") or _get(config, "vocab_size")}
    findings = [error("config-missing-field", f"{field_prefix}.{key}",
                      f"config.json has no usable {key} (got {value!r}); it must be a positive integer")
                for key, value in required.items()
                if not isinstance(value, int) or value < 0 or (value == 0 and not (attention_free and key != "vocab_size"))]
    return ({key: int(value) for key, value in required.items()} if not findings else {}), findings


@dataclass(frozen=True)
class _AttentionShape:
    """How one attention layer is laid out, as vLLM's arch-config convertor derives it."""

    model_type: str
    hidden_size: int
    attention_free: bool
    text_model_type: str
    uses_mla: bool
    head_dim: int
    head_size: int
    num_kv_heads: int


def _attention_shape(model_type: str, attention_free: bool, text: Any, counts: dict[str, int],
                     facts: VllmFacts) -> _AttentionShape:
    heads = counts["num_attention_heads"]
    text_model_type = str(_get(text, "model_type") or model_type)
    hidden = int(_first(text, ("hidden_size", "n_embd", "d_model", "emb_dim"), 0) or 0)
    kv_lora = _get(text, "kv_lora_rank")
    # vLLM decides MLA by model_type + kv_lora_rank (`is_deepseek_mla`), never by hidden/heads.
    uses_mla = facts.is_mla_model_type(text_model_type) and kv_lora is not None
    explicit_head_dim = _get(text, "head_dim")
    if explicit_head_dim is not None and explicit_head_dim > 0:
        head_dim = int(explicit_head_dim)
    elif _get(text, "hidden_size_per_head") is not None:
        head_dim = int(_get(text, "hidden_size_per_head"))
    else:
        head_dim = hidden // heads if heads else 0
    if attention_free:
        head_dim = 0
    head_size = int(kv_lora) + int(_get(text, "qk_rope_head_dim") or 0) if uses_mla else head_dim
    return _AttentionShape(model_type=model_type, hidden_size=hidden, attention_free=attention_free,
                           text_model_type=text_model_type, uses_mla=uses_mla,
                           head_dim=head_dim, head_size=head_size,
                           num_kv_heads=_total_kv_heads(text, text_model_type, heads))


def _geometry(wrapper: str | None, config: Any, text: Any, counts: dict[str, int], attention: _AttentionShape,
              facts: VllmFacts, raw: dict[str, Any]) -> Geometry:
    layers = counts["num_hidden_layers"]
    text_dict = text.to_dict() if isinstance(text, HFConfig) else dict(text)
    linear = _get(text, "linear_attn_config") or {}
    linear = linear if isinstance(linear, dict) else {}
    kv_cache_layers = len(linear["full_attn_layers"]) if linear.get("full_attn_layers") else layers
    experts = _first(text, EXPERT_COUNT_KEYS, 0) or 0
    quantization = _quantization(config, text)
    return Geometry(
        model_type=wrapper or attention.model_type,
        text_model_type=attention.text_model_type,
        architectures=_architectures(config, text, attention.model_type),
        hidden_size=attention.hidden_size,
        num_attention_heads=counts["num_attention_heads"],
        num_kv_heads=attention.num_kv_heads,
        head_size=attention.head_size,
        head_dim=attention.head_dim,
        uses_mla=attention.uses_mla,
        num_layers=layers,
        num_kv_cache_layers=kv_cache_layers,
        num_state_layers=layers - kv_cache_layers,
        vocab_size=counts["vocab_size"],
        draft_vocab_size=_get(config, "draft_vocab_size"),
        num_experts=int(experts[0] if isinstance(experts, list) else experts),
        dtype=_dtype(config, text),
        weight_bits=_weight_bits(quantization),
        derived_max_model_len=derived_max_model_len(config, text),
        # DSpark's default k: block_size or dspark_block_size only (vllm/config/speculative.py);
        # a dflash_config.block_size is not read by vLLM for that.
        block_size=_get(config, "block_size") or _get(config, "dspark_block_size"),
        # A speculators checkpoint's proposal count is not a default vLLM applies to a draft
        # (SpeculativeConfig reads only hf_config.n_predict), so it is not read here either.
        n_predict=_get(config, "n_predict"),
        mtp=mtp_module(config, text, facts),
        kv_lora_rank=_get(text, "kv_lora_rank"),
        q_lora_rank=_get(text, "q_lora_rank"),
        qk_nope_head_dim=_get(text, "qk_nope_head_dim"),
        qk_rope_head_dim=_get(text, "qk_rope_head_dim"),
        v_head_dim=_get(text, "v_head_dim"),
        intermediate_size=int(_get(text, "intermediate_size") or 0),
        moe_intermediate_size=int(_get(text, "moe_intermediate_size") or _get(text, "intermediate_size") or 0),
        expert_hidden_size=int(_get(text, "routed_expert_hidden_size") or attention.hidden_size),
        num_shared_experts=int(_first(text, ("num_shared_experts", "n_shared_experts"), 0) or 0),
        num_experts_per_token=_experts_per_token(text),
        first_dense_layers=int(_get(text, "first_k_dense_replace") or 0),
        linear_attn_heads=int(linear.get("num_heads", 0)),
        linear_attn_head_dim=int(linear.get("head_dim", 0)),
        tie_word_embeddings=bool(_get(config, "tie_word_embeddings") or _get(text, "tie_word_embeddings")),
        **_read_once(raw, text_dict, layers, attention.num_kv_heads),
        vision_config=_as_dict(_get(config, "vision_config")),
        quantization=quantization or {},
    )


def _read_once(raw: dict[str, Any], text: dict[str, Any], layers: int, kv_heads: int) -> dict[str, Any]:
    """The fields planning and the load rules read beyond the attention shape: the cache layout,
    the keys the config states, and the fields DSpark's and extract_hidden_states' classes read."""
    aux = text.get("eagle_aux_hidden_state_layer_ids")
    nested = raw.get("dflash_config")
    return {"layout": read_cache_layout(text, layers, kv_heads),
            "aux_hidden_state_layers": len(aux) if isinstance(aux, Sized) and aux else 0,
            "config_keys": frozenset(raw), "text_config_keys": frozenset(text),
            "dflash_markov_rank": nested.get("markov_rank") if isinstance(nested, dict) else None,
            "text_config": text}


def _as_dict(section: Any) -> dict[str, Any]:
    if isinstance(section, HFConfig):
        return section.to_dict()
    return dict(section) if isinstance(section, dict) else {}
