"""KV cache and state per layer, and the memory vLLM's start-up check demands for them.

Restates vLLM (the releases in specdeploy.vllm; these files are unchanged between them), file by file:
- per-layer specs: `model_executor/layers/attention/attention.py` (full attention:
  num_kv_heads_per_rank x (head_size + head_size_v) x dtype), `.../mla_attention.py`
  (MLA: one latent head of kv_lora_rank + qk_rope_head_dim on every rank; `fp8_ds_mla`
  656 B), `models/deepseek_v2.py` `DeepseekV32IndexerCache` (sparse-MLA indexer: uint8
  index_head_dim + 4 B per 128 for the scale, on every layer that builds an indexer),
  `.../chunked_local_attention.py` (Llama-4's RoPE layers), gpt-oss `layer_types`
  (`SlidingWindowSpec`); which layers hold which cache, and the Mamba/GatedDeltaNet/KDA
  state per layer: geometry/layer_layout.py reads them from the config (once, into the model's
  `CacheLayout`); the state's bytes per rank: `layers/mamba/mamba_utils.py`
  `MambaStateShapeCalculator` (`mamba1_state_shape`: conv (d/tp, kernel-1) + ssm (d/tp, state);
  `mamba2_state_shape`: conv ((d + 2 groups x state)/tp, kernel-1+k) with groups padded to the TP
  size, ssm (heads/tp, head_dim, state); `gated_delta_net_state_shape`, `kda_state_shape`) and
  `MambaStateDtypeCalculator` (conv in the model dtype, ssm in mamba_ssm_cache_dtype; KDA's
  recurrent state fp32);
- what one request needs: `v1/kv_cache_interface.py` `max_memory_usage_bytes` of each spec
  (full: every block of max_model_len; sliding window: window - 1 + in-flight tokens, + 1
  block; chunked: chunk + in-flight tokens; Mamba: (1 + k) state pages, 2 + k in `align`
  cache mode);
- how layers share blocks: `platforms/interface.py` `_align_hybrid_block_size` (hybrid
  Mamba models raise the attention block size until an attention page holds the state,
  and pad the state page to it), `v1/core/kv_cache_utils.py` `get_kv_cache_groups`
  (uniform models: one group; hybrid: pages unified, layers split into groups of equal
  size) and `_max_memory_usage_bytes_from_groups` (bytes per block x blocks of all groups);
- the check: `get_kv_cache_configs` -> `_check_enough_kv_cache_memory`, after holding back
  the null block (`_pool_bytes_per_block`).

Block sizes are the backend's (GPU: 16 by default, 64 for the MLA backends); the CPU build
uses 128, which the parity suite passes in explicitly."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from specdeploy.geometry import Geometry

from specdeploy.geometry.layer_layout import CHUNKED, FULL, INDEXER, MLA, SLIDING, STATE, StateShape
from specdeploy.planning import compressed_mla
from specdeploy.vllm.methods import built_draft_tp, method_named

FULL_KINDS = frozenset({FULL, MLA, INDEXER})  # every block of max_model_len, one group if alone
FP8_DS_MLA_BYTES = 656  # MLAAttentionSpec page per token with cache_dtype_str fp8_ds_mla
INDEXER_QUANT_BLOCK = 128  # DeepseekV32IndexerCache: one fp32 scale per 128 uint8 values
GPU_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE
GPU_MLA_BLOCK_SIZE = 64  # FlashMLA / FlashInfer-MLA kernel block size
_KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "bfloat16": 2, "float16": 2}
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


@dataclass(frozen=True)
class LayerCache:
    """`layers` layers of one model with the same cache, on one GPU.

    Attention kinds cost `bytes_per_token`; `window` is the sliding window or attention
    chunk. The state kind (Mamba/KDA/GatedDeltaNet) holds `state_bytes` per sequence and
    state page, whatever the length."""

    kind: str
    layers: int
    bytes_per_token: int = 0
    window: int = 0
    state_bytes: int = 0
    model: str = "target"
    checkpoint_blocks: int = 0  # extra state pages in align mode (KDA prefill checkpoints)
    block_size: int = 0  # the layer's own block size (DeepSeek-V4's packed caches); 0: the backend's
    page_bytes: int = 0  # its page, padded, when block_size is its own

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"model": self.model, "kind": self.kind, "layers": self.layers}
        if self.kind == STATE:
            data["stateBytesPerSequence"] = self.state_bytes
        else:
            data["bytesPerToken"] = self.bytes_per_token
        if self.window:
            data["window"] = self.window
        if self.block_size:
            data["blockSize"], data["pageBytes"] = self.block_size, self.page_bytes
        return data


@dataclass(frozen=True)
class CacheNeed:
    """What vLLM's start-up check needs for `sequences` requests of max_model_len."""

    bytes: int  # includes the null block
    block_size: int  # attention block size after hybrid alignment
    bytes_per_block: int  # one block across every layer group
    blocks_per_sequence: int
    groups: int


def dtype_bytes(dtype: str) -> int:
    """vLLM serves float32 checkpoints in 16 bits under dtype=auto."""
    return min(_DTYPE_BYTES.get(dtype, 2), 2)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    return _KV_DTYPE_BYTES.get(kv_cache_dtype, dtype_bytes(model_dtype))


def _per_stage(count: int, pp: int) -> int:
    return math.ceil(count / pp) if count else 0


def state_bytes(shape: StateShape | None, tp: int, k: int, model_dtype: str, ssm_dtype: str = "auto") -> int:
    """One layer's conv + recurrent state on one rank, with k speculative columns."""
    if shape is None:
        return 0
    conv_bytes = dtype_bytes(model_dtype)
    ssm = _DTYPE_BYTES.get(shape.ssm_dtype if ssm_dtype == "auto" else ssm_dtype, conv_bytes)
    if shape.family == "kda":  # q, k and v share one conv state; the recurrent state is fp32 by default
        conv = (shape.heads * shape.head_dim * 3) // tp * (shape.kernel - 1 + k)
        recurrent = shape.heads // tp * shape.head_dim * shape.head_dim
        return conv * conv_bytes + recurrent * (4 if ssm_dtype == "auto" else _DTYPE_BYTES[ssm_dtype])  # kda_state_dtype
    if shape.family == "gated_delta_net":
        conv = (shape.key_dim * shape.key_heads * 2 + shape.head_dim * shape.heads) // tp * (shape.kernel - 1 + k)
        return conv * conv_bytes + shape.heads // tp * shape.head_dim * shape.key_dim * ssm
    if shape.family == "mamba1":  # mamba1_state_shape: no speculative columns
        return shape.inner // tp * (shape.kernel - 1) * conv_bytes + shape.inner // tp * shape.state * ssm
    # extra_groups_for_head_shards: groups replicated to follow the head shards
    groups = tp if shape.groups % tp else shape.groups
    conv = (shape.inner + 2 * groups * shape.state) // tp * (shape.kernel - 1 + k)
    return conv * conv_bytes + shape.heads // tp * shape.head_dim * shape.state * ssm


def model_layer_caches(model: Geometry, tp: int, pp: int, kv_cache_dtype: str, k: int = 0,
                       layers: int | None = None, role: str = "target",
                       mamba_ssm_cache_dtype: str = "auto") -> list[LayerCache]:
    """The caches of one model's layers on one GPU of the busiest pipeline stage, from its
    `CacheLayout` (geometry/layer_layout.py). `layers` overrides the layer count (MTP drafts
    build n_predict layers of the target's kind)."""
    layout = model.layout
    if layout.compressed is not None:
        return _compressed_mla_caches(model, pp, kv_cache_dtype, layers, role)
    count = model.num_layers if layers is None else layers
    kinds = layout.kinds if layers is None else (FULL,) * count
    per_kind: dict[str, int] = {}
    for kind in kinds:
        per_kind[kind] = per_kind.get(kind, 0) + 1
    kv_bytes = kv_dtype_bytes(kv_cache_dtype, model.dtype)
    out: list[LayerCache] = []
    for kind, n in per_kind.items():
        n = _per_stage(n, pp)
        state = state_bytes(layout.state, tp, k, model.dtype, mamba_ssm_cache_dtype) if kind == STATE else 0
        if state:
            out.append(LayerCache(STATE, n, state_bytes=state, model=role, checkpoint_blocks=layout.checkpoint_blocks))
            continue
        # A state layer of a family we cannot size is counted as full attention: more than
        # vLLM needs, never less.
        if model.uses_mla:
            # Sparse MLA backends (FLASHMLA_SPARSE) canonicalize a quantized KV dtype to fp8_ds_mla.
            fp8_ds = kv_cache_dtype == "fp8_ds_mla" or (layout.sparse_indexer and kv_bytes == 1)
            per_token = FP8_DS_MLA_BYTES if fp8_ds else model.head_size * kv_bytes
            out.append(LayerCache(MLA, n, per_token, model=role))
            continue
        kv_heads, head_size = layout.shared_attention or (model.num_kv_heads, model.head_size)
        per_token = max(1, kv_heads // tp) * 2 * head_size * kv_bytes
        window = layout.sliding_window if kind == SLIDING else layout.attention_chunk_size if kind == CHUNKED else 0
        out.append(LayerCache(kind if window else FULL, n, per_token, window, model=role))
    indexers = layout.indexer_layers if layers is None else (count if layout.sparse_indexer else 0)
    if indexers and model.uses_mla:
        dim = layout.index_head_dim
        out.append(LayerCache(INDEXER, _per_stage(indexers, pp), dim + dim // INDEXER_QUANT_BLOCK * 4, model=role))
    return out


def _compressed_mla_caches(model: Geometry, pp: int, kv_cache_dtype: str, layers: int | None,
                           role: str) -> list[LayerCache]:
    """DeepSeek-V4 (planning/compressed_mla.py): the same caches on every TP rank; an MTP
    draft's layers come after the target's and keep only the sliding window."""
    compressed = model.layout.compressed
    assert compressed is not None
    if layers is None:
        specs = compressed_mla.layer_specs(compressed, model.num_layers, kv_cache_dtype)
    else:
        specs = compressed_mla.layer_specs(compressed, layers, kv_cache_dtype, first_layer=model.num_layers)
    counts: dict[compressed_mla.PackedSpec, int] = {}
    for spec in specs:
        counts[spec] = counts.get(spec, 0) + 1
    return [LayerCache(spec.name, _per_stage(n, pp), -(-spec.page_bytes // spec.block_size), spec.window,
                       model=role, block_size=spec.block_size, page_bytes=spec.page_bytes)
            for spec, n in counts.items()]


def promote_local_to_full(caches: list[LayerCache]) -> list[LayerCache]:
    """Without the hybrid KV cache manager (`kv_cache_utils.unify_hybrid_kv_cache_specs` ->
    `_promote_local_kv_cache_specs`), sliding-window and chunked layers beside full ones are
    allocated as full attention: every block of max_model_len."""
    if not any(c.kind == FULL for c in caches) or not any(c.kind in (SLIDING, CHUNKED) for c in caches):
        return caches
    return [LayerCache(FULL, c.layers, c.bytes_per_token, model=c.model) if c.kind in (SLIDING, CHUNKED) else c
            for c in caches]


def default_block_size(caches: Iterable[LayerCache], release_block_size: int = GPU_BLOCK_SIZE) -> int:
    """The GPU backend's block size: 64 for the MLA kernels, else the release's default
    (CacheConfig.DEFAULT_BLOCK_SIZE; 16 when none is given)."""
    return GPU_MLA_BLOCK_SIZE if any(c.kind == MLA for c in caches) else release_block_size


def _attention_blocks(cache: LayerCache, block_size: int, max_model_len: int, in_flight: int,
                      extra_retained: int) -> int:
    """Blocks one request holds (kv_cache_interface.py max_admission_blocks_per_request)."""
    if cache.kind == SLIDING:
        return math.ceil(min(cache.window - 1 + extra_retained + in_flight, max_model_len) / block_size) + 1
    if cache.kind == CHUNKED:
        return math.ceil(min(cache.window + in_flight, max_model_len) / block_size)
    return math.ceil(max_model_len / block_size)


def _hybrid_block_size(caches: list[LayerCache], block_size: int) -> tuple[int, int]:
    """(attention block size, state page bytes) after `_align_hybrid_block_size`: the
    smallest multiple of the kernel alignment whose attention page holds one state page
    (MLA: a multiple of 128 tokens); the state page is padded to that attention page."""
    states = [c for c in caches if c.kind == STATE]
    attention = [c for c in caches if c.kind != STATE and c.model == "target" and c.kind != INDEXER]
    if not states or not attention:
        return block_size, max((c.state_bytes for c in states), default=0)
    page_1 = attention[0].bytes_per_token
    state_page = max(c.state_bytes for c in states)
    align = max(block_size, 128) if attention[0].kind == MLA else block_size
    aligned = align * math.ceil(state_page / (align * page_1))
    block = max(block_size, aligned)
    return block, block * page_1


def cache_need(caches: list[LayerCache], *, max_model_len: int, in_flight_tokens: int, sequences: int = 1,
               block_size: int | None = None, num_speculative_tokens: int = 0, mamba_align_mode: bool = False,
               extra_retained_tokens: int = 0) -> CacheNeed:
    """Bytes vLLM's start-up check needs on this GPU for `sequences` requests of
    max_model_len, counted through its block groups, plus the null block. `in_flight_tokens`:
    the scheduled tokens sliding-window and chunked layers keep blocks for (memory.in_flight_tokens)."""
    caches = [c for c in caches if c.layers]
    if not caches:
        return CacheNeed(0, block_size or GPU_BLOCK_SIZE, 0, 0, 0)
    if any(c.block_size for c in caches):  # DeepSeek-V4's packed layout: block sizes are the layers' own
        specs = [compressed_mla.PackedSpec(c.kind, c.block_size, c.page_bytes, c.window)
                 for c in caches for _ in range(c.layers)]
        total, per_block, blocks, groups = compressed_mla.packed_need(
            specs, max_model_len=max_model_len, sequences=sequences, in_flight_tokens=in_flight_tokens,
            extra_retained_tokens=extra_retained_tokens)
        return CacheNeed(total, compressed_mla.COMPRESSED_BLOCK, per_block, blocks, groups)
    base = block_size or default_block_size(caches)
    block, state_page = _hybrid_block_size(caches, base)

    specs: list[tuple[LayerCache, int, int]] = []  # (cache, page bytes, blocks per request)
    for c in caches:
        if c.kind == STATE:  # MambaSpec.max_memory_usage_bytes
            pages = (2 + c.checkpoint_blocks if mamba_align_mode else 1) + num_speculative_tokens
            specs.append((c, state_page or c.state_bytes, pages))
        else:
            specs.append((c, block * c.bytes_per_token, _attention_blocks(c, block, max_model_len, in_flight_tokens, extra_retained_tokens)))

    if all(c.kind in FULL_KINDS for c in caches):
        # One group (is_kv_cache_spec_uniform / UniformTypeKVCacheSpecs): every layer's
        # page in one block, cdiv(max_model_len, block) blocks.
        per_block = sum(page * c.layers for c, page, _ in specs)
        blocks = max(b for _, _, b in specs)
        return CacheNeed(per_block * (sequences * blocks + 1), block, per_block, blocks, 1)

    # Hybrid: unify page sizes (a smaller attention page takes proportionally more
    # tokens per block when it divides the largest page, else it is padded; state pages
    # are padded), then split each bucket into groups of `group_size` layers.
    max_page = max(page for _, page, _ in specs)
    buckets: dict[tuple[str, int, int, int], int] = {}
    for c, page, blocks in specs:
        if page != max_page and c.kind != STATE and max_page % page == 0:
            ratio = max_page // page
            blocks = _attention_blocks(c, block * ratio, max_model_len, in_flight_tokens, extra_retained_tokens)
        key = (c.kind, c.bytes_per_token or c.state_bytes, c.window, blocks)
        buckets[key] = buckets.get(key, 0) + c.layers
    sizes = list(buckets.values())
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    widest, total_blocks, groups = 0, 0, 0
    for (_, _, _, blocks), layers in buckets.items():
        n_groups = math.ceil(layers / group_size)
        widest = max(widest, math.ceil(layers / n_groups))
        total_blocks += n_groups * blocks
        groups += n_groups
    per_block = widest * max_page
    return CacheNeed(per_block * (sequences * total_blocks + 1), block, per_block, total_blocks, groups)


# ---- which layers each method builds, and what vLLM's start-up check needs for them ----------------

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
    return promote_local_to_full(caches) if chunked and record.uses_target_hidden_states else caches


def _hidden_state_cache(target: Geometry) -> list[LayerCache]:
    """extract_hidden_states' one cache-only layer (models/extract_hidden_states.py
    CacheOnlyAttentionLayer: one head per captured layer of hidden_size, HiddenStateCacheSpec, an
    MLA-kind spec, so no separate V), in the model's dtype whatever the KV dtype, unsplit by TP.
    Counted as one full-attention layer of that width (vLLM groups it apart: an estimate)."""
    if not target.aux_hidden_state_layers:
        return []
    return [LayerCache(FULL, 1, bytes_per_token=target.aux_hidden_state_layers * target.hidden_size * target.served_dtype_bytes, model="draft")]


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
