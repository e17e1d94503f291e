"""numSpeculativeTokens: auto -- when to move k to the goodput model's recommendation.

Conservative on purpose: a change restarts the pods (a normal rollout), so k moves only when
the predicted gain is worth it, the evidence is large, and not more often than once an hour."""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.telemetry.model import Analysis

MIN_GAIN = 0.05  # predicted speedup at the new k over the current k's, at least +5 %
AUTO_MIN_DRAFTS = 1000  # drafts counted at the current k before k may move
MIN_INTERVAL_S = 3600.0  # at most one change an hour


@dataclass(frozen=True)
class KChange:
    k: int
    reason: str


def decide_k(analysis: Analysis, *, current_k: int, last_change_s: float | None, now_s: float) -> KChange | None:
    """The new k and why, or None to keep `current_k`. `analysis` must cover only pods that
    ran `current_k` (the controller starts a new window when k changes)."""
    best, current = analysis.recommended, analysis.prediction(current_k)
    if best is None or current is None or best.k == current_k or analysis.counters.drafts < AUTO_MIN_DRAFTS:
        return None
    if last_change_s is not None and now_s - last_change_s < MIN_INTERVAL_S:
        return None
    gain = best.speedup / current.speedup - 1 if current.speedup > 0 else float("inf")
    if gain < MIN_GAIN:
        return None
    extrapolated = " (extrapolated beyond the measured positions)" if best.extrapolated else ""
    return KChange(best.k, f"auto: k {current_k} -> {best.k}: predicted speedup {best.speedup:.2f}x{extrapolated} "
                           f"vs {current.speedup:.2f}x (+{gain:.0%}) over {analysis.counters.drafts:.0f} drafts")
