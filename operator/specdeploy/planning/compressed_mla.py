"""DeepSeek-V4's compressed MLA: the caches its layers build, and how vLLM packs them.

Restates vLLM (the releases in specdeploy.vllm), file by file:
- `models/deepseek_v4/attention.py` `DeepseekV4MLAAttention`: every layer keeps a sliding
  window cache (`DeepseekV4SWACache`, `v1/attention/backends/mla/sparse_swa.py`: 64-token
  blocks, window `sliding_window`); a layer with `compress_ratios[i]` r > 1 also keeps the
  compressed cache (`MLAAttentionSpec` with `tokens_per_state` r: 256 // r states per
  256-token block) and its compressor's state (`compressor.py` `CompressorStateCache`: a
  `SlidingWindowMLASpec` of fp32 rows of 2 x coff x head_dim, coff = 2 for r = 4 (overlap),
  window coff x r, block 4 for r = 4 and 8 for r = 128); only r = 4 layers build the
  indexer (`DeepseekV4Indexer`: a compressed k cache of index_head_dim fp8 + one fp32 scale
  per 128, and its own compressor state). MTP layers (index >= num_hidden_layers) are r = 1.
- every spec is replicated on each TP rank (`max_tp_shards=1`, one KV head);
- `_resolve_dsv4_kv_cache_dtype`: the FlashMLA sparse layout stores `fp8_ds_mla` rows of
  584 B (448 NoPE + 128 RoPE + 8 scale) whatever `--kv-cache-dtype` (auto -> fp8); pages
  are padded to 576 B (512 B for the plain-row bf16 layout of other backends);
- `v1/kv_cache_interface.py` `_apply_alignment_padding`, `SlidingWindowSpec`
  (`max_admission_blocks_per_request`), `FullAttentionSpec.max_memory_usage_bytes`;
- `v1/core/kv_cache_utils.py` `_get_packed_kv_cache_groups` (the block-outermost layout:
  layers bucketed by block size and window, balanced buckets split into groups of the same
  number of pattern repeats chosen by `_approximate_gcd`), `_get_kv_cache_bytes_per_block`
  (the widest group's page) and `_max_memory_usage_bytes_from_groups`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdeploy.geometry.layer_layout import CompressedLayout

SWA_BLOCK = 64  # DeepseekV4SWACache(block_size=64)
COMPRESSED_BLOCK = 256  # DeepseekV4SparseMLABackend / DeepseekV4IndexerBackend kernel block size
FP8_DS_MLA_ROW = 584  # bytes per stored state in the fp8_ds_mla layout
FP8_DS_MLA_ALIGN, PLAIN_ALIGN = 576, 512
INDEXER_QUANT_BLOCK = 128  # one fp32 scale per 128 fp8 values


@dataclass(frozen=True)
class PackedSpec:
    """One layer's cache in vLLM's packed layout: `window` 0 for a full (compressed) cache."""

    name: str  # kind shown in plan.memory
    block_size: int  # tokens per block
    page_bytes: int  # after alignment padding
    window: int = 0


def _pad(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def layer_specs(layout: CompressedLayout, layers: int, kv_cache_dtype: str,
                first_layer: int = 0) -> list[PackedSpec]:
    """The caches of decoder layers `first_layer`..`first_layer + layers - 1`, in vLLM's order
    (the ratios and widths as geometry/layer_layout.py read them)."""
    ratios, num_hidden = layout.ratios, layout.num_hidden_layers
    head_dim, index_dim, window = layout.head_dim, layout.index_head_dim, layout.window
    packed = kv_cache_dtype in ("auto",) or kv_cache_dtype.startswith("fp8")
    align = FP8_DS_MLA_ALIGN if packed else PLAIN_ALIGN
    row = FP8_DS_MLA_ROW if packed else head_dim * 2
    out: list[PackedSpec] = []
    for layer in range(first_layer, first_layer + layers):
        ratio = max(1, int(ratios[layer])) if layer < num_hidden and layer < len(ratios) else 1
        out.append(PackedSpec("sliding_window_mla", SWA_BLOCK, _pad(SWA_BLOCK * row, align), window))
        if ratio <= 1:
            continue
        coff = 1 + (ratio == 4)
        state_block = 4 if ratio == 4 else 8
        if ratio == 4:  # only C4A layers build the indexer
            index_row = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
            out.append(PackedSpec("indexer", COMPRESSED_BLOCK, _pad(COMPRESSED_BLOCK // ratio * index_row, align)))
            out.append(PackedSpec("compressor_state", state_block,
                                  _pad(state_block * 2 * coff * index_dim * 4, align), coff * ratio))
        out.append(PackedSpec(f"compressed_mla_{ratio}", COMPRESSED_BLOCK, _pad(COMPRESSED_BLOCK // ratio * row, align)))
        out.append(PackedSpec("compressor_state", state_block, _pad(state_block * 2 * coff * head_dim * 4, align),
                              coff * ratio))
    return out


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the divisor with the least upward padding, ties to larger."""
    best_d, best_pad = max(1, lower_bound), None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best_d, best_pad = d, pad
    return best_d


def _blocks(spec: PackedSpec, max_model_len: int, in_flight: int, extra_retained: int) -> int:
    if spec.window:
        return math.ceil(min(spec.window - 1 + extra_retained + in_flight, max_model_len) / spec.block_size) + 1
    return math.ceil(max_model_len / spec.block_size)


def packed_need(specs: list[PackedSpec], *, max_model_len: int, sequences: int, in_flight_tokens: int,
                extra_retained_tokens: int = 0) -> tuple[int, int, int, int]:
    """(bytes incl. the null block, bytes per block, blocks per sequence, groups) as
    `_get_packed_kv_cache_groups` and `_max_memory_usage_bytes_from_groups` count them."""
    buckets: dict[tuple[int, int], dict[int, int]] = {}  # (block, window) -> page -> layers
    for spec in specs:
        pages = buckets.setdefault((spec.block_size, spec.window), {})
        pages[spec.page_bytes] = pages.get(spec.page_bytes, 0) + 1
    balanced = {key: len(set(pages.values())) == 1 for key, pages in buckets.items()}
    repeats = {key: max(pages.values()) for key, pages in buckets.items()}
    floor = max((repeats[k] for k, pages in buckets.items() if balanced[k] and len(pages) > 1), default=0)
    per_group = _approximate_gcd([repeats[k] for k in buckets if balanced[k]], floor) if floor else None
    # Sliding-window buckets are "state buckets" only when nothing repeats (no Mamba here).
    state = {key: per_group is None and key[1] > 0 for key in buckets}

    def widest(pages: dict[int, int], n: int) -> int:
        return sum(math.ceil(count / n) * page for page, count in pages.items())

    def n_groups(key: tuple[int, int]) -> int:
        return math.ceil(repeats[key] / per_group) if balanced[key] and per_group else 1

    anchor = max(widest(pages, sum(pages.values()) if state[key] else n_groups(key)) for key, pages in buckets.items())
    first_page = {key: next(iter(pages)) for key, pages in buckets.items()}
    bytes_per_block, total_blocks, groups = 0, 0, 0
    for key, pages in buckets.items():
        n = n_groups(key)
        if state[key]:
            n = max(n, math.ceil(sum(pages.values()) / max(anchor // first_page[key], 1)))
        spec = next(s for s in specs if (s.block_size, s.window) == key)
        bytes_per_block = max(bytes_per_block, widest(pages, n))
        total_blocks += n * _blocks(spec, max_model_len, in_flight_tokens, extra_retained_tokens)
        groups += n
    return bytes_per_block * (sequences * total_blocks + 1), bytes_per_block, total_blocks, groups
