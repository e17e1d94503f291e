"""Plan + spec -> Kubernetes manifests. Pure: no client, no environment, no clock.

Every child carries `specdeploy.io/plan-hash`, the sha256 of its own rendered body, so the
controller can tell "already as desired" from the live object alone (also after a restart).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import Plan
from specdeploy.render.labels import (
    PLAN_HASH_ANNOTATION,
    endpoint,
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
    "endpoint",
    "plan_hash",
    "render_manifests",
    "selector_string",
    "service_name",
    "speculative_config",
    "vllm_args",
    "workload_name",
]


def plan_hash(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON, ignoring the hash annotation itself."""
    body = copy.deepcopy(manifest)
    metadata = body.get("metadata", {})
    annotations = metadata.get("annotations", {})
    annotations.pop(PLAN_HASH_ANNOTATION, None)
    if not annotations:
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
