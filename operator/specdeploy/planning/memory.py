"""Per-GPU memory of a layout: weights + KV cache + a reserve for activations.

The KV cache and state of every layer, which layers each method builds, and the need vLLM's
start-up check counts for them, are in planning/kv_cache.py; this module sizes the weights."""

from __future__ import annotations

from specdeploy.geometry import Geometry
from specdeploy.vllm.methods import method_named

GIB = 1024**3


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
        return int(plain * m.served_dtype_bytes + quantized_share * m.weight_bits / 8)
    return (plain + routed) * m.served_dtype_bytes






def estimate_draft_weight_bytes(method: str, draft: Geometry, target_vocab_size: int) -> int:
    """The draft's checkpoint size from its config, without what it shares with the target."""
    total = estimate_weight_bytes(draft)
    if not method_named(method).shares_target_embeddings:
        return total
    embed = draft.vocab_size * draft.hidden_size * (1 if draft.tie_word_embeddings else 2)
    own_head = draft.draft_vocab_size * draft.hidden_size if draft.draft_vocab_size and draft.draft_vocab_size != target_vocab_size else 0
    return max(0, total - embed * draft.served_dtype_bytes) + own_head * draft.served_dtype_bytes


def activation_reserve_gib(gpu_memory_gib: float) -> float:
    """What vLLM's profiling run typically claims beyond weights and KV (activations,
    CUDA graphs, NCCL buffers): an estimate, stated in the plan as one."""
    return max(2.0, 0.04 * gpu_memory_gib)
