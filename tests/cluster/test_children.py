"""What the operator does to its children on a real API server: a hand edit is put back, a switch
between one and several nodes per replica swaps the workload kind, a child an older operator
left under another name is pruned, and a config read from a ConfigMap plans like an inline one."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from .bed import WORKLOAD_NS, Cluster, until
from .test_lifecycle import _ready, llama

CONFIGS = "llama-eagle3-configs"


def child(cluster: Cluster, kind: str, name: str) -> dict[str, Any] | None:
    done = cluster.run("get", kind, name, "-n", WORKLOAD_NS, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_hand_edits_of_every_child_are_put_back(cluster: Cluster) -> None:
    cluster.apply(llama("edited", preflight={"mode": "Disabled"}))
    until(lambda: _ready(cluster, "edited"), "edited Ready=True")
    deployment, service, budget = child(cluster, "deployment", "edited"), child(cluster, "service", "edited-api"), \
        child(cluster, "pdb", "edited")
    assert deployment and service and budget
    edits = {
        "deployment/edited": {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 5}}}},
        "service/edited-api": {"spec": {"ports": [{"name": "http", "port": 9999, "targetPort": 8000}]}},
        "pdb/edited": {"spec": {"maxUnavailable": 7}},
    }
    for target, patch in edits.items():
        cluster.run("patch", target, "-n", WORKLOAD_NS, "--type=merge", "-p", json.dumps(patch))
    until(lambda: child(cluster, "deployment", "edited")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60,
          "the Deployment put back")
    until(lambda: [p["port"] for p in child(cluster, "service", "edited-api")["spec"]["ports"]] == [p["port"] for p in service["spec"]["ports"]],
          "the Service put back")
    until(lambda: child(cluster, "pdb", "edited")["spec"].get("maxUnavailable") == budget["spec"].get("maxUnavailable"),
          "the PodDisruptionBudget put back")


def test_switching_to_several_nodes_per_replica_and_back_swaps_the_workload_kind(cluster: Cluster) -> None:
    single = llama("switched", preflight={"mode": "Disabled"})
    single["spec"]["resources"] = {"gpu": {"product": "H100-80GB", "perNode": 1}}
    cluster.apply(single)
    until(lambda: _ready(cluster, "switched"), "switched Ready=True on a Deployment")
    multi = json.loads(json.dumps(single))
    multi["spec"]["parallelism"] = {"tensorParallelSize": 1, "pipelineParallelSize": 2}
    cluster.apply(multi)
    until(lambda: child(cluster, "leaderworkerset", "switched") is not None and child(cluster, "deployment", "switched") is None,
          "the LeaderWorkerSet in, the Deployment pruned")
    until(lambda: _ready(cluster, "switched"), "switched Ready=True on a LeaderWorkerSet")
    cluster.run("patch", "leaderworkerset/switched", "-n", WORKLOAD_NS, "--type=merge", "-p",
                json.dumps({"spec": {"startupPolicy": "LeaderReady"}}))
    until(lambda: child(cluster, "leaderworkerset", "switched")["spec"].get("startupPolicy") != "LeaderReady",
          "the LeaderWorkerSet put back")
    cluster.apply(single)
    until(lambda: child(cluster, "deployment", "switched") is not None and child(cluster, "leaderworkerset", "switched") is None,
          "the Deployment back, the LeaderWorkerSet pruned")


def test_children_an_older_operator_left_under_other_names_are_pruned(cluster: Cluster) -> None:
    cluster.apply(llama("upgraded", preflight={"mode": "Disabled"}))
    until(lambda: _ready(cluster, "upgraded"), "upgraded Ready=True")
    service = child(cluster, "service", "upgraded-api")
    owner = service["metadata"]["ownerReferences"]
    labels = service["metadata"]["labels"]
    leftovers = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "upgraded-old-api", "labels": labels, "ownerReferences": owner},
         "spec": {"selector": service["spec"]["selector"], "ports": [{"name": "http", "port": 8000}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "upgraded-old", "labels": labels, "ownerReferences": owner},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": service["spec"]["selector"]}}},
    ]
    for leftover in leftovers:
        cluster.run("create", "-n", WORKLOAD_NS, "-f", "-", stdin=json.dumps(leftover))
    until(lambda: child(cluster, "service", "upgraded-old-api") is None and child(cluster, "pdb", "upgraded-old") is None,
          "the leftovers pruned")
    assert child(cluster, "service", "upgraded-api") is not None


def test_a_draft_config_from_a_configmap_plans_like_the_inline_one(cluster: Cluster) -> None:
    inline = llama("from-configmap", preflight={"mode": "Disabled"})
    draft_config = inline["spec"]["draft"].pop("config")
    client.CoreV1Api(cluster.api).create_namespaced_config_map(WORKLOAD_NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=CONFIGS), data={"config.json": json.dumps(draft_config)}))
    inline["spec"]["draft"]["configMapRef"] = {"name": CONFIGS}
    cluster.apply(inline)
    until(lambda: _ready(cluster, "from-configmap"), "from-configmap Ready=True")
    plan = cluster.sd("from-configmap")["status"]["plan"]
    assert plan["method"] == "eagle3" and plan["draft"]["attentionHeadsPerGpu"] == draft_config["num_attention_heads"]
