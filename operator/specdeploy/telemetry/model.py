"""The goodput model: how much faster speculation makes decoding, from the acceptance vLLM
counted and the cost of a draft step. README "Goodput model" gives the formula and sources.

- Per-position acceptance a_i (i = 1..k) = accepted_per_position[i-1] / drafts: the share of
  drafts whose first i tokens were all accepted (vllm/v1/spec_decode/metrics.py docstring).
- Expected tokens per target step with k: E(k) = 1 + a_1 + ... + a_k (the bonus token plus
  the accepted prefix). With one acceptance rate alpha, a_i = alpha^i and E(k) is
  (1 - alpha^(k+1)) / (1 - alpha), Leviathan et al. 2023 (arXiv:2211.17192), eq. 1.
- Speedup over no speculation: E(k) / (1 + c k) for drafters that run one pass per proposed
  token (Leviathan et al., Theorem 3.8), E(k) / (1 + c) for parallel drafters (DFlash, DSpark:
  `Method.drafting` "parallel" in `specdeploy.vllm.methods`), which propose every position in one
  pass. c is the cost of one draft pass relative to one target step.
- Ranking k by the acceptance *rate* misleads (it falls with k by construction; vLLM #9565):
  the recommendation maximises the speedup instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from specdeploy.api.conditions import UNKNOWN, Reason, Verdict
from specdeploy.api.spec import MAX_NUM_SPECULATIVE_TOKENS
from specdeploy.telemetry.metrics import Counters
from specdeploy.vllm.methods import drafting, method_named

# Without a memory plan (no GPU in the spec) a small draft is assumed to cost a tenth of a
# target step, the setting of Leviathan et al.'s worked example; the source is reported.
DEFAULT_DRAFT_COST = 0.1
# Positions beyond those vLLM counted are extrapolated, conservatively, at most this far.
MAX_EXTRAPOLATED_POSITIONS = 2
MAX_K = MAX_NUM_SPECULATIVE_TOKENS
# Evidence needed before a verdict: fewer drafts say too little about acceptance.
MIN_DRAFTS = 100
# Acceptance at or below this share of draft tokens is a collapse (vLLM PR #50170: an EAGLE3
# head on the wrong aux layers accepted 1.21 % while the server looked healthy).
COLLAPSE_ACCEPTANCE_RATE = 0.05


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum of the first k per-position acceptances."""
    return 1.0 + sum(acceptance[:k])


def speedup(acceptance: Sequence[float], k: int, cost: float, parallel: bool = False) -> float:
    """Tokens per unit of target-step time relative to plain decoding (1.0 = no gain)."""
    return expected_tokens(acceptance, k) / (1.0 + cost * (1 if parallel else k))


def geometric_acceptance(alpha: float, k: int) -> list[float]:
    """a_i = alpha^i: Leviathan et al.'s i.i.d. acceptance, for comparing with their closed form."""
    return [alpha**i for i in range(1, k + 1)]


def extrapolate(observed: Sequence[float], positions: int) -> list[float]:
    """Observed acceptance plus `positions` more, each the last one times the *lowest*
    conditional acceptance seen (a_i / a_(i-1), a_0 = 1). Acceptance given an accepted prefix
    usually rises with depth, so the lowest ratio under-promises rather than over-promises."""
    out = list(observed)
    if not out or positions <= 0:
        return out
    ratios = [b / a for a, b in zip([1.0] + out[:-1], out) if a > 0]
    ratio = min(ratios) if ratios else 0.0
    for _ in range(positions):
        out.append(out[-1] * ratio)
    return out


def draft_cost(method: str, plan: Mapping[str, Any] | None) -> tuple[float, str]:
    """c, and where it came from. Decoding is bound by reading weights, so a step's cost is
    the bytes each GPU reads: the draft's weights per GPU over the target's, on the planned
    layout (status.plan.memory). MoE targets read only their active experts per token, so for
    them this ratio under-states c: the speedup is then an upper bound."""
    if drafting(method) == "lookup":
        return 0.0, f"{method} drafts by lookup, no model pass"
    memory = (plan or {}).get("memory") or {}
    target, draft = memory.get("targetWeightsGiB"), memory.get("draftWeightsGiB")
    if target and draft is not None and target > 0:
        return draft / target, f"draft/target weights per GPU in the plan ({draft:.2f}/{target:.2f} GiB)"
    return DEFAULT_DRAFT_COST, "assumed (the plan has no memory estimate: set spec.resources.gpu)"


@dataclass(frozen=True)
class Prediction:
    k: int
    expected_tokens: float
    speedup: float
    extrapolated: bool  # k beyond the positions vLLM counted


@dataclass(frozen=True)
class Analysis:
    counters: Counters
    k: int
    method: str | None
    cost: float
    cost_source: str
    parallel: bool
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: tuple[float, ...]
    predictions: tuple[Prediction, ...]
    verdict: Verdict

    def prediction(self, k: int) -> Prediction | None:
        return next((p for p in self.predictions if p.k == k), None)

    @property
    def predicted_speedup(self) -> float | None:
        p = self.prediction(self.k)
        return p.speedup if p else None

    @property
    def recommended(self) -> Prediction | None:
        """The k with the highest predicted speedup (the smaller k on a tie)."""
        if self.counters.drafts < MIN_DRAFTS or not self.predictions:
            return None
        return max(self.predictions, key=lambda p: (round(p.speedup, 9), -p.k))


def analyse(counters: Counters, *, method: str | None, cost: float, cost_source: str = "given", k: int | None = None) -> Analysis:
    """Acceptance, per-k predictions and the verdict for the counters of one window."""
    k = k or counters.num_speculative_tokens
    parallel = drafting(method) == "parallel"
    drafts = counters.drafts
    per_position: tuple[float, ...] = ()
    rate = length = None
    if drafts > 0:
        running = 1.0
        values = []
        for accepted in counters.accepted_per_position:
            running = min(running, accepted / drafts)  # sums over pods of mixed k stay monotone
            values.append(running)
        per_position = tuple(values)
        length = 1.0 + counters.accepted_tokens / drafts
        rate = counters.accepted_tokens / counters.draft_tokens if counters.draft_tokens else 0.0
    predictions: list[Prediction] = []
    if per_position:
        extra = min(MAX_EXTRAPOLATED_POSITIONS, MAX_K - len(per_position))
        curve = extrapolate(per_position, extra)
        predictions = [
            Prediction(n, expected_tokens(curve, n), speedup(curve, n, cost, parallel), n > len(per_position))
            for n in range(1, len(curve) + 1)
        ]
    analysis = Analysis(counters, k, method, cost, cost_source, parallel, rate, length, per_position, tuple(predictions),
                        UNKNOWN)
    return _with_verdict(analysis)


def _with_verdict(a: Analysis) -> Analysis:
    from dataclasses import replace

    drafts = a.counters.drafts
    if a.method is not None and not method_named(a.method).proposes_draft_tokens:
        # extract_hidden_states counts a token it never drafted as accepted, every step
        # (v1/worker/gpu/spec_decode/extract_hidden_states.py: "always-accepted draft tokens").
        return replace(a, verdict=Verdict("False", Reason.NO_SPEEDUP,
                                          f"method {a.method} proposes no tokens (it caches the target's hidden states for a KV "
                                          "connector): its acceptance counters measure no drafting, and it cannot speed decoding up"))
    if drafts < MIN_DRAFTS:
        return replace(a, verdict=Verdict("Unknown", Reason.NOT_ENOUGH_DRAFTS,
                                          f"{drafts:.0f} drafts counted so far; a verdict needs at least {MIN_DRAFTS}"))
    assert a.acceptance_rate is not None and a.mean_acceptance_length is not None
    best = a.recommended
    gain = a.predicted_speedup
    seen = (f"acceptance {a.acceptance_rate:.1%} of {a.counters.draft_tokens:.0f} draft tokens in {drafts:.0f} drafts, "
            f"mean acceptance length {a.mean_acceptance_length:.2f} at k={a.k}")
    predicted = f"predicted speedup {gain:.2f}x (draft cost {a.cost:.3f} of a target step: {a.cost_source})" if gain is not None else "no speedup predicted"
    advice = f"; the model's best k is {best.k} ({best.speedup:.2f}x)" if best is not None and best.k != a.k else ""
    if best is not None and best.speedup < 1.0:
        advice = f"; no k is predicted to pay (best: k={best.k} at {best.speedup:.2f}x), so serving without speculation is faster"
    check = ("Check that the draft was trained for this target and revision (draft.revision, target.revision), "
             "that an EAGLE3 head reads the target's aux hidden-state layers (eagle_aux_hidden_state_layer_ids), and k")
    if a.acceptance_rate < COLLAPSE_ACCEPTANCE_RATE:
        return replace(a, verdict=Verdict("False", Reason.ACCEPTANCE_COLLAPSED, f"{seen}: {predicted}{advice}. {check}."))
    if gain is not None and gain < 1.0:
        return replace(a, verdict=Verdict("False", Reason.NO_SPEEDUP, f"{seen}: {predicted}{advice}. {check}."))
    return replace(a, verdict=Verdict("True", Reason.EFFECTIVE, f"{seen}: {predicted}{advice}"))
