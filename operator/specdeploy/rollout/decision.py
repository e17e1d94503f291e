"""Is the canary's draft worse than the stable one's? A pure function of both arms' counter
deltas (what each arm's pods counted since the canary became Ready), never of time.

The statistic is the goodput model's speedup, E / (1 + c k) (`specdeploy.telemetry.model`):
with the same k it orders arms exactly as the acceptance rate does (E = 1 + k x rate), and with a
different k it stays comparable, where the acceptance rate falls with k by construction
(vLLM #9565). Its uncertainty comes from the counts alone. Per draft, the accepted length X is
a count from 0 to k, and vLLM's per-position counter holds its whole distribution:
accepted_per_position[i] counts the drafts with X >= i + 1 (v1/spec_decode/metrics.py), so
E[X] = sum_i P(X >= i+1) and E[X^2] = sum_i (2i + 1) P(X >= i+1). The mean of n drafts then has
variance Var(X) / n (drafts of one request are not independent; MIN_DRAFTS and the one-sided z
keep the test conservative, and the bench checks the decisions on real counter traces).

The canary is promoted when the lower confidence bound of S_canary - (1 - margin) S_stable is
at least 0 (not worse by more than the margin), rolled back when the upper bound is below 0
(worse by more than the margin), and the decision waits otherwise. MAX_DRAFTS ends a wait that
would never end (both arms within a hair of the margin): the point estimate decides there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specdeploy.api.conditions import Reason
from specdeploy.telemetry.metrics import Counters

# Drafts each arm must count before any verdict on acceptance (a normal bound on fewer is not
# worth its name; telemetry/model.py asks as many of one arm for its own verdict).
MIN_DRAFTS = 100
# Past this many canary drafts the point estimate decides: the interval is then narrower than
# any margin worth setting, and a wait must end on the counts, not on a clock.
MAX_DRAFTS = 50_000
# One-sided 95 %: the chance of promoting a draft that is worse by more than the margin (or of
# rolling back one that is not) is at most 5 % per decision.
Z_ONE_SIDED = 1.645
DEFAULT_MARGIN = 0.1

Action = Literal["Wait", "Promote", "RollBack"]


@dataclass(frozen=True)
class Arm:
    """One arm's counts over the comparison (counter deltas, restart-aware: telemetry/window.py),
    its readiness, and what the goodput model needs: k, the draft's cost c, parallel drafting."""

    counters: Counters
    k: int
    cost: float
    parallel: bool = False
    ready: bool = True
    failed: str | None = None  # why it can no longer serve (progress deadline, crash loop); None: it can
    seconds: float | None = None  # time the counts cover: for tokens per second only, never for the decision
    running: float | None = None  # mean running requests per scrape over that time (batch size)
    speedup_at_load: float | None = None  # the cost model's speedup at the observed batch (telemetry/load.py)


@dataclass(frozen=True)
class ArmFigures:
    """What status.rollout shows of one arm."""

    drafts: float
    acceptance_rate: float | None
    mean_accepted_length: float | None
    speedup: float | None  # E / (1 + c k): the goodput model's
    speedup_at_load: float | None
    output_tokens_per_second_per_request: float | None
    responses: float
    server_errors: float


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str  # a Reason (api/conditions.py)
    message: str
    canary: ArmFigures
    stable: ArmFigures
    difference: float | None = None  # S_canary - (1 - margin) S_stable
    lower: float | None = None  # its one-sided confidence bounds
    upper: float | None = None


@dataclass(frozen=True)
class _Speedup:
    mean: float
    variance: float  # of the mean


def _accepted_moments(counters: Counters) -> tuple[float, float] | None:
    """E[X] and E[X^2] of the accepted length per draft, from the per-position counts (None: no
    draft). A share above a shallower position's (counters summed over pods of mixed k, or torn by
    a scrape) is clipped to it, as the goodput model does."""
    if counters.drafts <= 0:
        return None
    first = second = 0.0
    running = 1.0
    for i, accepted in enumerate(counters.accepted_per_position):
        running = min(running, max(0.0, accepted) / counters.drafts)
        first += running
        second += (2 * i + 1) * running
    return first, second


def _speedup(arm: Arm) -> _Speedup | None:
    moments = _accepted_moments(arm.counters)
    if moments is None:
        return None
    first, second = moments
    scale = 1.0 + arm.cost * (1 if arm.parallel else arm.k)
    variance = max(0.0, second - first * first) / arm.counters.drafts
    return _Speedup((1.0 + first) / scale, variance / (scale * scale))


def figures(arm: Arm) -> ArmFigures:
    c = arm.counters
    speedup = _speedup(arm)
    rate = c.accepted_tokens / c.draft_tokens if c.draft_tokens > 0 else None
    length = 1.0 + c.accepted_tokens / c.drafts if c.drafts > 0 else None
    per_request = None
    if arm.seconds and arm.seconds > 0 and arm.running and arm.running > 0:
        per_request = c.output_tokens / arm.seconds / arm.running
    return ArmFigures(c.drafts, rate, length, speedup.mean if speedup else None, arm.speedup_at_load, per_request,
                      c.responses, c.server_errors)


def _error_rate(c: Counters) -> float:
    return c.server_errors / c.responses if c.responses > 0 else 0.0


def _serving_problem(canary: Arm, stable: Arm) -> tuple[Action, str, str] | None:
    """Errors and readiness come first: a canary that fails serves users badly whatever it accepts."""
    if canary.failed:
        return "RollBack", Reason.CANARY_NOT_READY, f"the canary cannot serve: {canary.failed}"
    c, s = canary.counters, stable.counters
    if c.server_errors > 0 and _error_rate(c) > _error_rate(s):
        return ("RollBack", Reason.CANARY_ERRORS, f"the canary answered {c.server_errors:.0f} of {c.responses:.0f} requests with 5xx "
                f"({_error_rate(c):.1%}; the stable arm {_error_rate(s):.1%})")
    if not canary.ready:
        return "Wait", Reason.CANARY_STARTING, "the canary is not Ready yet: nothing is compared before it serves"
    return None


def decide(canary: Arm, stable: Arm, *, margin: float = DEFAULT_MARGIN, min_drafts: int = MIN_DRAFTS,
           z: float = Z_ONE_SIDED, max_drafts: int = MAX_DRAFTS) -> Decision:
    """Promote, roll back or wait, with the numbers that decided it."""
    figs = figures(canary), figures(stable)
    problem = _serving_problem(canary, stable)
    if problem is not None:
        return Decision(*problem, *figs)
    low = min(canary.counters.drafts, stable.counters.drafts)
    s_c, s_s = _speedup(canary), _speedup(stable)
    if low < min_drafts or s_c is None or s_s is None:
        return Decision("Wait", Reason.NOT_ENOUGH_DRAFTS, f"canary {canary.counters.drafts:.0f} and stable {stable.counters.drafts:.0f} "
                        f"drafts counted; a decision needs at least {min_drafts} in each arm", *figs)
    keep = 1.0 - margin
    difference = s_c.mean - keep * s_s.mean
    spread = z * math.sqrt(s_c.variance + keep * keep * s_s.variance)
    lower, upper = difference - spread, difference + spread
    said = (f"speedup {s_c.mean:.3f}x (canary, {canary.counters.drafts:.0f} drafts) against {s_s.mean:.3f}x (stable, "
            f"{stable.counters.drafts:.0f} drafts): canary - {keep:.2f} x stable = {difference:+.4f}, "
            f"{z:.3f}-sigma bounds [{lower:+.4f}, {upper:+.4f}]")
    numbers = dict(difference=difference, lower=lower, upper=upper)
    if lower >= 0:
        return Decision("Promote", Reason.CANARY_NOT_WORSE, f"{said}: not worse by more than {margin:.0%}", *figs, **numbers)
    if upper < 0:
        return Decision("RollBack", Reason.CANARY_WORSE, f"{said}: worse by more than {margin:.0%}", *figs, **numbers)
    if canary.counters.drafts >= max_drafts:
        action: Action = "Promote" if difference >= 0 else "RollBack"
        return Decision(action, Reason.WITHIN_MARGIN, f"{said}: still within the bounds after {max_drafts} canary drafts, "
                        "so the point estimate decides", *figs, **numbers)
    return Decision("Wait", Reason.NOT_ENOUGH_DRAFTS, f"{said}: the bounds straddle 0, more drafts are needed", *figs, **numbers)
