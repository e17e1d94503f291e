"""numSpeculativeTokens: auto -- when to move k to the goodput model's recommendation.

Conservative on purpose: a change restarts the pods (a normal rollout), so k moves only when
the predicted gain is worth it, the evidence is large, and not more often than once an hour."""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.telemetry.load import LoadAnalysis
from specdeploy.telemetry.model import Analysis

MIN_GAIN = 0.05  # predicted speedup at the new k over the current k's, at least +5 %
AUTO_MIN_DRAFTS = 1000  # drafts counted at the current k before k may move
MIN_INTERVAL_S = 3600.0  # at most one change an hour


@dataclass(frozen=True)
class KChange:
    k: int
    reason: str


def decide_k(analysis: Analysis, *, current_k: int, last_change_s: float | None, now_s: float,
             load: LoadAnalysis | None = None) -> KChange | None:
    """The new k and why, or None to keep `current_k`. `analysis` must cover only pods that
    ran `current_k` (the controller starts a new window when k changes). With an observed
    load the cost model picks k for the typical batch, not for batch 1."""
    best, current = analysis.recommended, analysis.prediction(current_k)
    if best is None or current is None or analysis.counters.drafts < AUTO_MIN_DRAFTS:
        return None
    if last_change_s is not None and now_s - last_change_s < MIN_INTERVAL_S:
        return None
    if load is not None and load.observed is not None:
        return _decide_at_load(load, load.observed.typical, current_k, analysis.counters.drafts)
    if best.k == current_k:
        return None
    gain = best.speedup / current.speedup - 1 if current.speedup > 0 else float("inf")
    if gain < MIN_GAIN:
        return None
    extrapolated = " (extrapolated beyond the measured positions)" if best.extrapolated else ""
    return KChange(best.k, f"auto: k {current_k} -> {best.k}: predicted speedup {best.speedup:.2f}x{extrapolated} "
                           f"vs {current.speedup:.2f}x (+{gain:.0%}) over {analysis.counters.drafts:.0f} drafts")


def _decide_at_load(load: LoadAnalysis, batch: float, current_k: int, drafts: float) -> KChange | None:
    """k for the typical batch. The model's 0 (speculation off) becomes 1, the least auto can
    run: turning speculation off is the user's call, which NoSpeedupAtLoad reports."""
    picked = load.k_at(batch)
    k = max(1, picked)
    if k == current_k:
        return None
    new, old = load.work.speedup(batch, k), load.work.speedup(batch, current_k)
    gain = new / old - 1 if old > 0 else float("inf")
    if gain < MIN_GAIN:
        return None
    off = " (the model would turn speculation off here; auto runs at least k=1)" if picked == 0 else ""
    return KChange(k, f"auto: k {current_k} -> {k} for the typical batch of {batch:g} running requests: predicted "
                      f"speedup {new:.2f}x vs {old:.2f}x (+{gain:.0%}) over {drafts:.0f} drafts{off}")
