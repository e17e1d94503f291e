"""Speculation at the load the serving sees: the cost model (telemetry/cost.py) for the planned
layout, fed with the measured acceptance (or the method's prior), per batch size, and judged at
the batch sizes vLLM's running-requests gauge reported over the window."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from specdeploy.planning.compute import LayoutCompute
from specdeploy.planning.gpus import UnknownGpuError, lookup_gpu
from specdeploy.telemetry.cost import (MAX_CROSSOVER_SEARCH, BatchAdvice, CostModelError, Hardware, Workload, advise_by_batch,
                                       batch_grid, batch_schedule, crossover_batch_size, prior_acceptance)
from specdeploy.api.conditions import Reason, Verdict
from specdeploy.telemetry.model import MAX_EXTRAPOLATED_POSITIONS, MIN_DRAFTS, Analysis
from specdeploy.vllm.versions import rule_set

# vLLM's per-batch-size k (vllm/config/speculative.py SpeculativeConfig; ranges checked by
# v1/spec_decode/dynamic/utils.py: inclusive, sorted, from 1, k >= 0, capped at
# num_speculative_tokens). Never rendered by default: vLLM #49548 (open) saw an 8-way
# concurrent run fall from about 232 to 24-157 tok/s with a schedule set.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class ObservedLoad:
    """Batch sizes from vllm:num_requests_running over the window (readings with >= 1 running)."""

    samples: int
    typical: float  # the median: what most steps ran at
    p90: float
    largest: float
    distribution: tuple[tuple[int, float], ...]  # (power-of-two bucket upper bound, share of readings)

    @classmethod
    def of(cls, batch_sizes: Sequence[float]) -> "ObservedLoad | None":
        if not batch_sizes:
            return None
        ordered = sorted(min(value, MAX_CROSSOVER_SEARCH) for value in batch_sizes)  # no engine runs 2^20 sequences
        buckets: dict[int, int] = {}
        for value in ordered:
            bucket = 1
            while bucket < value:
                bucket *= 2
            buckets[bucket] = buckets.get(bucket, 0) + 1
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return cls(len(ordered), statistics.median(ordered), p90, ordered[-1],
                   tuple((b, n / len(ordered)) for b, n in sorted(buckets.items())))


@dataclass(frozen=True)
class LoadAnalysis:
    work: Workload
    by_batch: tuple[BatchAdvice, ...]
    crossover: int | None
    observed: ObservedLoad | None
    acceptance_source: str
    context_measured: bool = False

    def k_at(self, batch: float) -> int:
        """The model's k at this batch, capped like byBatchSize (never above a smaller batch's)."""
        grid = [b for b in batch_grid(self.work.layout.max_num_seqs) if b < batch]
        return advise_by_batch(self.work, grid + [max(1, round(batch))])[-1].k

    @property
    def source(self) -> str:
        layout = self.work.layout
        measured = "mean of the finished requests" if self.context_measured else "assumed: no request finished in the window"
        return (f"roofline of {layout.gpu_product} x TP {layout.tensor_parallel_size} ({self.work.hardware.describe()}), "
                f"context {self.work.context:.0f} tokens per sequence ({measured}), acceptance {self.acceptance_source}")


def schedule(load: LoadAnalysis, vllm_version: str | None) -> list[tuple[int, int, int]] | None:
    """byBatchSize as the release's SCHEDULE_KEY value, or None where the release has no such key."""
    try:
        fields = rule_set(vllm_version or "").speculative_fields
    except KeyError:  # a release without a rule set: its keys are not known
        return None
    if SCHEDULE_KEY not in fields:
        return None
    return batch_schedule(load.by_batch, load.work.layout.max_num_seqs)


def workload(analysis: Analysis, plan: Mapping[str, Any], context: float | None = None) -> Workload:
    """The cost model's input for this plan and these counters. Raises CostModelError when the
    plan cannot be timed (no compute block, no GPU product or no datasheet figures for it)."""
    compute = plan.get("compute")
    if not compute:
        raise CostModelError("status.plan has no compute block yet (the next reconcile writes it)")
    if not compute.get("gpuProduct"):
        raise CostModelError("the plan names no GPU product (spec.resources.gpu.product): the cost model cannot time it")
    try:
        layout = LayoutCompute.from_dict(compute)
        hardware = Hardware.from_product(lookup_gpu(layout.gpu_product or ""))
    except (KeyError, TypeError, ValueError, UnknownGpuError) as exc:
        raise CostModelError(f"status.plan.compute is not usable ({exc}): it is rewritten at the next reconcile") from None
    method = analysis.method or plan.get("method", "")
    work = Workload(layout, hardware, method, _acceptance(analysis, method))
    return replace(work, context=context) if context else work


def _measured(analysis: Analysis) -> bool:
    return analysis.counters.drafts >= MIN_DRAFTS and bool(analysis.predictions)


def _acceptance(analysis: Analysis, method: str) -> tuple[float, ...]:
    """The measured per-position acceptance (with its extrapolated positions), else the prior."""
    if _measured(analysis):
        tokens = [1.0] + [p.expected_tokens for p in analysis.predictions]
        return tuple(b - a for a, b in zip(tokens, tokens[1:]))
    return prior_acceptance(method, max(1, analysis.k) + MAX_EXTRAPOLATED_POSITIONS)


def analyse_load(analysis: Analysis, plan: Mapping[str, Any], batch_sizes: Sequence[float]) -> LoadAnalysis:
    """The cost model for this plan at the context the counted requests held (else the default)."""
    work = workload(analysis, plan, analysis.counters.mean_context)
    source = (f"measured over {analysis.counters.drafts:.0f} drafts" if _measured(analysis)
              else f"the {work.method} prior (a_i = {work.acceptance[0]:.2f}^i) until {MIN_DRAFTS} drafts are counted")
    return LoadAnalysis(work, tuple(advise_by_batch(work, batch_grid(work.layout.max_num_seqs))),
                        crossover_batch_size(work), ObservedLoad.of(batch_sizes), source,
                        analysis.counters.mean_context is not None)


def verdict_at_load(analysis: Analysis, load: LoadAnalysis) -> Verdict:
    """SpeculationEffective: the acceptance verdict, turned False (NoSpeedupAtLoad) when the
    typical observed batch is past the crossover, with what speculation costs there."""
    verdict, observed, crossover = analysis.verdict, load.observed, load.crossover
    if verdict.status != "True" or observed is None or crossover is None or observed.typical < crossover:
        return verdict
    batch, k = observed.typical, analysis.k
    loss = max(0.0, 1.0 - load.work.speedup(batch, k))
    return Verdict("False", Reason.NO_SPEEDUP_AT_LOAD,
                   f"the typical batch, {batch:g} running requests (median of {observed.samples} readings of "
                   f"vllm:num_requests_running), is past the crossover at {crossover}: there k={k} is predicted to cost "
                   f"{loss:.0%} of the throughput serving without speculation would give. {verdict.message}. "
                   f"Cost model: {load.source}")
