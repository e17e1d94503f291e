"""Where a draft change stands, and what each arm's workload should be: a pure step from the spec,
the draft the stable workload runs, the last status.rollout and the canary's decision.

Phases: Canary (the new draft serves a share next to the stable arm, which is not touched),
Promoting (the stable arm is rolled to the new draft with maxUnavailable 0; the canary is gone),
Promoted (done), RolledBack (the canary is deleted, the stable arm never was touched, and the
rejected draft is remembered so that it is not tried again until the spec changes or a manual
Promote). No phase: no draft change is in flight, the stable arm follows the spec as before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from specdeploy.api.conditions import Reason
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.rollout.arms import canary_workload, held, live_draft, promoting, rolled_out, with_draft
from specdeploy.rollout.decision import Decision

Phase = Literal["Canary", "Promoting", "Promoted", "RolledBack"]
KEY_CHARS = 16


def draft_key(spec: SpeculativeDeploymentSpec) -> str:
    """What identifies a draft change: spec.draft as the user wrote it (numSpeculativeTokens
    included; with auto, the operator's own k moves go through the ordinary rollout)."""
    body = json.dumps(spec.draft.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:KEY_CHARS]


def canary_replicas(stable: int, share: int) -> int:
    """Canary pods for a replica share of `share` percent next to `stable` pods: at least one."""
    return max(1, round(stable * share / (100 - share)))


@dataclass(frozen=True)
class Step:
    phase: Phase | None
    reason: str
    message: str
    apply_stable: bool  # render the stable workload from the spec (False: leave it as it is)
    canary: bool  # a canary workload with the spec's draft should exist
    draft: str | None = None  # the draft key the phase is about
    rejected: str | None = None  # the draft key rolled back


@dataclass(frozen=True)
class Seen:
    """What the step reads: the last status.rollout (untrusted: each field checked) and the stable arm."""

    phase: str | None = None
    draft: str | None = None
    rejected: str | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any] | None) -> "Seen":
        status = status if isinstance(status, Mapping) else {}
        pick = lambda key: value if isinstance(value := status.get(key), str) and len(value) <= 64 else None  # noqa: E731
        return cls(pick("phase"), pick("draft"), pick("rejectedDraft"))


@dataclass(frozen=True)
class Decided:
    """A decision as status.rollout.decision holds it (written by the telemetry, read by the reconcile)."""

    action: str
    why: str
    message: str

    @classmethod
    def of(cls, rollout: Any) -> "Decided | None":
        decision = rollout.get("decision") if isinstance(rollout, Mapping) else None
        if not isinstance(decision, Mapping) or decision.get("action") not in ("Wait", "Promote", "RollBack"):
            return None
        text = lambda key: str(decision.get(key) or "")[:4096]  # noqa: E731
        return cls(decision["action"], text("reason")[:64], text("message"))


def _settled(desired: str, seen: Seen, stable_rolled_out: bool) -> Step:
    """The stable arm runs the spec's draft already: finish a promotion, else nothing in flight."""
    if seen.phase == "Promoting" and seen.draft == desired and not stable_rolled_out:
        return Step("Promoting", Reason.PROMOTING, "the stable arm is rolling to the promoted draft (maxUnavailable 0)",
                    True, False, desired)
    if seen.phase in ("Promoting", "Promoted") and seen.draft == desired:
        return Step("Promoted", Reason.PROMOTED, "the stable arm serves the promoted draft", True, False, desired)
    return Step(None, Reason.STABLE, "the stable arm serves the spec's draft", True, False, desired)


def step(spec: SpeculativeDeploymentSpec, *, stable_draft: str | None, seen: Seen, decision: Decision | Decided | None,
         stable_rolled_out: bool = True, multi_node: bool = False) -> Step:
    """The next phase and what to apply. `stable_draft`: the draft key the live stable workload
    carries (None: there is none yet, or it predates canaries: nothing to compare against)."""
    desired = draft_key(spec)
    if spec.rollout.strategy != "Canary" or multi_node or stable_draft is None or spec.replicas == 0:
        return Step(None, Reason.STABLE, "no canary: the stable workload follows the spec", True, False, desired)
    if stable_draft == desired:
        return _settled(desired, seen, stable_rolled_out)
    action = spec.rollout.canary.action
    if action == "Promote" or (seen.phase == "Promoting" and seen.draft == desired):
        why = Reason.MANUAL_PROMOTE if action == "Promote" else Reason.PROMOTING
        return Step("Promoting", why, "promoting: the stable arm rolls to the new draft with maxUnavailable 0; the canary is deleted",
                    True, False, desired)
    if seen.rejected == desired:
        return Step("RolledBack", Reason.ROLLED_BACK, "this draft was rolled back: the stable arm keeps its draft; edit spec.draft "
                    "or set spec.rollout.canary.action: Promote to go on", False, False, desired, desired)
    if action == "Abort":
        return Step("RolledBack", Reason.MANUAL_ABORT, "aborted by spec.rollout.canary.action: the canary is deleted, the stable arm "
                    "was not touched", False, False, desired, desired)
    if decision is None or seen.draft != desired or decision.action == "Wait":
        reason = decision.why if decision is not None and seen.draft == desired else Reason.CANARY_STARTING
        message = decision.message if decision is not None and seen.draft == desired else "the canary with the new draft is starting"
        return Step("Canary", reason, message, False, True, desired, seen.rejected)
    if decision.action == "Promote":
        return Step("Promoting", decision.why, decision.message, True, False, desired)
    return Step("RolledBack", decision.why, decision.message, False, False, desired, desired)


def arm_children(children: list[dict[str, Any]], now: Step, *, live_stable: dict[str, Any] | None, canary_pods: int) -> list[dict[str, Any]]:
    """The rendered children with the arms applied: the workload (first) marked with its draft,
    held as it is live while the stable arm must not be touched, rolled with maxUnavailable 0
    while promoting; the canary Deployment after it while there is one."""
    workload = with_draft(children[0], now.draft or "")
    if not now.apply_stable and live_stable is not None:
        stable = held(live_stable)
    elif now.phase == "Promoting":
        stable = promoting(workload, canary_pods)
    else:
        stable = workload
    out = [stable, *children[1:]]
    if now.canary:
        out.append(canary_workload(workload, canary_pods))
    return out


def rollout_status(now: Step, *, canary_workload: str | None, canary_pods: int, previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """status.rollout for this step: the phase and its keys; the arms' figures and the decision
    the telemetry wrote are kept while they are about this draft."""
    previous = previous if isinstance(previous, Mapping) else {}
    out: dict[str, Any] = {"phase": now.phase, "draft": now.draft, "rejectedDraft": now.rejected, "message": now.message[:4096],
                           "canaryWorkload": canary_workload if now.canary else None,
                           "canaryReplicas": canary_pods if now.canary else None}
    if previous.get("draft") == now.draft:
        out.update({key: previous.get(key) for key in ("stable", "canary", "decision")})
    return {key: value for key, value in out.items() if value is not None}


def promotion_done(rollout: Any, workload: Any) -> dict[str, Any] | None:
    """status.rollout once a promotion finished: the stable workload carries the promoted draft and
    is rolled out (read from its own events, so Promoted does not wait for the next reconcile).
    None: not promoting, or not done."""
    if not isinstance(rollout, Mapping) or rollout.get("phase") != "Promoting":
        return None
    if live_draft(workload) != rollout.get("draft") or not rolled_out(workload):
        return None
    return {**rollout, "phase": "Promoted", "message": "the stable arm serves the promoted draft"}
