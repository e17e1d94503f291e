"""The two arms' workloads, from the one the renderer makes for the spec.

The canary is the rendered Deployment under another name, with fewer replicas and the arm label
on its pods (and in its selector, so that the two Deployments' ReplicaSets never claim each
other's pods). Its pods keep the selector labels the Service, the PDB and the InferencePool
select on, so both arms serve behind them, each in proportion to its Ready pods. The stable
arm's pods carry no arm label: adding one would change its pod template and restart it, and
"not the canary" is what stable means (controller/scraping/telemetry.py reads it so).
"""

from __future__ import annotations

import copy
from typing import Any

from specdeploy.api.spec import API_GROUP
from specdeploy.render import plan_hash
from specdeploy.render.labels import PLAN_HASH_ANNOTATION, short_name

ARM_LABEL = f"{API_GROUP}/arm"
CANARY = "canary"
STABLE = "stable"
DRAFT_ANNOTATION = f"{API_GROUP}/draft"  # the draft key (rollout/phase.py draft_key) a workload serves


def arm_of(pod_labels: Any) -> str:
    """The arm a pod serves in (labels untrusted: anything but the canary's label is stable)."""
    return CANARY if isinstance(pod_labels, dict) and pod_labels.get(ARM_LABEL) == CANARY else STABLE


def canary_name(workload_name: str) -> str:
    return short_name(workload_name, "-canary")


def _rehash(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"].setdefault("annotations", {})[PLAN_HASH_ANNOTATION] = plan_hash(manifest)
    return manifest


def with_draft(workload: dict[str, Any], key: str) -> dict[str, Any]:
    """The workload marked with the draft it serves, so the stable arm's draft is read from the
    live object (after an operator restart too), not remembered."""
    out = copy.deepcopy(workload)
    out["metadata"].setdefault("annotations", {})[DRAFT_ANNOTATION] = key
    return _rehash(out)


def live_draft(workload: Any) -> str | None:
    """The draft key a live workload carries (None: none, or not a short string)."""
    meta = workload.get("metadata") if isinstance(workload, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(DRAFT_ANNOTATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def canary_workload(stable: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The canary Deployment: the rendered workload renamed, `replicas` pods, the arm label."""
    if stable.get("kind") != "Deployment":
        raise ValueError(f"a canary is a Deployment; a {stable.get('kind')} plan has none (spec.rollout.strategy)")
    out = copy.deepcopy(stable)
    meta = out["metadata"]
    meta["name"] = canary_name(meta["name"])
    meta["labels"] = {**meta.get("labels", {}), ARM_LABEL: CANARY}
    spec = out["spec"]
    spec["replicas"] = replicas
    spec["selector"]["matchLabels"] = {**spec["selector"]["matchLabels"], ARM_LABEL: CANARY}
    template_meta = spec["template"].setdefault("metadata", {})
    template_meta["labels"] = {**template_meta.get("labels", {}), ARM_LABEL: CANARY}
    return _rehash(out)


def promoting(stable: dict[str, Any], surge: int) -> dict[str, Any]:
    """The stable Deployment rolled to the new draft without losing a Ready pod: maxUnavailable
    0, and a surge of the canary's size (its GPUs are freed as the canary is deleted)."""
    out = copy.deepcopy(stable)
    out["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max(1, surge), "maxUnavailable": 0}}
    return _rehash(out)


def _status(live: Any) -> dict[str, Any]:
    status = live.get("status") if isinstance(live, dict) else None
    return status if isinstance(status, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def ready(live: Any) -> bool:
    """Every replica the Deployment asks for is Ready (a canary is compared only then)."""
    spec = live.get("spec") if isinstance(live, dict) else None
    wanted = _count(spec.get("replicas")) if isinstance(spec, dict) else 0
    return wanted > 0 and _count(_status(live).get("readyReplicas")) >= wanted


def failed(live: Any) -> str | None:
    """Why the Deployment cannot come up (its progress deadline passed), in Kubernetes' words; None: it can."""
    for condition in _status(live).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Progressing" and condition.get("status") == "False":
            return f"{condition.get('reason', 'NotProgressing')}: {str(condition.get('message', ''))[:512]}"
    return None


def rolled_out(live: Any) -> bool:
    """The Deployment's controller has seen its last change and every replica is updated and Ready."""
    meta = live.get("metadata") if isinstance(live, dict) else None
    spec = live.get("spec") if isinstance(live, dict) else None
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return False
    status = _status(live)
    wanted = _count(spec.get("replicas"))
    return (_count(status.get("observedGeneration")) >= _count(meta.get("generation"))
            and _count(status.get("updatedReplicas")) >= wanted and _count(status.get("readyReplicas")) >= wanted
            and _count(status.get("replicas")) == wanted)


def held(live: dict[str, Any]) -> dict[str, Any]:
    """The live stable workload as the desired one while it must not be touched: applying it
    patches nothing, and the child watch keeps it (it is rendered) instead of pruning it."""
    meta = live.get("metadata") or {}
    keep = {key: meta[key] for key in ("name", "namespace", "labels", "annotations", "ownerReferences") if key in meta}
    return {"apiVersion": live.get("apiVersion", "apps/v1"), "kind": live.get("kind", "Deployment"), "metadata": keep,
            "spec": copy.deepcopy(live.get("spec") or {})}
