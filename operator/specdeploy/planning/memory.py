"""Per-GPU memory of a layout: weights + KV cache + a reserve for activations.

KV sizes follow vllm/v1/kv_cache_interface.py: full attention stores K and V per KV
head; MLA stores one latent of (kv_lora_rank + qk_rope_head_dim) per token and layer,
replicated on every TP rank (only decode-context parallelism would shrink it)."""

from __future__ import annotations

import math

from specdeploy.geometry import Geometry

GIB = 1024**3
_DTYPE_BYTES = {"float32": 2, "float": 2, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}
_KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2}
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # MLAAttentionSpec with the fp8_ds_mla layout


def model_dtype_bytes(model: Geometry) -> int:
    """vLLM serves float32 checkpoints in 16-bit under dtype=auto, so 4 never appears."""
    return _DTYPE_BYTES.get(model.dtype, 2)


def _attention_params(m: Geometry) -> int:
    h = m.hidden_size
    if m.uses_mla:
        nope, rope, v = m.qk_nope_head_dim or 0, m.qk_rope_head_dim or 0, m.v_head_dim or 0
        q = (h * m.q_lora_rank + m.q_lora_rank * m.num_attention_heads * (nope + rope)) if m.q_lora_rank else h * m.num_attention_heads * (nope + rope)
        kv = h * ((m.kv_lora_rank or 0) + rope) + (m.kv_lora_rank or 0) * m.num_attention_heads * (nope + v)
        return q + kv + m.num_attention_heads * v * h
    return h * m.head_dim * (m.num_attention_heads * 2 + m.num_kv_heads * 2)


def _linear_attention_params(m: Geometry) -> int:
    width = m.linear_attn_heads * m.linear_attn_head_dim or m.num_attention_heads * m.head_dim
    return 4 * m.hidden_size * width  # q, k, v, o (gates and convs are small)


def estimate_parameters(m: Geometry) -> tuple[int, int]:
    """(16-bit parameters, quantizable expert parameters): quantized checkpoints usually
    quantize the routed experts and keep attention, norms and embeddings in 16 bits."""
    embed = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    attention = m.num_kv_cache_layers * _attention_params(m) + m.num_state_layers * _linear_attention_params(m)
    if m.is_moe:
        dense_layers = min(m.first_dense_layers, m.num_layers)
        moe_layers = m.num_layers - dense_layers
        expert = 3 * m.expert_hidden_size * m.moe_intermediate_size
        routed = moe_layers * m.num_experts * expert
        shared = moe_layers * m.num_shared_experts * 3 * m.hidden_size * m.moe_intermediate_size
        dense = dense_layers * 3 * m.hidden_size * m.intermediate_size
        router = moe_layers * m.hidden_size * m.num_experts
        return embed + attention + shared + dense + router, routed
    return embed + attention + m.num_layers * 3 * m.hidden_size * m.intermediate_size, 0


def estimate_weight_bytes(m: Geometry) -> int:
    """Checkpoint size from the config, for when the Hub's safetensors index is not known."""
    plain, routed = estimate_parameters(m)
    if m.weight_bits:
        quantized_share = routed if routed else plain  # dense quantized models quantize every Linear
        plain = plain - (0 if routed else plain)
        return int(plain * model_dtype_bytes(m) + quantized_share * m.weight_bits / 8)
    return (plain + routed) * model_dtype_bytes(m)


def kv_bytes_per_token(m: Geometry, tp: int, pp: int, kv_cache_dtype: str, layers: int | None = None) -> int:
    """KV bytes one token costs on one GPU of the busiest pipeline stage."""
    layers_per_stage = math.ceil((layers if layers is not None else m.num_kv_cache_layers) / pp)
    if m.uses_mla:
        if kv_cache_dtype == "fp8_ds_mla":
            return layers_per_stage * FP8_DS_MLA_BYTES_PER_TOKEN
        return layers_per_stage * m.head_size * _KV_DTYPE_BYTES.get(kv_cache_dtype, model_dtype_bytes(m))
    kv_heads_per_gpu = max(1, m.num_kv_heads // tp)
    return layers_per_stage * 2 * kv_heads_per_gpu * m.head_size * _KV_DTYPE_BYTES.get(kv_cache_dtype, model_dtype_bytes(m))


def state_bytes_per_sequence(m: Geometry, tp: int, pp: int) -> int:
    """Fixed recurrent state of linear-attention layers (Kimi-K3's KDA): heads x d x d in
    fp32 per layer, split across TP."""
    if not m.num_state_layers:
        return 0
    heads = max(1, (m.linear_attn_heads or m.num_attention_heads) // tp)
    d = m.linear_attn_head_dim or m.head_dim
    return math.ceil(m.num_state_layers / pp) * heads * d * d * 4


def activation_reserve_gib(gpu_memory_gib: float) -> float:
    """What vLLM's profiling run typically claims beyond weights and KV (activations,
    CUDA graphs, NCCL buffers): an estimate, stated in the plan as one."""
    return max(2.0, 0.04 * gpu_memory_gib)
