"""status.speculation from an analysis: rounded, so that noise below the rounding never
causes a status write, and shaped by the api model (the CRD's schema comes from it)."""

from __future__ import annotations

from typing import Any

from specdeploy.api.status import SpeculationStatus
from specdeploy.telemetry.load import LoadAnalysis
from specdeploy.telemetry.model import Analysis

RATE_DIGITS = 4
SPEEDUP_DIGITS = 3


def summary(analysis: Analysis) -> dict[str, Any]:
    """The analysis as rounded camelCase values: what `specdeploy advise -o json` prints and
    the part of status.speculation that does not depend on where the counters came from."""
    c = analysis.counters
    best = analysis.recommended
    out = {
        "drafts": round(c.drafts),
        "draftTokens": round(c.draft_tokens),
        "acceptedTokens": round(c.accepted_tokens),
        "acceptanceRate": _round(analysis.acceptance_rate),
        "meanAcceptanceLength": _round(analysis.mean_acceptance_length),
        "perPositionAcceptance": [_round(v) for v in analysis.per_position],
        "draftCost": _round(analysis.cost),
        "draftCostSource": analysis.cost_source,
        "predictedSpeedup": _round(analysis.predicted_speedup, SPEEDUP_DIGITS),
        "predictions": [
            {"k": p.k, "expectedTokens": _round(p.expected_tokens), "speedup": _round(p.speedup, SPEEDUP_DIGITS), "extrapolated": p.extrapolated}
            for p in analysis.predictions
        ],
        "recommendedNumSpeculativeTokens": best.k if best else None,
        "numSpeculativeTokens": analysis.k or None,
    }
    return {k: v for k, v in out.items() if v is not None}


def load_summary(load: LoadAnalysis, k_in_force: int) -> dict[str, Any]:
    """byBatchSize, crossoverBatchSize, observedLoad and costModel, rounded like the rest."""
    out: dict[str, Any] = {
        "byBatchSize": [{"batchSize": a.batch_size, "recommendedNumSpeculativeTokens": a.k,
                         "predictedSpeedup": _round(a.speedup, SPEEDUP_DIGITS)} for a in load.by_batch],
        "crossoverBatchSize": load.crossover,
        "costModel": load.source,
    }
    observed = load.observed
    if observed is not None:
        out["observedLoad"] = {
            "samples": observed.samples, "typicalBatchSize": observed.typical, "p90BatchSize": observed.p90,
            "maxBatchSize": observed.largest,
            "distribution": [{"batchSize": b, "share": _round(share)} for b, share in observed.distribution],
            "recommendedNumSpeculativeTokens": load.k_at(observed.typical),
            "predictedSpeedup": _round(load.work.speedup(observed.typical, k_in_force), SPEEDUP_DIGITS) if k_in_force else None,
        }
    return {k: v for k, v in out.items() if v is not None}


def _round(value: float | None, digits: int = RATE_DIGITS) -> float | None:
    return None if value is None else round(value, digits)


def speculation_status(
    analysis: Analysis,
    *,
    window_s: float,
    observed_at: str,
    pods: int = 0,
    skipped: list[tuple[str, str]] | None = None,
    k_reason: str | None = None,
    k_changed_at: str | None = None,
    load: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The status.speculation object (camelCase, None fields left out), checked by the api model."""
    status = SpeculationStatus.model_validate({
        **summary(analysis),
        "window": f"{window_s:.0f}s",
        "observedAt": observed_at,
        "pods": pods,
        "skippedPods": [{"pod": p, "reason": why} for p, why in skipped or []],
        "numSpeculativeTokensReason": k_reason,
        "numSpeculativeTokensChangedAt": k_changed_at,
        **(load or {}),
    })
    return status.model_dump(by_alias=True, exclude_none=True)
