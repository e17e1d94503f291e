"""The serving workload: a Deployment when a replica fits on one node, a LeaderWorkerSet
(one leader + workers per replica, started together) when it spans several."""

from __future__ import annotations

from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import Plan
from specdeploy.render.labels import labels, selector_labels, workload_name
from specdeploy.render.pod import NodeRole, pod_template

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
# A multi-TB checkpoint can take an hour to load; the default 600 s would mark every
# first rollout as failed (ProgressDeadlineExceeded) while it is still loading.
PROGRESS_DEADLINE_S = 7200


def _rolling(spec: SpeculativeDeploymentSpec) -> dict[str, Any]:
    return {"maxSurge": spec.rollout.max_surge, "maxUnavailable": spec.rollout.max_unavailable}


def deployment(spec: SpeculativeDeploymentSpec, plan: Plan, name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": _rolling(spec)},
            "progressDeadlineSeconds": PROGRESS_DEADLINE_S,
            "revisionHistoryLimit": 3,
            "template": pod_template(spec, plan, name, NodeRole.SINGLE),
        },
    }


def leader_worker_set(spec: SpeculativeDeploymentSpec, plan: Plan, name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": workload_name(name), "namespace": namespace, "labels": labels(name)},
        "spec": {
            "replicas": spec.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": _rolling(spec)},
            "leaderWorkerTemplate": {
                "size": plan.nodes_per_replica,
                # One lost rank breaks the process group: restart the whole group.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(spec, plan, name, NodeRole.LEADER),
                "workerTemplate": pod_template(spec, plan, name, NodeRole.WORKER),
            },
        },
    }


def workload(spec: SpeculativeDeploymentSpec, plan: Plan, name: str, namespace: str) -> dict[str, Any]:
    build = leader_worker_set if plan.multi_node else deployment
    return build(spec, plan, name, namespace)
