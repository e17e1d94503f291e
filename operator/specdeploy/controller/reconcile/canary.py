"""The reconcile's part of a draft canary: read what the pure step needs (the live stable
workload's draft, the last status.rollout and the decision the telemetry wrote), and turn the
rendered children into both arms' (rollout/phase.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from specdeploy.api.conditions import Reason, Verdict
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller.process.kube import Kube
from specdeploy.rollout.arms import canary_name, live_draft, rolled_out
from specdeploy.rollout.phase import Decided, Seen, arm_children, canary_replicas, rollout_status, step

# The Rollout condition per phase (None: no draft change in flight).
_STATUS = {None: "True", "Promoted": "True", "Canary": "Unknown", "Promoting": "Unknown", "RolledBack": "False"}


@dataclass
class Arms:
    children: list[dict[str, Any]]
    status: dict[str, Any] | None  # status.rollout (None: strategy RollingUpdate, nothing written)
    verdict: Verdict | None
    event: tuple[str, str, str] | None = None


async def arms(kube: Kube, spec: SpeculativeDeploymentSpec, children: list[dict[str, Any]], *, namespace: str,
               previous: Mapping[str, Any]) -> Arms:
    """The children to apply for this spec, with the canary's and the stable arm's parts."""
    if spec.rollout.strategy != "Canary":
        if not previous.get("rollout"):
            return Arms(children, None, None)
        # Switched back: the old figures go (merge_diff deletes the keys not written), the condition says why.
        said = "strategy RollingUpdate: a draft change rolls out like any change; a canary is deleted"
        return Arms(children, {"message": said}, Verdict("True", Reason.STABLE, said))
    workload = children[0]
    live = await kube.get(workload["kind"], namespace, workload["metadata"]["name"])
    rollout = previous.get("rollout")
    seen = Seen.of(rollout)
    now = step(spec, stable_draft=live_draft(live), seen=seen, decision=Decided.of(rollout),
               stable_rolled_out=rolled_out(live), multi_node=workload["kind"] != "Deployment")
    pods = canary_replicas(spec.replicas, spec.rollout.canary.share)
    out = arm_children(children, now, live_stable=live, canary_pods=pods)
    status = rollout_status(now, canary_workload=f"Deployment/{canary_name(workload['metadata']['name'])}", canary_pods=pods,
                            previous=rollout)
    verdict = Verdict(_STATUS[now.phase], now.reason, now.message[:2000])
    event = None
    if now.phase != seen.phase:  # one Event per phase change, not per reconcile
        kind = "Warning" if now.phase == "RolledBack" else "Normal"
        event = (kind, now.reason, f"Rollout {now.phase or 'Stable'}: {now.message}"[:1024])
    return Arms(out, status, verdict, event)
