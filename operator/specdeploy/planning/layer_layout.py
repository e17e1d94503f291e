"""Which cache each decoder layer holds, and how big a Mamba-style layer's state is.

Restates vLLM's model files (the releases in specdeploy.vllm; unchanged between them):
- the layer layout: `layer_types` (gpt-oss, Gemma, Qwen3.5, GraniteMoeHybrid), `layers_block_type`
  (Jamba `attention`/`mamba`, Zamba2 `hybrid` = Mamba + shared attention, transformers' own form
  of NemotronH), NemotronH's `hybrid_override_pattern` (`M` Mamba, `*` attention, `-`/`E` MLP or
  MoE: no cache), Falcon-H1's parallel hybrid (every layer holds both), Kimi's
  `linear_attn_config.full_attn_layers`, Qwen3-Next's `full_attention_interval`, Llama-4's
  chunked RoPE layers, a model-wide sliding window, Mamba/Mamba2 checkpoints (state only);
- the state per layer and rank: `layers/mamba/mamba_utils.py` `MambaStateShapeCalculator`
  (`mamba1_state_shape`: conv (d/tp, kernel-1) + ssm (d/tp, state); `mamba2_state_shape`: conv
  ((d + 2 groups x state)/tp, kernel-1+k) with groups padded to the TP size, ssm (heads/tp,
  head_dim, state); `gated_delta_net_state_shape`, `kda_state_shape`) with each model's
  `get_mamba_state_shape_from_config` naming the config keys, and `MambaStateDtypeCalculator`
  (conv in the model dtype, ssm in mamba_ssm_cache_dtype; KDA's recurrent state fp32;
  NemotronH defaults to fp32, Qwen3.5 to its `mamba_ssm_dtype`: models/config.py)."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.hf_config import config_value

FULL, MLA, INDEXER, SLIDING, CHUNKED, STATE = "full", "mla", "indexer", "sliding_window", "chunked_local", "state"
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
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


def dtype_bytes(dtype: str) -> int:
    """vLLM serves float32 checkpoints in 16 bits under dtype=auto."""
    return min(_DTYPE_BYTES.get(dtype, 2), 2)


def _model_type(text: Any) -> str:
    return str(config_value(text, "model_type", ""))


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
    period = config_value(text, "attn_layer_period")
    if model_type == "jamba" and period:  # JambaConfig.layers_block_type
        offset = int(config_value(text, "attn_layer_offset", 0))
        return [FULL if i % int(period) == offset else STATE for i in range(layers)]
    interval = config_value(text, "full_attention_interval")
    if interval and config_value(text, "linear_num_value_heads"):  # Qwen3-Next without layer_types
        return [FULL if (i + 1) % int(interval) == 0 else STATE for i in range(layers)]
    chunk, no_rope = config_value(text, "attention_chunk_size"), config_value(text, "no_rope_layers")
    if chunk and isinstance(no_rope, list):  # llama4.py: NoPE layers are global, RoPE layers chunked
        return [FULL if i < len(no_rope) and no_rope[i] == 0 else CHUNKED for i in range(layers)]
    if int(config_value(text, "sliding_window", 0) or 0) > 0 and config_value(text, "use_sliding_window", True) is not False:
        # Mistral-7B-v0.1 / Phi-3 style: a model-wide window and no layer_types. Every layer's
        # Attention takes cache_config.sliding_window (= ModelConfig.get_sliding_window(), the
        # text config's `sliding_window`; 0 means none) when the model file passes no
        # per-layer window (model_executor/layers/attention/attention.py, config/model.py).
        # transformers' config classes already turn `sliding_window_pattern` (Gemma-3, Cohere2)
        # and Qwen2's `use_sliding_window`/`max_window_layers` into layer_types or None.
        return [SLIDING] * layers
    return [FULL] * layers


def attention_shape(text: Any, kv_heads: int, head_size: int, tp: int) -> tuple[int, int]:
    """(KV heads on one rank, head size) of a non-MLA attention layer. Zamba2's shared blocks
    attend over the input embedding concatenated to the hidden state (zamba2.py
    Zamba2Attention: num_attention_heads KV heads of attention_head_dim)."""
    if _model_type(text) == "zamba2":
        heads = int(config_value(text, "num_attention_heads", kv_heads))
        dim = int(config_value(text, "attention_head_dim", 0) or 2 * int(config_value(text, "hidden_size", 0)) // max(heads, 1))
        return max(1, heads // tp), dim
    return max(1, kv_heads // tp), head_size


def _ssm_bytes(text: Any, ssm_dtype: str, conv_bytes: int) -> int:
    """The recurrent state's element size: --mamba-ssm-cache-dtype, else the model's default
    (models/config.py: NemotronH fp32 or its config's; Qwen3.5 its `mamba_ssm_dtype`), else the
    conv dtype."""
    if ssm_dtype == "auto":
        if _model_type(text) == "nemotron_h":
            ssm_dtype = str(config_value(text, "mamba_ssm_cache_dtype", "float32"))
        else:
            ssm_dtype = str(config_value(text, "mamba_ssm_dtype", "auto")).replace("torch.", "")
    return _DTYPE_BYTES.get(ssm_dtype, conv_bytes)


def _mamba2_keys(text: Any) -> tuple[int, int, int, int, int, int] | None:
    """(intermediate, groups, heads, head_dim, state, kernel) from each model's
    `get_mamba_state_shape_from_config` (or its MambaMixer2 arguments)."""
    get = lambda key, default=0: int(config_value(text, key, default))  # noqa: E731
    hidden, model_type = get("hidden_size"), _model_type(text)
    if model_type == "nemotron_h":
        heads, dim = get("mamba_num_heads"), get("mamba_head_dim")
        return heads * dim, get("n_groups", 1), heads, dim, get("ssm_state_size"), get("conv_kernel", 4)
    if model_type == "zamba2":  # zamba2.py Zamba2MambaDecoderLayer: head_dim = intermediate // heads
        inner, heads = get("mamba_expand", 2) * hidden, get("n_mamba_heads")
        return inner, get("mamba_ngroups", 1), heads, inner // max(heads, 1), get("mamba_d_state"), get("mamba_d_conv", 4)
    if model_type == "mamba2":
        return (get("expand", 2) * hidden, get("n_groups", 1), get("num_heads"), get("head_dim"),
                get("state_size"), get("conv_kernel", 4))
    if config_value(text, "mamba_n_heads"):  # granitemoehybrid.py, falcon_h1.py (mamba_d_ssm when set)
        inner = get("mamba_d_ssm") or int(float(config_value(text, "mamba_expand", 2)) * hidden)
        return (inner, get("mamba_n_groups", 1), get("mamba_n_heads"), get("mamba_d_head"),
                get("mamba_d_state"), get("mamba_d_conv", 4))
    return None


def prefill_checkpoint_blocks(text: Any) -> int:
    """Extra state pages a layer holds in `align` cache mode: one for KDA
    (models/kimi_k3/nvidia/kda.py, where its backend aligns) and for every MambaMixer2
    (mamba_mixer2.py get_kv_cache_spec: the block-boundary state exported mid-prefill)."""
    if isinstance(config_value(text, "linear_attn_config"), dict):
        return 1
    if config_value(text, "linear_num_value_heads") or _model_type(text) in _MAMBA1:
        return 0
    return 1 if _mamba2_keys(text) else 0


def state_bytes(text: Any, tp: int, k: int, model_dtype: str, ssm_dtype: str = "auto") -> int:
    """One layer's conv + recurrent state on one rank, with k speculative columns."""
    conv_bytes = dtype_bytes(model_dtype)
    get = lambda key, default=0: int(config_value(text, key, default))  # noqa: E731
    linear = config_value(text, "linear_attn_config")
    if isinstance(linear, dict) and linear.get("full_attn_layers"):  # Kimi Linear / K3 KDA
        heads, d = int(linear.get("num_heads", 0)), int(linear.get("head_dim", 0))
        kernel = int(linear.get("short_conv_kernel_size", 4))
        conv = (heads * d * 3) // tp * (kernel - 1 + k)  # q, k and v share one conv state
        recurrent = heads // tp * d * d
        return conv * conv_bytes + recurrent * (4 if ssm_dtype == "auto" else _DTYPE_BYTES[ssm_dtype])  # kda_state_dtype
    if config_value(text, "linear_num_value_heads"):  # GatedDeltaNet (Qwen3-Next, Qwen3.5)
        k_heads, v_heads = get("linear_num_key_heads"), get("linear_num_value_heads")
        k_dim, v_dim = get("linear_key_head_dim"), get("linear_value_head_dim")
        conv = (k_dim * k_heads * 2 + v_dim * v_heads) // tp * (get("linear_conv_kernel_dim", 4) - 1 + k)
        return conv * conv_bytes + v_heads // tp * v_dim * k_dim * _ssm_bytes(text, ssm_dtype, conv_bytes)
    model_type = _model_type(text)
    if model_type in _MAMBA1:  # mamba1_state_shape: no speculative columns
        if model_type == "jamba":
            inner, state, kernel = get("mamba_expand", 2) * get("hidden_size"), get("mamba_d_state"), get("mamba_d_conv", 4)
        else:
            inner, state, kernel = get("intermediate_size"), get("state_size"), get("conv_kernel", 4)
        return inner // tp * (kernel - 1) * conv_bytes + inner // tp * state * _ssm_bytes(text, ssm_dtype, conv_bytes)
    mamba2 = _mamba2_keys(text)
    if mamba2:
        inner, groups, heads, dim, state, kernel = mamba2
        if groups % tp:  # extra_groups_for_head_shards: groups replicated to follow the head shards
            groups = tp
        conv = (inner + 2 * groups * state) // tp * (kernel - 1 + k)
        return conv * conv_bytes + heads // tp * dim * state * _ssm_bytes(text, ssm_dtype, conv_bytes)
    return 0
