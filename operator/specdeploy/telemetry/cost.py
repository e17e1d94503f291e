"""The speculation cost model: how long one forward pass takes on the planned layout, and from
that, which k pays at which batch size. README "Speculation under load" explains it; the
checks against measurements are in bench/RESULTS.md and docs/speculation-under-load.md.

A forward pass of T tokens over B sequences of C context tokens, on one TP rank:
    time = max(bytes / HBM bandwidth, FLOPs / peak) + TP all-reduce + a fixed per-step overhead
           + a cost per token
    bytes = weights (MoE: the experts the T tokens touch, a sequence's extra verified tokens
            mostly reusing its first token's) + B * C * KV bytes per context token
    FLOPs = T * (2 * active params + C * attention FLOPs per context token)
Tokens per second with speculation (B sequences, k proposed tokens):
    B * E(k) / (t_target(B * (k + 1)) + draft(B, k)),   without: B / t_target(B).
Decode reads the weights once per step whatever T is, so at small B verifying k+1 tokens costs
about one step; at large B the step is compute-bound and verifying costs about (k+1) steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specdeploy.planning.compute import LayoutCompute, ModelCompute
from specdeploy.planning.gpus import GpuProduct
from specdeploy.telemetry.model import expected_tokens, geometric_acceptance
from specdeploy.vllm.methods import drafting, method_named

# Datasheet peaks are not reached. Streaming kernels read HBM at about 85-90 % of the quoted
# bandwidth; decode-shaped GEMMs (a few hundred rows) reach about half the dense tensor peak.
# Stated, not fitted.
HBM_EFFICIENCY = 0.85
COMPUTE_EFFICIENCY = 0.5
# Fitted on published GPU speedups (bench/fit_load_model.py, bench/data/load_model_fit.json; each
# point's source and held-out residual in docs/speculation-under-load.md). Effective terms: they
# reproduce speedups, not absolute step times (the model's batch-1 tokens/s is 2-3x low with them).
# The engine's fixed cost per target step (scheduling, launches, sampling) and per draft pass.
STEP_OVERHEAD_S = 7.128e-3
DRAFT_PASS_OVERHEAD_S = 1.93e-3
# Share of a sequence's extra verified tokens that route to experts its first token already
# touched (0 would be uniform routing): the draft continues the same text.
ROUTING_OVERLAP = 0.686
# A target pass's cost per token beyond the roofline (sampling over the vocabulary, MoE token
# dispatch, per-token scheduling).
TOKEN_OVERHEAD_S = 6.854e-5
# Context each sequence holds while decoding, when the workload's is not known: short chat turns.
# Longer contexts make the KV read dominate, and speculation then pays at larger batches.
DEFAULT_CONTEXT_TOKENS = 256
# Before any traffic: a stated acceptance prior by how a method drafts, a_i = alpha^i. The
# target's own MTP layers were trained with it (DeepSeek-V3 reports 85-90 % for the first
# token); heads on the target's hidden states (EAGLE, DFlash, DSpark) next; separate small
# models and heads below; lookups lowest, as they propose only where the text repeats.
PRIOR_ALPHA_TARGET_MTP = 0.8
PRIOR_ALPHA_HIDDEN_STATES = 0.7
PRIOR_ALPHA_MODEL = 0.6
PRIOR_ALPHA_LOOKUP = 0.4
MAX_CROSSOVER_SEARCH = 1 << 20


class CostModelError(ValueError):
    """The layout lacks what the cost model needs (no GPU product, no datasheet figures)."""


@dataclass(frozen=True)
class Hardware:
    """Achievable rates of one GPU (bytes/s, FLOP/s) and the engine's fixed costs."""

    hbm_bytes_s: float
    bf16_flops: float
    fp8_flops: float
    interconnect_bytes_s: float
    step_overhead_s: float = STEP_OVERHEAD_S
    draft_pass_overhead_s: float = DRAFT_PASS_OVERHEAD_S
    routing_overlap: float = ROUTING_OVERLAP
    token_overhead_s: float = TOKEN_OVERHEAD_S

    @classmethod
    def from_product(cls, product: GpuProduct) -> "Hardware":
        """The datasheet figures scaled to what kernels reach (HBM_ and COMPUTE_EFFICIENCY)."""
        r = product.roofline
        if r is None:
            raise CostModelError(f"the GPU catalog has no datasheet figures for {product.key}: the cost model cannot time it")
        return cls(r.hbm_gb_s * 1e9 * HBM_EFFICIENCY, r.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY,
                   r.fp8_tflops * 1e12 * COMPUTE_EFFICIENCY, r.interconnect_gb_s * 1e9 / 2)  # one direction

    def describe(self) -> str:
        return (f"{self.hbm_bytes_s / 1e12:.2f} TB/s, {self.bf16_flops / 1e12:.0f} TFLOP/s bf16 "
                f"({self.fp8_flops / 1e12:.0f} fp8), step overhead {self.step_overhead_s * 1e3:.2f} ms")


def experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts T tokens route to in one layer, with uniform routing:
    E * (1 - (1 - k/E)^T)."""
    if num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def routed_tokens(tokens: float, sequences: float, overlap: float) -> float:
    """Tokens that route independently: a sequence's verified tokens continue one text, so
    the extra ones reuse a share `overlap` of the experts its first token touched."""
    first = min(tokens, sequences) if sequences > 0 else tokens
    return first + (tokens - first) * (1.0 - overlap)


def bytes_read(model: ModelCompute, tokens: float, sequences: float, context: float, overlap: float = 0.0) -> float:
    """Weights (only the touched experts' share of the routed ones) plus the batch's KV cache."""
    weights = float(model.weight_bytes)
    if model.num_experts:
        routed = routed_tokens(tokens, sequences, overlap)
        touched = experts_touched(model.num_experts, model.experts_per_token, routed) / model.num_experts
        weights -= model.expert_bytes * (1.0 - touched)
    return weights + sequences * context * model.kv_bytes_per_context_token


def flops(model: ModelCompute, tokens: float, context: float) -> float:
    return tokens * (2.0 * model.active_params + context * model.attention_flops_per_context_token)


def all_reduce_s(model: ModelCompute, tokens: float, tp: int, hw: Hardware) -> float:
    """Two ring all-reduces of the hidden state per layer (attention and MLP outputs, bf16)."""
    if tp <= 1:
        return 0.0
    payload = tokens * model.hidden_size * 2
    return 2 * model.num_layers * 2 * (tp - 1) / tp * payload / hw.interconnect_bytes_s


def step_time(model: ModelCompute, hw: Hardware, *, tokens: float, sequences: float, context: float, tp: int,
              overhead_s: float | None = None) -> float:
    """Seconds for one forward pass of `tokens` tokens over `sequences` sequences."""
    peak = hw.fp8_flops if model.fp8 else hw.bf16_flops
    roof = max(bytes_read(model, tokens, sequences, context, hw.routing_overlap) / hw.hbm_bytes_s, flops(model, tokens, context) / peak)
    fixed = (hw.step_overhead_s + hw.token_overhead_s * tokens) if overhead_s is None else overhead_s
    return roof + all_reduce_s(model, tokens, tp, hw) + fixed


@dataclass(frozen=True)
class Workload:
    """What the cost model is asked about: the layout, its GPU, the drafter, the acceptance."""

    layout: LayoutCompute
    hardware: Hardware
    method: str
    acceptance: tuple[float, ...]  # per-position acceptance a_1..a_K (measured or prior)
    context: float = DEFAULT_CONTEXT_TOKENS

    def target_time(self, batch: float, tokens: float) -> float:
        return step_time(self.layout.target, self.hardware, tokens=tokens, sequences=batch, context=self.context,
                         tp=self.layout.tensor_parallel_size)

    def draft_time(self, batch: float, k: int) -> float:
        """k sequential passes of B tokens; one pass of B*k for parallel drafters; ~0 for lookups."""
        draft = self.layout.draft
        how = drafting(self.method)
        if k == 0 or how == "lookup" or draft is None:
            return 0.0
        hw, tp = self.hardware, self.layout.tensor_parallel_size
        if how == "parallel":
            return step_time(draft, hw, tokens=batch * k, sequences=batch, context=self.context, tp=tp,
                             overhead_s=hw.draft_pass_overhead_s)
        return k * step_time(draft, hw, tokens=batch, sequences=batch, context=self.context, tp=tp,
                             overhead_s=hw.draft_pass_overhead_s)

    def tokens_per_s(self, batch: float, k: int) -> float:
        if k == 0:
            return batch / self.target_time(batch, batch)
        return batch * expected_tokens(self.acceptance, k) / (self.target_time(batch, batch * (k + 1)) + self.draft_time(batch, k))

    def speedup(self, batch: float, k: int) -> float:
        return self.tokens_per_s(batch, k) / self.tokens_per_s(batch, 0)

    def best_k(self, batch: float, cap: int | None = None) -> tuple[int, float]:
        """The k (0 = off) with the highest speedup, at most `cap`; the smaller k on a tie."""
        top = len(self.acceptance) if cap is None else min(cap, len(self.acceptance))
        options = [(0, 1.0)] + [(k, self.speedup(batch, k)) for k in range(1, top + 1)]
        return max(options, key=lambda o: (round(o[1], 9), -o[0]))


def prior_alpha(method: str) -> float:
    """The stated prior for how this method drafts (a model's, for a name no release accepts)."""
    if drafting(method) is None:
        return PRIOR_ALPHA_MODEL
    record = method_named(method)
    if record.drafting == "lookup":
        return PRIOR_ALPHA_LOOKUP
    if record.target_mtp_layers:
        return PRIOR_ALPHA_TARGET_MTP
    return PRIOR_ALPHA_HIDDEN_STATES if record.uses_target_hidden_states else PRIOR_ALPHA_MODEL


def prior_acceptance(method: str, positions: int) -> tuple[float, ...]:
    """The stated prior, used before vLLM has counted enough drafts."""
    return tuple(geometric_acceptance(prior_alpha(method), positions))


@dataclass(frozen=True)
class BatchAdvice:
    batch_size: int
    k: int  # 0: speculation off pays more
    speedup: float  # at that k (1.0 when off)


def batch_grid(max_num_seqs: int) -> list[int]:
    """Powers of two up to the serving's max sequences (at most 2^20: status keeps 32 rows)."""
    out, b = [], 1
    while b <= min(max(1, max_num_seqs), MAX_CROSSOVER_SEARCH):
        out.append(b)
        b *= 2
    return out


def advise_by_batch(work: Workload, batches: Sequence[int]) -> list[BatchAdvice]:
    """Best k per batch size, never rising as the batch grows: each batch's k is at most the
    previous (smaller) batch's. For a dense target the roofline gives this by itself (a pass's
    time is a maximum of linear functions of its tokens plus a constant, so one more verified
    token per sequence never gets cheaper as B grows, while its gain a_(k+1) does not depend on
    B); the cap makes it a rule where the model alone would let k rise again: an MoE target
    past the batch that touches every expert, or a parallel drafter amortising its one pass
    over a larger k. The cap never recommends a k that loses throughput; at worst it leaves such
    a late gain unused (docs/speculation-under-load.md)."""
    out: list[BatchAdvice] = []
    cap: int | None = None
    for batch in sorted(batches):
        k, gain = work.best_k(batch, cap)
        out.append(BatchAdvice(batch, k, gain))
        cap = k
    return out


def crossover_batch_size(work: Workload) -> int | None:
    """The smallest batch at which `advise_by_batch` turns speculation off (and keeps it off
    from there on). None when some k pays at every batch up to 2^20: a step bound by reading
    the KV cache costs the same for 1 or k+1 query tokens per sequence."""
    cap: int | None = None
    batch = 1
    while batch <= MAX_CROSSOVER_SEARCH:
        k, _ = work.best_k(batch, cap)
        if k == 0:
            if batch == 1:
                return 1
            low, high = batch // 2, batch  # pays at low (with k = cap), not at high
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if work.best_k(mid, cap)[0] > 0 else (low, mid)
            return high
        cap, batch = k, batch * 2
    return None


def batch_schedule(by_batch: Sequence[BatchAdvice], max_num_seqs: int) -> list[tuple[int, int, int]]:
    """byBatchSize as vLLM's (start, end, k) ranges: batch 1 gets its own k, and each range
    (previous grid batch, this grid batch] the k of its upper end (the smaller, k falling with
    batch), merged where k repeats; the last range runs to max_num_seqs."""
    ranges: list[tuple[int, int, int]] = []
    start = 1
    for advice in sorted(by_batch, key=lambda a: a.batch_size):
        if ranges and ranges[-1][2] == advice.k:
            ranges[-1] = (ranges[-1][0], advice.batch_size, advice.k)
        else:
            ranges.append((start, advice.batch_size, advice.k))
        start = advice.batch_size + 1
    if ranges and ranges[-1][1] < max_num_seqs:
        ranges[-1] = (ranges[-1][0], max_num_seqs, ranges[-1][2])
    return ranges
