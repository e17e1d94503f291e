"""The InferencePool (Gateway API Inference Extension, inference.networking.k8s.io/v1) that
`spec.routing` asks for: the serving pods as one backend a gateway's HTTPRoute can name, with
the endpoint picker that chooses a pod for each request."""

from __future__ import annotations

from typing import Any

from specdeploy.api.spec import RoutingSpec
from specdeploy.planning.plan import Plan
from specdeploy.render.labels import HTTP_PORT, LWS_WORKER_INDEX_LABEL, inference_pool_name, labels, selector_labels

INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"


def pool_selector(plan: Plan, name: str) -> dict[str, str]:
    """The CR's pods that serve HTTP, by the workload's selector labels (name and instance), not by
    anything a workload kind or revision adds: the pods of a second workload of the same CR (a
    canary) carry them too and join the pool. Never the preflight's pod (another name label); of a
    multi-node replica only the leader, as for the Service."""
    selector = selector_labels(name)
    if plan.multi_node:
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}
    return selector


def inference_pool(routing: RoutingSpec, plan: Plan, name: str, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": pool_selector(plan, name)},
        "targetPorts": [{"number": HTTP_PORT}],
    }
    picker = routing.endpoint_picker
    if picker is not None:
        spec["endpointPickerRef"] = {"kind": "Service", "name": picker.name, "port": {"number": picker.port},
                                     "failureMode": picker.failure_mode}
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": {"name": inference_pool_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": spec,
    }
