"""The operator end to end over real HTTP: create, update, invalid update, multi-node,
restart, readiness. Final-state assertions only."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import kubernetes_validate

from specdeploy.render import PLAN_HASH_ANNOTATION

from .conftest import DEPLOYMENT, LWS, PDB, SERVICE, Cluster, Operator, created, eventually, example, reconciles_finished, with_identity

LLAMA = example("llama-3.1-8b-eagle3.yaml")  # single node, inline configs
K3 = example("kimi-k3-dspark-h200.yaml")  # two nodes per replica


def args_of(deployment: dict[str, Any]) -> list[str]:
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


async def test_create_renders_children_status_and_plan(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-llama")
    await eventually(lambda: cluster.exists(SERVICE, f"{name}-api") and cluster.exists(PDB, name), what="children")
    dep = cluster.get(DEPLOYMENT, name)
    owner = dep["metadata"]["ownerReferences"]
    assert owner == [{
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "name": name,
        "uid": "uid-llama", "controller": True, "blockOwnerDeletion": True,
    }]
    for child in (cluster.get(SERVICE, f"{name}-api"), cluster.get(PDB, name)):
        assert child["metadata"]["ownerReferences"] == owner
    args = args_of(dep)
    assert args[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert json.loads(flag(args, "--speculative-config")) == {
        "method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1,
    }
    assert flag(args, "--tensor-parallel-size") == "1"
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # Host CPU and memory from the plan (1 GPU: 2 + 2 cores, 16Gi + 8Gi); GPUs requested and limited.
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8000"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert pod["enableServiceLinks"] is False
    # What the operator sent is a valid Deployment for real apiservers.
    body = {k: v for k, v in dep.items() if k != "status"}
    kubernetes_validate.validate(body, "1.35.0", strict=True)

    status = cluster.sd(name)["status"]
    assert [c["type"] for c in status["conditions"]] == ["Validated", "Planned", "Progressing", "Available", "Ready", "Reconciling", "Stalled"]
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Validated"]["status"] == "True"
    assert by_type["Progressing"]["status"] == "True"
    assert by_type["Ready"]["status"] == "False"
    # kstatus (Flux): still reconciling, not stalled.
    assert (by_type["Reconciling"]["status"], by_type["Stalled"]["status"]) == ("True", "False")
    assert status["plan"]["tensorParallelSize"] == 1 and status["plan"]["decisions"]
    assert status["workload"] == f"Deployment/{name}"
    assert status["selector"] == f"app.kubernetes.io/instance={name},app.kubernetes.io/name=vllm"
    assert status["endpoint"] == f"http://{name}-api.ns1.svc:8000/v1"
    assert status["observedGeneration"] == 1


async def test_update_patches_speculative_config(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-upd")
    before = cluster.get(DEPLOYMENT, name)
    mark = cluster.mark()
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 5}}, generation=2)
    await eventually(lambda: '"num_speculative_tokens":5' in flag(args_of(cluster.get(DEPLOYMENT, name)), "--speculative-config"), what="new --speculative-config")
    await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 2, what="observedGeneration 2")
    after = cluster.get(DEPLOYMENT, name)
    assert after["metadata"]["annotations"][PLAN_HASH_ANNOTATION] != before["metadata"]["annotations"][PLAN_HASH_ANNOTATION]
    assert cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == 5
    # The Deployment is patched (never recreated), and Service/PDB are untouched.
    assert cluster.writes(mark, DEPLOYMENT) and all(str(r.method).upper().endswith("PATCH") for r in cluster.writes(mark, DEPLOYMENT))
    assert not cluster.writes(mark, SERVICE) and not cluster.writes(mark, PDB)


async def test_invalid_update_reports_and_leaves_children_alone(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-bad")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    children = {r: cluster.get(r, n) for r, n in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name))}
    mark = cluster.mark()
    # Overriding a plan-owned flag through extraArgs is refused with a finding naming the arg.
    await cluster.patch_spec(name, {"vllm": {"extraArgs": ["--tensor-parallel-size=2"]}}, generation=2)
    await eventually(lambda: cluster.condition(name, "Validated").get("status") == "False", what="Validated=False")
    status = cluster.sd(name)["status"]
    assert status["observedGeneration"] == 2
    assert any(f["field"] == "spec.vllm.extraArgs[0]" and f["severity"] == "error" for f in status["findings"])
    assert "spec.vllm.extraArgs[0]" in cluster.condition(name, "Validated")["message"]
    assert cluster.condition(name, "Ready")["status"] == "False"
    assert status["plan"]["tensorParallelSize"] == 1  # the plan of what still runs
    await eventually(lambda: any(e.get("type") == "Warning" for e in cluster.events()), what="a Warning event")

    # A spec pydantic refuses (a typo'd field) is reported the same way, with the field named.
    await cluster.patch_spec(name, {"vllm": {"extraArgs": []}, "replica": 3}, generation=3)
    await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 3, what="generation 3")
    assert cluster.condition(name, "Validated")["reason"] == "InvalidSpec"
    assert any(f["field"] == "spec.replica" for f in cluster.sd(name)["status"]["findings"])

    for resource, name_ in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name)):
        assert cluster.get(resource, name_) == children[resource], f"{resource} changed"
        assert not cluster.writes(mark, resource)


async def test_multi_node_plan_renders_a_leader_worker_set(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, K3, "uid-k3")
    lws = await eventually(lambda: cluster.get(LWS, name), what="the LeaderWorkerSet")
    assert not cluster.exists(DEPLOYMENT, name)
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]["args"]
    worker = template["workerTemplate"]["spec"]["containers"][0]["args"]
    assert flag(leader, "--tensor-parallel-size") == "16" and flag(leader, "--nnodes") == "2"
    assert "--headless" in worker and "--headless" not in leader
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "uid-k3"
    assert cluster.sd(name)["status"]["workload"] == f"LeaderWorkerSet/{name}"


async def test_restart_over_existing_objects_writes_nothing(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-restart")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    await eventually(lambda: cluster.condition(name, "Ready").get("status") == "True", what="Ready=True")
    await operator.stop()
    snapshot = {r: cluster.get(r, n) for r, n in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name))}
    sd_before = cluster.sd(name)
    mark = cluster.mark()

    done = reconciles_finished()
    await operator.start()
    await eventually(lambda: reconciles_finished() > done, what="the resume reconcile")
    await asyncio.sleep(1.0)  # a wrong write could only come later: the wait can miss one, never invent one
    assert cluster.writes(mark) == [], [(r.method, r.resource, r.name, r.data) for r in cluster.writes(mark)]
    for resource, n in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name)):
        assert cluster.get(resource, n) == snapshot[resource]
    assert cluster.sd(name) == sd_before


async def test_child_readiness_flips_available_and_ready(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-ready")
    assert cluster.condition(name, "Available")["status"] == "False"
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    await eventually(lambda: cluster.condition(name, "Ready").get("status") == "True", what="Ready=True")
    status = cluster.sd(name)["status"]
    assert cluster.condition(name, "Available")["status"] == "True"
    assert cluster.condition(name, "Progressing")["status"] == "False"
    assert status["readyReplicas"] == 1 and status["replicas"] == 1

    # A pod lost: Available goes False and Ready with it.
    await cluster.patch_status(DEPLOYMENT, name, {"readyReplicas": 0})
    await eventually(lambda: cluster.condition(name, "Available").get("status") == "False", what="Available=False")
    assert cluster.condition(name, "Ready")["status"] == "False"
    assert cluster.sd(name)["status"]["readyReplicas"] == 0


async def test_missing_configmap_is_retried_and_reported(operator: Operator, cluster: Cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "from-configmap"
    del doc["spec"]["draft"]["config"]
    doc["spec"]["draft"]["configMapRef"] = {"name": "draft-config"}
    await cluster.create(with_identity(doc, "uid-cm"))
    await eventually(lambda: cluster.condition("from-configmap", "Validated").get("reason") == "ConfigUnavailable", what="ConfigUnavailable")
    assert cluster.condition("from-configmap", "Validated")["status"] == "Unknown"
    assert not cluster.exists(DEPLOYMENT, "from-configmap")


    assert not cluster.exists(DEPLOYMENT, "local-path")


async def test_a_layout_that_does_not_fit_is_validated_but_not_planned(operator: Operator, cluster: Cluster) -> None:
    """Llama-3.1-70B in bf16 at TP 1, PP 1 on one A100-40GB: vLLM would accept the pair, the
    weights cannot fit. Validated=True, Planned=False NoFeasiblePlan, and no GPU is taken."""
    doc = copy.deepcopy(example("llama-3.1-70b-eagle3.yaml"))
    doc["metadata"]["name"] = "llama-70b-a100"
    doc["spec"]["draft"] = {"method": "ngram", "numSpeculativeTokens": 3}
    doc["spec"]["resources"] = {"gpu": {"product": "A100-40GB"}}
    doc["spec"]["parallelism"] = {"tensorParallelSize": 1, "pipelineParallelSize": 1}
    name = doc["metadata"]["name"]
    await cluster.create(with_identity(doc, "uid-no-fit"))
    await eventually(lambda: cluster.condition(name, "Planned").get("status") == "False", what="Planned=False")
    assert cluster.condition(name, "Validated")["status"] == "True"
    planned = cluster.condition(name, "Planned")
    assert planned["reason"] == "NoFeasiblePlan" and "GiB" in planned["message"]
    findings = cluster.sd(name)["status"]["findings"]
    assert [(f["code"], f["stage"]) for f in findings if f["severity"] == "error"] == [("memory-does-not-fit", "plan")]
    assert not cluster.exists(DEPLOYMENT, name) and not cluster.exists(LWS, name)
