"""Plan + spec -> Kubernetes manifests. Pure: no client, no environment, no clock.

Every child carries `specdeploy.io/plan-hash`, the sha256 of its own rendered body, so the
controller can tell "already as desired" from the live object alone (also after a restart).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import Plan
from specdeploy.render.labels import (
    PLAN_HASH_ANNOTATION,
    child_names,
    endpoint,
    is_dns1035_label,
    is_label_value,
    selector_string,
    service_name,
    workload_name,
)
from specdeploy.render.network import pod_disruption_budget, service
from specdeploy.render.pod import vllm_args
from specdeploy.render.speculative_config import speculative_config
from specdeploy.render.workloads import workload

__all__ = [
    "PLAN_HASH_ANNOTATION",
    "child_names",
    "endpoint",
    "invalid_names",
    "plan_hash",
    "render_manifests",
    "selector_string",
    "service_name",
    "speculative_config",
    "vllm_args",
    "workload_name",
]


def plan_hash(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON, ignoring the hash annotation itself. Only the
    two dicts on the annotation's path are copied: a deep copy of every child was 9 % of the
    controller thread."""
    body = dict(manifest)
    if "metadata" in body:
        metadata = body["metadata"] = dict(body["metadata"])
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != PLAN_HASH_ANNOTATION}
        if annotations:
            metadata["annotations"] = annotations
        else:
            metadata.pop("annotations", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _annotated(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"].setdefault("annotations", {})[PLAN_HASH_ANNOTATION] = plan_hash(manifest)
    return manifest


def render_manifests(spec: SpeculativeDeploymentSpec, plan: Plan, *, name: str, namespace: str) -> list[dict[str, Any]]:
    """The desired children, workload first. Owner references are the controller's to add."""
    children = [
        workload(spec, plan, name, namespace),
        service(plan, name, namespace),
        pod_disruption_budget(name, namespace),
    ]
    return [_annotated(child) for child in children]


def _label_maps(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    maps = [manifest["metadata"].get("labels") or {}]
    spec = manifest.get("spec") or {}
    templates = [spec.get("template")] + [
        (spec.get("leaderWorkerTemplate") or {}).get(k) for k in ("leaderTemplate", "workerTemplate")
    ]
    maps += [((t or {}).get("metadata") or {}).get("labels") or {} for t in templates]
    maps += [spec.get("selector") or {}, (spec.get("selector") or {}).get("matchLabels") or {}]
    return maps


def invalid_names(children: list[dict[str, Any]]) -> list[str]:
    """Every child name or label value Kubernetes would refuse: the controller creates
    nothing while this is not empty (a half-created set would hold GPUs and never serve)."""
    problems = []
    for child in children:
        kind, name = child["kind"], child["metadata"]["name"]
        if not is_dns1035_label(name):
            problems.append(f"{kind} name {name!r} is not a DNS-1035 label of at most 63 characters")
        for labels in _label_maps(child):
            for key, value in labels.items():
                if isinstance(value, str) and not is_label_value(value):
                    problems.append(f"{kind} {name}: label {key}={value!r} is not a valid label value")
    return problems
