"""status.speculation from an analysis: rounded, so that noise below the rounding never
causes a status write, and shaped by the api model (the CRD's schema comes from it)."""

from __future__ import annotations

from typing import Any

from specdeploy.api.status import SpeculationStatus
from specdeploy.telemetry.model import Analysis

RATE_DIGITS = 4
SPEEDUP_DIGITS = 3


def speculation_status(
    analysis: Analysis,
    *,
    window_s: float,
    observed_at: str,
    pods: int = 0,
    skipped: list[tuple[str, str]] | None = None,
    k_reason: str | None = None,
    k_changed_at: str | None = None,
) -> dict[str, Any]:
    """The status.speculation object (camelCase, None fields left out)."""
    c = analysis.counters
    best = analysis.recommended

    def r(value: float | None, digits: int = RATE_DIGITS) -> float | None:
        return None if value is None else round(value, digits)

    status = SpeculationStatus(
        drafts=round(c.drafts),
        draft_tokens=round(c.draft_tokens),
        accepted_tokens=round(c.accepted_tokens),
        acceptance_rate=r(analysis.acceptance_rate),
        mean_acceptance_length=r(analysis.mean_acceptance_length),
        per_position_acceptance=[r(v) for v in analysis.per_position],
        window=f"{window_s:.0f}s",
        observed_at=observed_at,
        pods=pods,
        skipped_pods=[{"pod": p, "reason": why} for p, why in skipped or []],
        draft_cost=r(analysis.cost),
        draft_cost_source=analysis.cost_source,
        predicted_speedup=r(analysis.predicted_speedup, SPEEDUP_DIGITS),
        predictions=[
            {"k": p.k, "expectedTokens": r(p.expected_tokens), "speedup": r(p.speedup, SPEEDUP_DIGITS), "extrapolated": p.extrapolated}
            for p in analysis.predictions
        ],
        recommended_num_speculative_tokens=best.k if best else None,
        num_speculative_tokens=analysis.k or None,
        num_speculative_tokens_reason=k_reason,
        num_speculative_tokens_changed_at=k_changed_at,
    )
    return status.model_dump(by_alias=True, exclude_none=True)
