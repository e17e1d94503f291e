"""A draft canary on a real API server (kube-apiserver, the Deployment and ReplicaSet controllers,
the scheduler, kwok's GPU nodes): the canary's pods are scheduled on the planned GPU; a rollback
deletes only the canary and the stable ReplicaSet is not written (its generation unchanged); a
promotion rolls the stable Deployment to the new draft without a moment of zero Ready replicas.

kwok's pods serve no /metrics, so the decisions here are the manual ones (spec.rollout.canary.action);
the counters' decision is the integration and e2e suites' (tests/integration/test_canary.py,
tests/e2e/test_canary_serving.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes import client, watch

from .bed import WORKLOAD_NS, Cluster, until
from .test_lifecycle import PLANNED_PRODUCTS, _ready, llama, node_of

NAME = "canaried"


def _k(deployment: dict[str, Any]) -> int:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return int(json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"])


def _deployment(cluster: Cluster, name: str) -> dict[str, Any] | None:
    done = cluster.run("get", "deployment", name, "-n", WORKLOAD_NS, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _replica_sets(cluster: Cluster, deployment_uid: str) -> dict[str, int]:
    """The Deployment's ReplicaSets (by controller uid): name -> metadata.generation."""
    sets = client.AppsV1Api(cluster.api).list_namespaced_replica_set(WORKLOAD_NS).items
    return {r.metadata.name: r.metadata.generation for r in sets
            if any(o.controller and o.uid == deployment_uid for o in r.metadata.owner_references or [])}


def _rollout(cluster: Cluster) -> dict[str, Any]:
    return ((cluster.sd(NAME) or {}).get("status") or {}).get("rollout") or {}


def _doc(k: int, action: str = "Auto") -> dict[str, Any]:
    doc = llama(NAME, replicas=2, preflight={"mode": "Disabled"}, rollout={"strategy": "Canary", "canary": {"action": action}})
    doc["spec"]["draft"]["numSpeculativeTokens"] = k
    return doc


class ReadyWatch:
    """Every (observedGeneration, readyReplicas) the stable Deployment reports, from a watch of it
    (every status the API server stores, not a poll's sample of them)."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.seen: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._watch = watch.Watch()
        self._apps = client.AppsV1Api(cluster.api)
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        until(lambda: self.seen, "the watch's first event")

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self._apps.list_namespaced_deployment, WORKLOAD_NS,
                                            field_selector=f"metadata.name={self._name}", timeout_seconds=600):
                status = event["object"].status
                self.seen.append((status.observed_generation or 0, status.ready_replicas or 0))
        except Exception as exc:  # noqa: BLE001  a broken stream would leave the check vacuous: reported, not swallowed
            if not self._stopped:
                self.error = exc

    _stopped = False

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


def test_canary_on_gpu_nodes_rollback_untouched_and_promotion_never_at_zero_ready(cluster: Cluster) -> None:
    cluster.apply(_doc(3))
    until(lambda: _ready(cluster, NAME), f"{NAME} Ready=True")
    until(lambda: ((_deployment(cluster, NAME) or {}).get("metadata", {}).get("annotations") or {}).get("specdeploy.io/draft"),
          "the stable Deployment marked with its draft")
    stable = _deployment(cluster, NAME)
    assert stable is not None
    generation, sets = stable["metadata"]["generation"], _replica_sets(cluster, stable["metadata"]["uid"])

    # A new k: the canary comes up on the planned GPU, the stable arm is not written.
    cluster.apply(_doc(4))
    until(lambda: (_deployment(cluster, f"{NAME}-canary") or {}).get("status", {}).get("readyReplicas") == 1, "the canary Ready")
    assert _rollout(cluster)["phase"] == "Canary"
    canary = _deployment(cluster, f"{NAME}-canary")
    assert _k(canary) == 4 and canary["spec"]["template"]["metadata"]["labels"]["specdeploy.io/arm"] == "canary"
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(WORKLOAD_NS, label_selector="specdeploy.io/arm=canary").items
    assert len(pods) == 1
    assert node_of(cluster, pods[0].spec.node_name).metadata.labels["nvidia.com/gpu.product"] in PLANNED_PRODUCTS["H100-80GB"]
    assert _deployment(cluster, NAME)["metadata"]["generation"] == generation

    # Abort: only the canary goes; the stable Deployment and its ReplicaSets are not written.
    cluster.apply(_doc(4, "Abort"))
    until(lambda: _deployment(cluster, f"{NAME}-canary") is None and _rollout(cluster).get("phase") == "RolledBack", "rolled back")
    assert cluster.condition(NAME, "Rollout")["status"] == "False"
    assert _deployment(cluster, NAME)["metadata"]["generation"] == generation
    assert _replica_sets(cluster, stable["metadata"]["uid"]) == sets
    assert _k(_deployment(cluster, NAME)) == 3

    # Promote: the stable Deployment rolls to k=4; no watch event of it reports 0 Ready replicas.
    ready = ReadyWatch(cluster, NAME)
    try:
        cluster.apply(_doc(4, "Promote"))
        until(lambda: _rollout(cluster).get("phase") == "Promoted", "Promoted")
        promoted = _deployment(cluster, NAME)
        assert _k(promoted) == 4 and promoted["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        assert promoted["status"].get("readyReplicas") == 2 and promoted["status"].get("updatedReplicas") == 2
    finally:
        ready.stop()
    assert ready.error is None, ready.error
    assert min(r for _, r in ready.seen) >= 1, ready.seen
    assert len({g for g, _ in ready.seen}) >= 2, ready.seen  # the watch saw the rollout itself, not only its end
    assert len(_replica_sets(cluster, stable["metadata"]["uid"])) == len(sets) + 1  # a rolling update, not a re-creation
    assert _ready(cluster, NAME)
