"""The Service in front of the HTTP-serving pods, and the PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from specdeploy.planning.plan import Plan
from specdeploy.render.labels import HTTP_PORT, LWS_WORKER_INDEX_LABEL, labels, pdb_name, selector_labels, service_name


def service(plan: Plan, name: str, namespace: str) -> dict[str, Any]:
    selector = selector_labels(name)
    if plan.multi_node:  # only rank 0 of each group serves HTTP
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(name: str, namespace: str) -> dict[str, Any]:
    """At most one vLLM pod evicted at a time; maxUnavailable (not minAvailable) so a
    single-replica model never blocks a node drain forever."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": pdb_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(name)}},
    }
