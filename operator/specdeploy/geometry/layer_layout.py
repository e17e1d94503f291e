"""Which cache each decoder layer holds, and the sizes of a Mamba-style layer's state, read from
the config once into a typed `CacheLayout` (planning/kv_cache.py does the arithmetic).

Restates vLLM's model files (the releases in specdeploy.vllm; unchanged between them):
- the layer layout: `layer_types` (gpt-oss, Gemma, Qwen3.5, GraniteMoeHybrid), `layers_block_type`
  (Jamba `attention`/`mamba`, Zamba2 `hybrid` = Mamba + shared attention, transformers' own form
  of NemotronH), NemotronH's `hybrid_override_pattern` (`M` Mamba, `*` attention, `-`/`E` MLP or
  MoE: no cache), Falcon-H1's parallel hybrid (every layer holds both), Kimi's
  `linear_attn_config.full_attn_layers`, Qwen3-Next's `full_attention_interval`, Llama-4's
  chunked RoPE layers, a model-wide sliding window, Mamba/Mamba2 checkpoints (state only);
- the state's sizes: each model's `get_mamba_state_shape_from_config` naming the config keys
  (`layers/mamba/mamba_utils.py` `MambaStateShapeCalculator` turns them into shapes), and
  `MambaStateDtypeCalculator`'s defaults (NemotronH fp32, Qwen3.5 its `mamba_ssm_dtype`:
  models/config.py);
- DeepSeek-V4's per-layer compression ratios (planning/compressed_mla.py), the sparse-MLA
  indexer's layers (models/deepseek_v2.py, IndexCache), Zamba2's shared attention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.vllm.hf_config import config_value

FULL, MLA, INDEXER, SLIDING, CHUNKED, STATE = "full", "mla", "indexer", "sliding_window", "chunked_local", "state"
# Names a layer list uses, in transformers' normalized form and in the checkpoints' own.
_LAYER_NAMES: dict[str, tuple[str, ...]] = {
    "full_attention": (FULL,), "attention": (FULL,), "sliding_attention": (SLIDING,),
    "chunked_attention": (CHUNKED,), "linear_attention": (STATE,), "mamba": (STATE,),
    "hybrid": (STATE, FULL),  # zamba2.py Zamba2HybridLayer: a Mamba mixer and a shared attention block
    "mlp": (), "moe": (),
}
_NEMOTRON_PATTERN = {"M": (STATE,), "*": (FULL,), "-": (), "E": ()}  # nemotron_h.py ALL_DECODER_LAYER_TYPES
_MAMBA_ONLY = frozenset({"mamba", "mamba2", "falcon_mamba"})
_MAMBA1 = frozenset({"jamba", "mamba", "falcon_mamba"})  # MambaMixer (jamba.py, mamba.py)


@dataclass(frozen=True)
class StateShape:
    """One Mamba-style layer's state sizes, before the TP split. `family`: "kda" (Kimi's KDA:
    heads, head_dim, kernel), "gated_delta_net" (Qwen3-Next/3.5), "mamba1" or "mamba2"."""

    family: str
    heads: int = 0
    head_dim: int = 0
    kernel: int = 4
    inner: int = 0  # Mamba: the mixer's intermediate width
    groups: int = 1
    state: int = 0
    key_heads: int = 0  # GatedDeltaNet
    key_dim: int = 0
    ssm_dtype: str = "auto"  # the recurrent state's dtype when --mamba-ssm-cache-dtype is auto


@dataclass(frozen=True)
class CompressedLayout:
    """DeepSeek-V4's compressed MLA: each layer's ratio (0: sliding window only) and its widths."""

    ratios: tuple[int, ...]
    num_hidden_layers: int
    head_dim: int
    index_head_dim: int
    window: int


@dataclass(frozen=True)
class CacheLayout:
    """The caches a model's decoder layers hold, as the model files build them."""

    kinds: tuple[str, ...]  # one entry per cache of every layer (a hybrid layer gives two)
    sliding_window: int = 0
    attention_chunk_size: int = 0
    shared_attention: tuple[int, int] | None = None  # Zamba2: (KV heads, head size) of its shared block
    state: StateShape | None = None
    checkpoint_blocks: int = 0  # extra state pages in `align` cache mode
    sparse_indexer: bool = False  # index_topk set: a DeepseekV32 indexer beside MLA
    indexer_layers: int = 0
    index_head_dim: int = 128
    compressed: CompressedLayout | None = None


def _model_type(text: Any) -> str:
    return str(config_value(text, "model_type", ""))


def _int(text: Any, key: str, default: int = 0) -> int:
    return int(config_value(text, key, default))


def layer_kinds(text: Any, layers: int) -> list[str]:
    """The cache of every decoder layer, as the model files build them: one entry per cache,
    so a layer holding a state and a KV cache (Falcon-H1, Zamba2's hybrid layers) gives two."""
    model_type = _model_type(text)
    linear = config_value(text, "linear_attn_config")
    if isinstance(linear, dict) and linear.get("full_attn_layers"):  # Kimi Linear / K3 (1-based)
        full = {int(i) - 1 for i in linear["full_attn_layers"]}
        return [FULL if i in full else STATE for i in range(layers)]
    if model_type in _MAMBA_ONLY:
        return [STATE] * layers
    if model_type == "falcon_h1":  # falcon_h1.py FalconH1ParallelHybrid: attention and Mamba2 side by side
        return [STATE, FULL] * layers
    pattern = config_value(text, "hybrid_override_pattern")
    if isinstance(pattern, str) and pattern and model_type == "nemotron_h":
        return [kind for char in pattern[:layers] for kind in _NEMOTRON_PATTERN.get(char, (FULL,))]
    for key in ("layer_types", "layers_block_type"):
        names = config_value(text, key)
        if isinstance(names, list) and len(names) >= layers:
            return [kind for name in names[:layers] for kind in _LAYER_NAMES.get(str(name), (FULL,))]
    return _periodic_kinds(text, model_type, layers)


def _periodic_kinds(text: Any, model_type: str, layers: int) -> list[str]:
    """Layouts stated by a period, a chunk or a window rather than a list."""
    period = config_value(text, "attn_layer_period")
    if model_type == "jamba" and period:  # JambaConfig.layers_block_type
        offset = _int(text, "attn_layer_offset")
        return [FULL if i % int(period) == offset else STATE for i in range(layers)]
    interval = config_value(text, "full_attention_interval")
    if interval and config_value(text, "linear_num_value_heads"):  # Qwen3-Next without layer_types
        return [FULL if (i + 1) % int(interval) == 0 else STATE for i in range(layers)]
    chunk, no_rope = config_value(text, "attention_chunk_size"), config_value(text, "no_rope_layers")
    if chunk and isinstance(no_rope, list):  # llama4.py: NoPE layers are global, RoPE layers chunked
        return [FULL if i < len(no_rope) and no_rope[i] == 0 else CHUNKED for i in range(layers)]
    if _int(text, "sliding_window") > 0 and config_value(text, "use_sliding_window", True) is not False:
        # Mistral-7B-v0.1 / Phi-3 style: a model-wide window and no layer_types. Every layer's
        # Attention takes cache_config.sliding_window (= ModelConfig.get_sliding_window(), the
        # text config's `sliding_window`; 0 means none) when the model file passes no
        # per-layer window (model_executor/layers/attention/attention.py, config/model.py).
        # transformers' config classes already turn `sliding_window_pattern` (Gemma-3, Cohere2)
        # and Qwen2's `use_sliding_window`/`max_window_layers` into layer_types or None.
        return [SLIDING] * layers
    return [FULL] * layers


def _shared_attention(text: Any, kv_heads: int) -> tuple[int, int] | None:
    """Zamba2's shared blocks attend over the input embedding concatenated to the hidden state
    (zamba2.py Zamba2Attention: num_attention_heads KV heads of attention_head_dim)."""
    if _model_type(text) != "zamba2":
        return None
    heads = _int(text, "num_attention_heads", kv_heads)
    return heads, _int(text, "attention_head_dim") or 2 * _int(text, "hidden_size") // max(heads, 1)


def _ssm_dtype(text: Any) -> str:
    """The recurrent state's default dtype (models/config.py: NemotronH fp32 or its config's;
    Qwen3.5 its `mamba_ssm_dtype`); "auto": the conv dtype."""
    if _model_type(text) == "nemotron_h":
        return str(config_value(text, "mamba_ssm_cache_dtype", "float32"))
    return str(config_value(text, "mamba_ssm_dtype", "auto")).replace("torch.", "")


def _mamba2_shape(text: Any, ssm_dtype: str) -> StateShape | None:
    """From each model's `get_mamba_state_shape_from_config` (or its MambaMixer2 arguments)."""
    hidden, model_type = _int(text, "hidden_size"), _model_type(text)
    shape = None
    if model_type == "nemotron_h":
        heads, dim = _int(text, "mamba_num_heads"), _int(text, "mamba_head_dim")
        shape = (heads * dim, _int(text, "n_groups", 1), heads, dim, _int(text, "ssm_state_size"), _int(text, "conv_kernel", 4))
    elif model_type == "zamba2":  # zamba2.py Zamba2MambaDecoderLayer: head_dim = intermediate // heads
        inner, heads = _int(text, "mamba_expand", 2) * hidden, _int(text, "n_mamba_heads")
        shape = (inner, _int(text, "mamba_ngroups", 1), heads, inner // max(heads, 1), _int(text, "mamba_d_state"),
                 _int(text, "mamba_d_conv", 4))
    elif model_type == "mamba2":
        shape = (_int(text, "expand", 2) * hidden, _int(text, "n_groups", 1), _int(text, "num_heads"),
                 _int(text, "head_dim"), _int(text, "state_size"), _int(text, "conv_kernel", 4))
    elif config_value(text, "mamba_n_heads"):  # granitemoehybrid.py, falcon_h1.py (mamba_d_ssm when set)
        inner = _int(text, "mamba_d_ssm") or int(float(config_value(text, "mamba_expand", 2)) * hidden)
        shape = (inner, _int(text, "mamba_n_groups", 1), _int(text, "mamba_n_heads"), _int(text, "mamba_d_head"),
                 _int(text, "mamba_d_state"), _int(text, "mamba_d_conv", 4))
    if shape is None:
        return None
    inner, groups, heads, dim, state, kernel = shape
    return StateShape("mamba2", heads=heads, head_dim=dim, kernel=kernel, inner=inner, groups=groups, state=state,
                      ssm_dtype=ssm_dtype)


def _state_shape(text: Any) -> StateShape | None:
    """The state one Mamba-style layer holds, by family (None: no family we can size)."""
    linear = config_value(text, "linear_attn_config")
    if isinstance(linear, dict) and linear.get("full_attn_layers"):  # Kimi Linear / K3 KDA
        return StateShape("kda", heads=int(linear.get("num_heads", 0)), head_dim=int(linear.get("head_dim", 0)),
                          kernel=int(linear.get("short_conv_kernel_size", 4)))
    ssm_dtype = _ssm_dtype(text)
    if config_value(text, "linear_num_value_heads"):  # GatedDeltaNet (Qwen3-Next, Qwen3.5)
        return StateShape("gated_delta_net", heads=_int(text, "linear_num_value_heads"),
                          head_dim=_int(text, "linear_value_head_dim"), kernel=_int(text, "linear_conv_kernel_dim", 4),
                          key_heads=_int(text, "linear_num_key_heads"), key_dim=_int(text, "linear_key_head_dim"),
                          ssm_dtype=ssm_dtype)
    model_type = _model_type(text)
    if model_type == "jamba":  # mamba1_state_shape
        return StateShape("mamba1", inner=_int(text, "mamba_expand", 2) * _int(text, "hidden_size"),
                          state=_int(text, "mamba_d_state"), kernel=_int(text, "mamba_d_conv", 4), ssm_dtype=ssm_dtype)
    if model_type in _MAMBA1:
        return StateShape("mamba1", inner=_int(text, "intermediate_size"), state=_int(text, "state_size"),
                          kernel=_int(text, "conv_kernel", 4), ssm_dtype=ssm_dtype)
    return _mamba2_shape(text, ssm_dtype)


def _checkpoint_blocks(text: Any, state: StateShape | None) -> int:
    """Extra state pages a layer holds in `align` cache mode: one for KDA
    (models/kimi_k3/nvidia/kda.py, where its backend aligns) and for every MambaMixer2
    (mamba_mixer2.py get_kv_cache_spec: the block-boundary state exported mid-prefill)."""
    if isinstance(config_value(text, "linear_attn_config"), dict):
        return 1
    if config_value(text, "linear_num_value_heads") or _model_type(text) in _MAMBA1:
        return 0
    return 1 if state is not None and state.family == "mamba2" else 0


def compress_ratios(text: Any) -> list[int] | None:
    """Each decoder layer's compression ratio (0: sliding window only), or None when the model
    is not DeepSeek-V4-shaped. vLLM's own `DeepseekV4Config` keeps the checkpoint's
    `compress_ratios`; transformers' class restates them as `layer_types` named in
    `compress_rates`, which is read back the same way."""
    ratios = config_value(text, "compress_ratios", None)
    if isinstance(ratios, list):
        return [int(r or 0) for r in ratios]
    rates, types = config_value(text, "compress_rates", None), config_value(text, "layer_types", None)
    if isinstance(rates, dict) and isinstance(types, list):
        return [int(rates.get(str(t), 0) or 0) for t in types]
    return None


def _compressed(text: Any) -> CompressedLayout | None:
    ratios = compress_ratios(text)
    if ratios is None:
        return None
    return CompressedLayout(tuple(ratios), _int(text, "num_hidden_layers", len(ratios)), _int(text, "head_dim", 512),
                            _int(text, "index_head_dim", 128), _int(text, "sliding_window", 128))


def _indexer_layers(text: Any, layers: int) -> int:
    """Layers that build a DeepseekV32 indexer (models/deepseek_v2.py, IndexCache)."""
    if config_value(text, "index_topk") is None:
        return 0
    pattern = config_value(text, "index_topk_pattern")
    if pattern:
        return sum(1 for i in range(layers) if i >= len(pattern) or pattern[i] != "S")
    freq, offset = _int(text, "index_topk_freq", 1), _int(text, "index_skip_topk_offset", 2)
    return sum(1 for i in range(layers) if max(i - offset + 1, 0) % freq == 0)


def read_cache_layout(text: Any, layers: int, kv_heads: int) -> CacheLayout:
    """The LLM config's cache layout for its `layers` decoder layers (of `kv_heads` KV heads),
    read once per model."""
    compressed = _compressed(text)
    if compressed is not None:  # DeepSeek-V4: planning/compressed_mla.py sizes every layer
        return CacheLayout(kinds=(), compressed=compressed)
    state = _state_shape(text)
    return CacheLayout(
        kinds=tuple(layer_kinds(text, layers)),
        sliding_window=_int(text, "sliding_window"),
        attention_chunk_size=_int(text, "attention_chunk_size"),
        shared_attention=_shared_attention(text, kv_heads),
        state=state,
        checkpoint_blocks=_checkpoint_blocks(text, state),
        sparse_indexer=config_value(text, "index_topk") is not None,
        indexer_layers=_indexer_layers(text, layers),
        index_head_dim=_int(text, "index_head_dim", 128),
    )
