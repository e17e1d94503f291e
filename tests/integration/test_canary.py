"""Draft canaries in the running operator (kmock API, real HTTP /metrics): a draft change
starts a canary Deployment next to the untouched stable one; the counters each arm's pods
serve decide; a rollback deletes only the canary, a promotion rolls the stable Deployment to
the new draft with maxUnavailable 0 and then deletes the canary."""

from __future__ import annotations

import copy
import json
from typing import Any, Iterator

import pytest

from specdeploy.rollout.arms import ARM_LABEL, CANARY
from tests.metrics_server import serve_metrics

from .conftest import DEPLOYMENT, Cluster, Operator, created, eventually
from .test_telemetry import INTERVAL_S, FakeVllmMetrics, _pod, add_pod, replica_set


@pytest.fixture
def fast_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_TELEMETRY_INTERVAL_S", str(INTERVAL_S))


@pytest.fixture
def arms() -> Iterator[tuple[FakeVllmMetrics, int, FakeVllmMetrics, int]]:
    stable, canary = FakeVllmMetrics(k=3), FakeVllmMetrics(k=4)
    with serve_metrics(stable.body) as stable_port, serve_metrics(canary.body) as canary_port:
        yield stable, stable_port, canary, canary_port


def k_of(deployment: dict[str, Any]) -> int:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return int(json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"])


def stable_writes(cluster: Cluster, name: str, since: int) -> list[str]:
    """Writes to the stable Deployment (its spec or metadata; kmock keeps no generation to compare)."""
    return [f"{r.method} {r.url.path}" for r in cluster.writes(since, DEPLOYMENT)
            if r.url.path.rstrip("/").endswith(f"/deployments/{name}")]


def rollout(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.sd(name).get("status", {}).get("rollout") or {}


async def canary_replica_set(cluster: Cluster, name: str) -> str:
    """The ReplicaSet the Deployment controller would make for the canary: the canary's pod labels
    (the CR's selector labels and the arm), owned by the canary Deployment."""
    deployment = cluster.get(DEPLOYMENT, f"{name}-canary")
    meta = deployment["metadata"]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": f"{meta['name']}-7c9d", "namespace": meta["namespace"],
                       "labels": deployment["spec"]["template"]["metadata"]["labels"],
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                            "uid": meta["uid"], "controller": True}]},
          "spec": {"selector": deployment["spec"]["selector"], "template": deployment["spec"]["template"]}}
    response = await cluster.k.post(f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets", json=rs)
    assert response.status in (200, 201), await response.text()
    return str((await response.json())["metadata"]["uid"])


async def _canary_serving(cluster: Cluster, arms: tuple[FakeVllmMetrics, int, FakeVllmMetrics, int], uid: str) -> tuple[str, int]:
    """A CR under strategy Canary serving k=3, then a change to k=4: the canary comes up Ready
    with one pod (the Deployment and ReplicaSet controllers' part done by hand: kmock runs none)."""
    from .test_operator import LLAMA

    stable, stable_port, canary, canary_port = arms
    doc = copy.deepcopy(LLAMA)
    doc["spec"]["rollout"] = {"strategy": "Canary"}
    name = await created(cluster, doc, uid)
    await eventually(lambda: (cluster.get(DEPLOYMENT, name)["metadata"].get("annotations") or {}).get("specdeploy.io/draft"),
                     what="the stable workload marked with its draft")
    replicas = cluster.get(DEPLOYMENT, name)["spec"]["replicas"]
    await cluster.patch_status(DEPLOYMENT, name, {"observedGeneration": 1, "replicas": replicas, "readyReplicas": replicas,
                                                  "updatedReplicas": replicas})
    owner = await replica_set(cluster, name)
    await add_pod(cluster, _pod(name, f"{name}-0", stable_port, owner_uid=owner))
    mark = cluster.mark()
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 4}}, generation=2)
    await eventually(lambda: cluster.exists(DEPLOYMENT, f"{name}-canary") and rollout(cluster, name).get("phase") == "Canary",
                     what="the canary Deployment, phase Canary")
    assert k_of(cluster.get(DEPLOYMENT, name)) == 3 and stable_writes(cluster, name, mark) == []  # the stable arm untouched
    canary_dep = cluster.get(DEPLOYMENT, f"{name}-canary")
    assert k_of(canary_dep) == 4 and canary_dep["spec"]["replicas"] == 1
    assert canary_dep["spec"]["template"]["metadata"]["labels"][ARM_LABEL] == CANARY
    await cluster.patch_status(DEPLOYMENT, f"{name}-canary", {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1,
                                                              "updatedReplicas": 1})
    canary_rs = await canary_replica_set(cluster, name)
    pod = _pod(name, f"{name}-canary-0", canary_port, owner_uid=canary_rs)
    pod["metadata"]["labels"][ARM_LABEL] = CANARY
    await add_pod(cluster, pod)
    await eventually(lambda: stable.requests >= 2 and canary.requests >= 2, what="both arms scraped twice")
    return name, mark


async def test_a_draft_that_accepts_almost_nothing_is_rolled_back_and_only_the_canary_goes(
    fast_telemetry: None, arms: tuple[FakeVllmMetrics, int, FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    stable, _, canary, _ = arms
    name, mark = await _canary_serving(cluster, arms, "uid-canary-bad")
    stable.step(drafts=1000, accepted_lengths=[100, 100, 700])
    canary.step(drafts=1000, accepted_lengths=[20, 0, 0, 0])
    await eventually(lambda: rollout(cluster, name).get("phase") == "RolledBack", what="RolledBack")
    await eventually(lambda: not cluster.exists(DEPLOYMENT, f"{name}-canary"), what="the canary deleted")
    status = rollout(cluster, name)
    assert status["decision"]["action"] == "RollBack" and status["decision"]["reason"] == "CanaryWorse"
    assert status["decision"]["upperBound"] < 0
    assert status["canary"]["acceptanceRate"] < 0.01 < status["stable"]["acceptanceRate"]
    assert status["rejectedDraft"] == status["draft"]
    assert k_of(cluster.get(DEPLOYMENT, name)) == 3 and stable_writes(cluster, name, mark) == []  # never touched
    condition = cluster.condition(name, "Rollout")
    assert (condition["status"], condition["reason"]) == ("False", "CanaryWorse")
    await eventually(lambda: any(e.get("type") == "Warning" and e.get("reason") == "CanaryWorse" for e in cluster.events()),
                     what="a Warning Event")
    # No loop: the rejected draft gets no second canary.
    scrapes = stable.requests
    await eventually(lambda: stable.requests >= scrapes + 4, what="more scrapes")
    assert not cluster.exists(DEPLOYMENT, f"{name}-canary") and rollout(cluster, name)["phase"] == "RolledBack"


async def test_a_draft_as_good_as_the_stable_one_is_promoted_without_losing_a_ready_pod(
    fast_telemetry: None, arms: tuple[FakeVllmMetrics, int, FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    stable, _, canary, _ = arms
    name, mark = await _canary_serving(cluster, arms, "uid-canary-good")
    stable.step(drafts=1000, accepted_lengths=[100, 100, 700])  # 2.5 tokens/step at k=3
    canary.step(drafts=1000, accepted_lengths=[50, 50, 100, 750])  # 3.5 at k=4
    await eventually(lambda: k_of(cluster.get(DEPLOYMENT, name)) == 4, what="the stable arm rolled to k=4")
    live = cluster.get(DEPLOYMENT, name)
    assert live["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert stable_writes(cluster, name, mark)  # the promotion is the first write to the stable arm
    await eventually(lambda: rollout(cluster, name).get("phase") == "Promoting", what="Promoting")
    assert rollout(cluster, name)["decision"]["reason"] == "CanaryNotWorse"
    assert rollout(cluster, name)["canary"]["speedup"] > rollout(cluster, name)["stable"]["speedup"]
    await eventually(lambda: not cluster.exists(DEPLOYMENT, f"{name}-canary"), what="the canary deleted")
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": live["spec"]["replicas"],
                                                  "readyReplicas": live["spec"]["replicas"], "updatedReplicas": live["spec"]["replicas"]})
    await eventually(lambda: rollout(cluster, name).get("phase") == "Promoted", what="Promoted")
    assert cluster.condition(name, "Rollout")["reason"] == "Promoted"


async def test_switching_back_to_rolling_update_deletes_the_canary_and_rolls_the_stable_arm(
    fast_telemetry: None, arms: tuple[FakeVllmMetrics, int, FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    name, _ = await _canary_serving(cluster, arms, "uid-canary-off")
    await cluster.patch_spec(name, {"rollout": {"strategy": "RollingUpdate"}}, generation=3)
    await eventually(lambda: not cluster.exists(DEPLOYMENT, f"{name}-canary") and k_of(cluster.get(DEPLOYMENT, name)) == 4,
                     what="the canary pruned, the stable arm rolled to k=4")
    await eventually(lambda: "phase" not in rollout(cluster, name) and "message" in rollout(cluster, name), what="status.rollout cleared")
    condition = cluster.condition(name, "Rollout")
    assert (condition["status"], condition["reason"]) == ("True", "Stable")
