"""What vLLM's /metrics says about speculative decoding (the same in
every supported release: vLLM 0.32.0's vllm/v1/spec_decode/metrics.py as installed, and the
0.33.0 wheel, per reference/vllm-facts.md "vLLM 0.33.0 against 0.32.0": metric names unchanged).

SpecDecodingProm registers four Counters (Prometheus adds `_total`), one series per engine
(labels `model_name`, `engine`); the per-position one adds `position` 0..k-1 and counts, per
draft, the positions 0..accepted-1 (SpecDecodingStats.observe_draft). The scheduler observes a
draft only when it had draft tokens (v1/core/sched/scheduler.py make_spec_decoding_stats)."""

from __future__ import annotations

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
POSITION_LABEL = "position"
