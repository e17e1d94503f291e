"""Per-GPU memory of a layout: weights + KV cache + a reserve for activations.

The KV cache and state of every layer, and the need vLLM's start-up check counts for
them, are in planning/kv_cache.py; this module says which layers each method builds."""

from __future__ import annotations

from specdeploy.geometry import Geometry
from specdeploy.vllm.methods import built_draft_tp, method_named
from specdeploy.planning.kv_cache import (FULL, STATE, CacheNeed, LayerCache, cache_need, default_block_size,
                                          model_layer_caches, promote_local_to_full)

GIB = 1024**3
_DTYPE_BYTES = {"float32": 2, "float": 2, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}


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






def estimate_draft_weight_bytes(method: str, draft: Geometry, target_vocab_size: int) -> int:
    """The draft's checkpoint size from its config, without what it shares with the target."""
    total = estimate_weight_bytes(draft)
    if not method_named(method).shares_target_embeddings:
        return total
    embed = draft.vocab_size * draft.hidden_size * (1 if draft.tie_word_embeddings else 2)
    own_head = draft.draft_vocab_size * draft.hidden_size if draft.draft_vocab_size and draft.draft_vocab_size != target_vocab_size else 0
    return max(0, total - embed * model_dtype_bytes(draft)) + own_head * model_dtype_bytes(draft)


def layer_caches(method: str, target: Geometry, draft: Geometry | None, tp: int, draft_tp: int | None,
                 pp: int, kv_cache_dtype: str, k: int, mamba_ssm_cache_dtype: str = "auto") -> list[LayerCache]:
    """Every layer cache vLLM allocates on one GPU: the target's, then the draft's."""
    caches = model_layer_caches(target, tp, pp, kv_cache_dtype, k, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype)
    record = method_named(method)
    if record.keeps_hidden_state_cache:
        return caches + _hidden_state_cache(target)
    if draft is None or not record.keeps_draft_kv_cache:
        return caches
    built_tp = built_draft_tp(record, tp, draft_tp) or tp
    if record.target_mtp_layers:  # the target's own MTP layers, of the target's attention kind
        layers = (draft.mtp.n_predict if draft.mtp else None) or 1
        caches = caches + model_layer_caches(draft, built_tp, 1, kv_cache_dtype, k, layers=layers, role="draft")
    else:
        caches = caches + model_layer_caches(draft, built_tp, 1, kv_cache_dtype, k, layers=draft.num_kv_cache_layers,
                                             role="draft")
    # config/vllm.py: chunked local attention + an EAGLE-style drafter disables the hybrid KV
    # cache manager, so the chunked layers are allocated as full attention.
    chunked = target.layout.attention_chunk_size
    return promote_local_to_full(caches) if chunked and record.use_eagle else caches


def _hidden_state_cache(target: Geometry) -> list[LayerCache]:
    """extract_hidden_states' one cache-only layer (models/extract_hidden_states.py
    CacheOnlyAttentionLayer: one head per captured layer of hidden_size, HiddenStateCacheSpec, an
    MLA-kind spec, so no separate V), in the model's dtype whatever the KV dtype, unsplit by TP.
    Counted as one full-attention layer of that width (vLLM groups it apart: an estimate)."""
    if not target.aux_hidden_state_layers:
        return []
    return [LayerCache(FULL, 1, bytes_per_token=target.aux_hidden_state_layers * target.hidden_size * model_dtype_bytes(target), model="draft")]


def attention_bytes_per_token(caches: list[LayerCache]) -> int:
    """What one more token of context costs on this GPU across its attention layers."""
    return sum(c.bytes_per_token * c.layers for c in caches if c.kind != STATE)


def state_bytes_per_sequence(caches: list[LayerCache]) -> int:
    """Fixed per-sequence state of the Mamba-style layers (one page, before padding)."""
    return sum(c.state_bytes * c.layers for c in caches if c.kind == STATE)


def in_flight_tokens(max_num_batched_tokens: int, pp: int = 1) -> int:
    """Tokens scheduled but not yet freed on a GPU (config/vllm.py `max_in_flight_tokens`:
    `max_concurrent_batches` x max_num_batched_tokens), which sliding-window and chunked layers
    keep blocks for. Async scheduling is on by default and keeps pp + 1 batches in flight (Model
    Runner V2): for every method from 0.33; 0.32 turns it off for the methods without a draft
    model (ngram, suffix, Medusa, MLP speculator: one batch), where this counts one batch more
    than needed. The CPU platform turns it off (platforms/cpu.py): a CPU run of vLLM counts half.
    max_num_batched_tokens is the release's default for the GPU or the user's (planning/batch.py)."""
    return (pp + 1) * max_num_batched_tokens


def kv_cache_need(caches: list[LayerCache], max_model_len: int, sequences: int, k: int, *,
                  max_num_batched_tokens: int, pp: int = 1, release_block_size: int | None = None) -> CacheNeed:
    """The GPU start-up check's figure: prefix caching is on by default for generation
    models (engine/arg_utils.py), which puts hybrid models in Mamba `align` mode. Blocks are
    the judging release's CacheConfig.DEFAULT_BLOCK_SIZE (VllmFacts.default_block_size), or
    the MLA backends'."""
    block_size = default_block_size(caches, release_block_size) if release_block_size else None
    return cache_need(caches, max_model_len=max_model_len, sequences=sequences, num_speculative_tokens=k,
                      block_size=block_size, mamba_align_mode=True,
                      in_flight_tokens=in_flight_tokens(max_num_batched_tokens, pp))


def activation_reserve_gib(gpu_memory_gib: float) -> float:
    """What vLLM's profiling run typically claims beyond weights and KV (activations,
    CUDA graphs, NCCL buffers): an estimate, stated in the plan as one."""
    return max(2.0, 0.04 * gpu_memory_gib)
