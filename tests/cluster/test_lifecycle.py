"""A SpeculativeDeployment through a real control plane: the CRD, the webhook called by the API
server, the scheduler placing pods on the GPU the plan was made for (or saying why it cannot),
the Job controller running the preflight, the LWS controller making a multi-node replica's pods,
and the garbage collector removing every child."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from .bed import ROOT, VLLM_IMAGE, WORKLOAD_NS, Cluster, until

BAD_CRS = ROOT / "tests" / "fixtures" / "bad-crs"
PLANNED_PRODUCTS = {"H100-80GB": {"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}, "MI300X-192GB": {"AMD_Instinct_MI300X_OAM"}}


def example(name: str, cr_name: str, **spec: Any) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": cr_name, "namespace": WORKLOAD_NS}
    doc["spec"].pop("hfTokenSecretRef", None)
    doc["spec"].update(spec)
    return doc


def llama(cr_name: str, **spec: Any) -> dict[str, Any]:
    return example("llama-3.1-8b-eagle3.yaml", cr_name, **spec)


def owned_pods(cluster: Cluster, cr_name: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(WORKLOAD_NS).items
    return [p for p in pods if (p.metadata.labels or {}).get("app.kubernetes.io/instance", "").startswith(cr_name)
            and (p.metadata.labels or {}).get("app.kubernetes.io/component") != "preflight"]


def node_of(cluster: Cluster, name: str) -> client.V1Node:
    return client.CoreV1Api(cluster.api).read_node(name)


def plan_exit(doc_path: Path) -> int:
    done = subprocess.run([sys.executable, "-m", "specdeploy.cli", "plan", "-f", str(doc_path), "-o", "json"],
                          capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                                                               "PYTHONPATH": str(ROOT / "operator")})
    return done.returncode


def _single_cr(path: Path) -> dict[str, Any] | None:
    """The fixture's one SpeculativeDeployment, when kubectl would send it to the server at all."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError, ValueError):
        return None
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "SpeculativeDeployment":
        return None
    return docs[0] if isinstance(docs[0].get("metadata"), dict) and docs[0]["metadata"].get("name") else None


def test_the_crd_is_established_and_explained(cluster: Cluster) -> None:
    crd = cluster.run("get", "crd", "speculativedeployments.specdeploy.io", "-o", "json").stdout
    conditions = {c["type"]: c["status"] for c in json.loads(crd)["status"]["conditions"]}
    assert conditions["Established"] == "True"
    explained = cluster.run("explain", "speculativedeployment.spec.scheduling.gpuNodeAffinity").stdout
    assert "GPU Feature Discovery" in explained


def test_bad_crs_get_the_same_verdict_from_the_api_server_and_plan(cluster: Cluster) -> None:
    """Server-side apply (CRD schema, CEL and the webhook) refuses what `plan -f` refuses, and
    admits what it admits: the rules live in one place."""
    compared, disagree = 0, []
    for path in sorted(BAD_CRS.glob("*.yaml")):
        if _single_cr(path) is None:
            continue
        verdict = plan_exit(path)
        if verdict == 2:  # plan could not judge here (a config it cannot read offline): nor can the webhook
            continue
        server = cluster.run("apply", "--server-side", "--dry-run=server", "-n", WORKLOAD_NS, "-f", str(path), check=False)
        compared += 1
        if (server.returncode == 0) != (verdict == 0):
            disagree.append(f"{path.name}: plan exit {verdict}, server: {server.returncode} {server.stderr.strip()[:300]}")
    assert compared >= 20, compared
    assert disagree == []


def test_the_api_server_refuses_a_bad_pair_with_the_finding_and_admits_a_good_one(cluster: Cluster) -> None:
    bad = llama("bad-pair")
    bad["spec"]["parallelism"] = {"tensorParallelSize": 3}
    refused = cluster.apply(bad, check=False)
    assert refused.returncode != 0
    assert 'admission webhook "speculativedeployments.specdeploy.io" denied the request' in refused.stderr
    assert "tensorParallelSize" in refused.stderr and "32" in refused.stderr  # the finding: 3 does not divide 32 heads
    assert cluster.sd("bad-pair") is None
    admitted = cluster.apply(llama("good-pair", preflight={"mode": "Disabled"}))
    assert "serverside-applied" in admitted.stdout
    cluster.run("delete", "speculativedeployment", "good-pair", "-n", WORKLOAD_NS, "--wait=false")


def _ready(cluster: Cluster, name: str) -> bool:
    return cluster.condition(name, "Ready").get("status") == "True"


def test_a_good_cr_runs_on_the_planned_gpu_and_becomes_ready(cluster: Cluster) -> None:
    cluster.apply(llama("on-h100", replicas=2, preflight={"mode": "Disabled"}))
    until(lambda: _ready(cluster, "on-h100"), "on-h100 Ready=True")
    pods = owned_pods(cluster, "on-h100")
    assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
    replica_set = [r for r in (pods[0].metadata.owner_references or []) if r.controller][0]
    assert replica_set.kind == "ReplicaSet"
    for pod in pods:
        labels = node_of(cluster, pod.spec.node_name).metadata.labels
        assert labels["nvidia.com/gpu.product"] in PLANNED_PRODUCTS["H100-80GB"], (pod.spec.node_name, labels)
    sd = cluster.sd("on-h100")
    assert sd["status"]["readyReplicas"] == 2


def test_a_cr_whose_gpu_no_node_has_says_why_from_the_scheduler(cluster: Cluster) -> None:
    doc = llama("no-such-gpu", preflight={"mode": "Disabled"})
    doc["spec"]["resources"] = {"gpu": {"product": "B200-180GB"}}
    cluster.apply(doc)

    def unschedulable() -> dict[str, Any] | None:
        ready = cluster.condition("no-such-gpu", "Ready")
        return ready if ready.get("reason") == "Unschedulable" else None

    ready = until(unschedulable, "Ready=False reason Unschedulable", guard_s=60)
    assert ready["status"] == "False"
    assert "0/" in ready["message"] and "node affinity" in ready["message"], ready["message"]


def test_gpu_node_affinity_off_leaves_placement_to_the_user(cluster: Cluster) -> None:
    doc = llama("user-placed", preflight={"mode": "Disabled"})
    doc["spec"]["scheduling"] = {"gpuNodeAffinity": "Off", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}
    cluster.apply(doc)
    until(lambda: _ready(cluster, "user-placed"), "user-placed Ready=True")
    (pod,) = owned_pods(cluster, "user-placed")
    assert node_of(cluster, pod.spec.node_name).metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H200"


def test_deleting_the_cr_lets_the_garbage_collector_remove_every_child(cluster: Cluster) -> None:
    cluster.apply(llama("short-lived", preflight={"mode": "Disabled"}))
    until(lambda: _ready(cluster, "short-lived"), "short-lived Ready=True")
    uid = cluster.sd("short-lived")["metadata"]["uid"]

    def children() -> list[str]:
        found = []
        for kind in ("deployments", "replicasets", "pods", "services", "poddisruptionbudgets"):
            listed = json.loads(cluster.run("get", kind, "-n", WORKLOAD_NS, "-o", "json").stdout)["items"]
            found += [f"{kind}/{o['metadata']['name']}" for o in listed if _descends_from(o, uid, listed_all=cluster)]
        return found

    assert children(), "the CR made no children"
    cluster.run("delete", "speculativedeployment", "short-lived", "-n", WORKLOAD_NS, "--wait=true", "--timeout=120s")
    until(lambda: not children(), "the garbage collector to remove every child")


def _descends_from(obj: dict[str, Any], uid: str, listed_all: Cluster) -> bool:
    """obj's controller chain (by uid, as the garbage collector follows it) reaches `uid`."""
    seen = 0
    refs = obj["metadata"].get("ownerReferences") or []
    while refs and seen < 4:
        ref = refs[0]
        if ref["uid"] == uid:
            return True
        owner = listed_all.run("get", f"{ref['kind'].lower()}s", ref["name"], "-n", WORKLOAD_NS, "-o", "json", check=False)
        if owner.returncode != 0:
            return False
        refs = json.loads(owner.stdout)["metadata"].get("ownerReferences") or []
        seen += 1
    return False


@pytest.mark.needs_vllm_venv  # the vLLM venv stands for the image (make vllm-venv)
def test_the_job_controller_runs_the_preflight_and_its_pod_gives_the_verdict(cluster: Cluster) -> None:
    cluster.apply(llama("preflighted", image=VLLM_IMAGE, preflight={"mode": "Required"}))

    def passed() -> dict[str, Any] | None:
        condition = cluster.condition("preflighted", "Preflight")
        return condition if condition.get("status") in ("True", "False") else None

    verdict = until(passed, "the preflight verdict")
    assert verdict["status"] == "True" and verdict["reason"] == "Passed", verdict

    def completed() -> Any:
        """The verdict is read from the pod's termination; the Job controller records it after."""
        jobs = client.BatchV1Api(cluster.api).list_namespaced_job(WORKLOAD_NS).items
        (job,) = [j for j in jobs if j.metadata.name.startswith("preflighted-preflight")]
        return job if job.status.succeeded or job.status.failed else None

    job = until(completed, "the Job controller to record the preflight Job's end")
    assert job.status.succeeded == 1 and any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(WORKLOAD_NS, label_selector=f"job-name={job.metadata.name}").items
    (pod,) = pods
    assert pod.metadata.owner_references[0].uid == job.metadata.uid
    assert pod.spec.node_name == "cpu-0" and pod.metadata.name in cluster.agent.ran
    assert json.loads(pod.status.container_statuses[0].state.terminated.message)["ok"] is True
    until(lambda: _ready(cluster, "preflighted"), "preflighted Ready=True")


@pytest.mark.needs_vllm_venv
def test_an_edited_judge_gives_no_verdict_and_the_job_is_made_again(cluster: Cluster) -> None:
    """The judge's ConfigMap replaced under the pod before it starts: the pod's bootstrap refuses
    the edited bytes, no verdict is taken from it, and the operator makes the Job again."""
    batch, core = client.BatchV1Api(cluster.api), client.CoreV1Api(cluster.api)
    cluster.agent.hold.clear()
    try:
        cluster.apply(llama("edited-judge", image=VLLM_IMAGE, preflight={"mode": "Required"}))
        first = until(lambda: next((j for j in batch.list_namespaced_job(WORKLOAD_NS).items
                                    if j.metadata.name.startswith("edited-judge-preflight")), None), "the first Job")
        until(lambda: core.list_namespaced_pod(WORKLOAD_NS, label_selector=f"job-name={first.metadata.name}").items, "its pod")
        volume = next(v for v in first.spec.template.spec.volumes if v.config_map is not None)
        original = core.read_namespaced_config_map(volume.config_map.name, WORKLOAD_NS)
        core.delete_namespaced_config_map(original.metadata.name, WORKLOAD_NS)
        data = dict(original.data)
        data["vllm_judge.py"] += "\nprint('{\"ok\": true}')\n"
        core.create_namespaced_config_map(WORKLOAD_NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=original.metadata.name), data=data))
    finally:
        cluster.agent.hold.set()

    def judge_edited() -> Any:
        """The Warning Event, not the condition: the condition may already be the remade Job's
        Running by the time it is read."""
        events = core.list_namespaced_event(WORKLOAD_NS, field_selector="involvedObject.name=edited-judge").items
        return next((e for e in events if e.reason == "JudgeEdited"), None)

    edited = until(judge_edited, "the edited judge's Warning")
    assert edited.type == "Warning" and "not the one the operator wrote" in edited.message, edited.message
    until(lambda: cluster.condition("edited-judge", "Preflight").get("reason") == "Passed", "the remade Job's verdict")
    jobs = [j for j in batch.list_namespaced_job(WORKLOAD_NS).items if j.metadata.name.startswith("edited-judge-preflight")]
    assert [j.metadata.uid for j in jobs] != [first.metadata.uid]


def test_a_multi_node_plan_gets_its_pods_from_the_lws_controller(cluster: Cluster) -> None:
    """Pipeline parallel over two one-GPU nodes: a LeaderWorkerSet, whose pods the LWS
    controller makes (leader and worker), each on an H100 node."""
    doc = llama("two-nodes", preflight={"mode": "Disabled"}, parallelism={"tensorParallelSize": 1, "pipelineParallelSize": 2})
    doc["spec"]["resources"] = {"gpu": {"product": "H100-80GB", "perNode": 1}}
    cluster.apply(doc)
    until(lambda: _ready(cluster, "two-nodes"), "two-nodes Ready=True")
    lws = cluster.custom().list_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", WORKLOAD_NS, "leaderworkersets")["items"]
    (group,) = [w for w in lws if w["metadata"]["ownerReferences"][0]["name"] == "two-nodes"]
    assert group["spec"]["leaderWorkerTemplate"]["size"] == 2
    pods = [p for p in client.CoreV1Api(cluster.api).list_namespaced_pod(WORKLOAD_NS).items
            if (p.metadata.labels or {}).get("leaderworkerset.sigs.k8s.io/name") == group["metadata"]["name"]]
    assert sorted(p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] for p in pods) == ["0", "1"]
    assert all(p.status.phase == "Running" for p in pods)
    for pod in pods:
        assert node_of(cluster, pod.spec.node_name).metadata.labels["nvidia.com/gpu.product"] in PLANNED_PRODUCTS["H100-80GB"]
