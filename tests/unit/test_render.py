"""render/: the manifests the operator applies, checked field by field and against the real
Kubernetes schemas (kubernetes-validate, strict) for two minor versions."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import ModelLayout, Plan
from specdeploy.render import PLAN_HASH_ANNOTATION, plan_hash, render_manifests, speculative_config
from specdeploy.render.labels import LWS_WORKER_INDEX_LABEL, selector_string, service_name
from specdeploy.render.pod import STARTUP_FAILURE_THRESHOLD, STARTUP_PERIOD_S

K8S_VERSIONS = ["1.31.0", "1.35.0"]
RENDER_DIR = Path(__file__).resolve().parents[2] / "operator" / "specdeploy" / "render"

SPEC = {
    "target": {"model": "meta-llama/Llama-3.1-70B-Instruct", "revision": "main", "config": {"model_type": "llama"}},
    "draft": {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "numSpeculativeTokens": 3},
    "resources": {"gpu": {"product": "H100-80GB"}},
    "serving": {"maxModelLen": 8192, "gpuMemoryUtilization": 0.9, "kvCacheDtype": "fp8"},
    "replicas": 2,
    "hfTokenSecretRef": {"name": "hf", "key": "token"},
    "vllm": {"extraArgs": ["--enable-prefix-caching"], "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]},
    "scheduling": {
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "inference",
        "runtimeClassName": "nvidia",
    },
}

LAYOUT = ModelLayout(attention_heads_per_gpu=16, kv_heads_per_gpu=2, head_size=128, uses_mla=False, num_experts=0)


def make_plan(**overrides: Any) -> Plan:
    base = Plan(
        method="eagle3",
        num_speculative_tokens=3,
        tensor_parallel_size=4,
        draft_tensor_parallel_size=1,
        pipeline_parallel_size=1,
        nodes_per_replica=1,
        gpus_per_pod=4,
        max_model_len=8192,
        target=LAYOUT,
        draft=LAYOUT,
        gpu_resource_name="nvidia.com/gpu",
        memory=None,
        vllm_version="0.32.0",
    )
    return dataclasses.replace(base, **overrides)


MULTI = make_plan(tensor_parallel_size=8, pipeline_parallel_size=2, nodes_per_replica=2, gpus_per_pod=8)


def spec(**overrides: Any) -> SpeculativeDeploymentSpec:
    return SpeculativeDeploymentSpec.model_validate({**SPEC, **overrides})


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = [m["kind"] for m in manifests]
    assert len(set(kinds)) == len(kinds)
    return {m["kind"]: m for m in manifests}


def container(pod_template: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_template["spec"]["containers"]
    return only


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} appears {args.count(name)} times"
    return args[args.index(name) + 1]


def test_single_node_renders_deployment_service_pdb() -> None:
    objs = by_kind(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))
    assert set(objs) == {"Deployment", "Service", "PodDisruptionBudget"}
    dep = objs["Deployment"]
    assert dep["metadata"]["name"] == "llama" and dep["metadata"]["namespace"] == "ml"
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert "ownerReferences" not in dep["metadata"]  # the controller's job


def test_vllm_args_are_an_exec_list_with_one_json_speculative_config() -> None:
    plan = make_plan()
    dep = by_kind(render_manifests(spec(), plan, name="llama", namespace="ml"))["Deployment"]
    c = container(dep["spec"]["template"])
    args = c["args"]
    assert "command" not in c  # the image's entrypoint is `vllm serve`
    assert args[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert all(isinstance(a, str) and "\n" not in a for a in args)
    raw = flag(args, "--speculative-config")
    assert raw == '{"draft_tensor_parallel_size":1,"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-70B","num_speculative_tokens":3}'
    assert json.loads(raw) == speculative_config(spec(), plan)
    assert flag(args, "--tensor-parallel-size") == "4"
    assert flag(args, "--pipeline-parallel-size") == "1"
    assert flag(args, "--max-model-len") == "8192"
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert flag(args, "--kv-cache-dtype") == "fp8"
    assert flag(args, "--revision") == "main"
    assert flag(args, "--port") == "8000"
    assert flag(args, "--served-model-name") == "meta-llama/Llama-3.1-70B-Instruct"
    assert "--trust-remote-code" not in args
    assert args[-1] == "--enable-prefix-caching"
    for multi_node_flag in ("--nnodes", "--node-rank", "--headless", "--master-addr"):
        assert multi_node_flag not in args


def test_optional_flags_follow_the_spec() -> None:
    s = spec(
        target={"model": "moonshotai/Kimi-K3", "trustRemoteCode": True, "config": {}},
        serving={"kvCacheDtype": "auto"},
    )
    args = container(by_kind(render_manifests(s, make_plan(max_model_len=None), name="k", namespace="ml"))["Deployment"]["spec"]["template"])["args"]
    assert "--trust-remote-code" in args
    for absent in ("--kv-cache-dtype", "--revision", "--max-model-len"):
        assert absent not in args


def test_pod_resources_volumes_env_and_probes() -> None:
    dep = by_kind(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    c = container(dep["spec"]["template"])
    assert c["resources"] == {"requests": {"cpu": "10", "memory": "48Gi", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    assert pod["enableServiceLinks"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["model-cache"]["emptyDir"] == {"sizeLimit": "200Gi"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "model-cache": "/root/.cache/huggingface"}
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_HOME"]["value"] == "/root/.cache/huggingface"
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert env["VLLM_LOGGING_LEVEL"]["value"] == "DEBUG"
    assert "VLLM_HOST_IP" not in env
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600
    assert STARTUP_PERIOD_S * STARTUP_FAILURE_THRESHOLD >= 3600
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["priorityClassName"] == "inference" and pod["runtimeClassName"] == "nvidia"


def test_pvc_cache_and_amd_resource_name() -> None:
    s = spec(modelCache={"persistentVolumeClaim": "hf-cache"}, resources={"gpu": {"product": "MI300X"}})
    dep = by_kind(render_manifests(s, make_plan(gpu_resource_name="amd.com/gpu"), name="llama", namespace="ml"))["Deployment"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model-cache"] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}
    assert container(dep["spec"]["template"])["resources"]["limits"] == {"amd.com/gpu": "4"}


def test_no_secret_material_in_manifests() -> None:
    text = json.dumps(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))
    assert "secretKeyRef" in text
    assert "hf_" not in text.lower().replace("hf_home", "").replace("hf_token", "")


def test_labels_service_and_pdb() -> None:
    objs = by_kind(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))
    for obj in objs.values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "specdeploy"
        assert labels["app.kubernetes.io/instance"] == "llama"
        for key in ("name", "component", "part-of"):
            assert labels[f"app.kubernetes.io/{key}"]
        assert obj["metadata"]["annotations"][PLAN_HASH_ANNOTATION] == plan_hash(obj)
    svc = objs["Service"]
    assert svc["metadata"]["name"] != "vllm"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == objs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert objs["PodDisruptionBudget"]["spec"] == {"maxUnavailable": 1, "selector": objs["Deployment"]["spec"]["selector"]}
    assert selector_string("llama") == "app.kubernetes.io/instance=llama,app.kubernetes.io/name=vllm"


def test_a_resource_named_vllm_gets_no_service_named_vllm() -> None:
    assert service_name("vllm") != "vllm"
    svc = by_kind(render_manifests(spec(), make_plan(), name="vllm", namespace="ml"))["Service"]
    assert svc["metadata"]["name"] != "vllm"


def test_rollout_override() -> None:
    dep = by_kind(render_manifests(spec(rollout={"maxSurge": "25%", "maxUnavailable": 0}), make_plan(), name="l", namespace="ml"))["Deployment"]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": 0}


def test_rendering_is_deterministic_and_hashes_follow_content() -> None:
    first = render_manifests(spec(), make_plan(), name="llama", namespace="ml")
    assert first == render_manifests(spec(), make_plan(), name="llama", namespace="ml")
    changed = render_manifests(
        spec(), make_plan(num_speculative_tokens=5),
        name="llama", namespace="ml",
    )
    hashes = [[m["metadata"]["annotations"][PLAN_HASH_ANNOTATION] for m in r] for r in (first, changed)]
    assert hashes[0][0] != hashes[1][0]  # the Deployment changed
    assert hashes[0][1:] == hashes[1][1:]  # Service and PDB did not


def test_multi_node_renders_a_leader_worker_set() -> None:
    objs = by_kind(render_manifests(spec(), MULTI, name="k3", namespace="ml"))
    assert set(objs) == {"LeaderWorkerSet", "Service", "PodDisruptionBudget"}
    lws = objs["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and lws["spec"]["replicas"] == 2
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxSurge": 0, "maxUnavailable": 1}
    leader, worker = container(template["leaderTemplate"]), container(template["workerTemplate"])
    for c, rank in ((leader, "0"), (worker, "$(SPECDEPLOY_NODE_RANK)")):
        args = c["args"]
        assert args[0] == "meta-llama/Llama-3.1-70B-Instruct"
        assert flag(args, "--nnodes") == "2"
        assert flag(args, "--node-rank") == rank
        assert flag(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
        assert flag(args, "--distributed-executor-backend") == "mp"
        assert flag(args, "--tensor-parallel-size") == "8" and flag(args, "--pipeline-parallel-size") == "2"
        env = {e["name"]: e for e in c["env"]}
        assert env["VLLM_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "--headless" not in leader["args"] and "--headless" in worker["args"]
    rank_env = {e["name"]: e for e in worker["env"]}["SPECDEPLOY_NODE_RANK"]
    assert rank_env["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{LWS_WORKER_INDEX_LABEL}']"
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    assert objs["Service"]["spec"]["selector"][LWS_WORKER_INDEX_LABEL] == "0"


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("plan", [make_plan(), MULTI], ids=["single-node", "multi-node"])
def test_every_object_validates_strictly(version: str, plan: Plan) -> None:
    for obj in render_manifests(spec(), plan, name="llama", namespace="ml"):
        if obj["kind"] == "LeaderWorkerSet":  # unknown kind to kubernetes-validate: check its pods
            for role in ("leaderTemplate", "workerTemplate"):
                tmpl = obj["spec"]["leaderWorkerTemplate"][role]
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"llama-{role}", **tmpl["metadata"]}, "spec": tmpl["spec"]}
                kubernetes_validate.validate(pod, version, strict=True)
        else:
            kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_catches_a_broken_object() -> None:
    dep = render_manifests(spec(), make_plan(), name="llama", namespace="ml")[0]
    dep["spec"]["replicas"] = "2"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSIONS[0], strict=True)


def test_render_is_pure() -> None:
    forbidden = {"kubernetes", "kopf", "os", "time", "datetime", "random", "requests", "huggingface_hub"}
    for path in RENDER_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


def test_child_names_fit_kubernetes_limits_for_any_cr_name() -> None:
    import random

    from specdeploy.render.labels import child_names, is_dns1035_label, is_label_value, label_value

    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-."
    names = ["llama", "vllm", "a" * 63, "3llama", "my.model.v1", ("a" * 61 + ".") * 4 + "a"]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 253))).strip("-.") or "x" for _ in range(200)]
    seen: dict[str, str] = {}
    for name in names:
        for kind, child in child_names(name).items():
            assert is_dns1035_label(child), (name, kind, child)
        assert is_label_value(label_value(name))
        assert seen.setdefault(child_names(name)["Service"], name) == name  # distinct CRs never share a child
    assert child_names("llama") == {"Deployment": "llama", "LeaderWorkerSet": "llama", "Service": "llama-api", "PodDisruptionBudget": "llama"}


def test_invalid_names_reports_every_name_kubernetes_would_refuse() -> None:
    from specdeploy.render import invalid_names

    bad = {"kind": "Service", "metadata": {"name": "My.Service", "labels": {"app.kubernetes.io/instance": "x" * 64}}, "spec": {}}
    problems = invalid_names([bad])
    assert len(problems) == 2 and "DNS-1035" in problems[0] and "label" in problems[1]


def test_host_requests_follow_the_plan_unless_the_spec_sets_them() -> None:
    from specdeploy.api.parse import parse_spec
    from specdeploy.render.pod import host_requests

    spec, _ = parse_spec({"target": {"model": "m", "config": {}}, "draft": {"method": "ngram"},
                          "resources": {"cpu": "6", "memory": "100Gi"}})
    assert spec is not None

    class EightGpus:
        gpus_per_pod = 8

    assert host_requests(spec, EightGpus()) == {"cpu": "6", "memory": "100Gi"}  # type: ignore[arg-type]
    default, _ = parse_spec({"target": {"model": "m", "config": {}}, "draft": {"method": "ngram"}})
    assert host_requests(default, EightGpus()) == {"cpu": "18", "memory": "80Gi"}  # type: ignore[arg-type]
    bad, findings = parse_spec({"target": {"model": "m"}, "draft": {"method": "ngram"}, "resources": {"memory": "lots"}})
    assert bad is None and findings[0].field == "spec.resources.memory"


def test_plan_hash_is_the_digest_without_its_own_annotation_and_leaves_the_child_alone() -> None:
    """Children hash as before (a changed hash would patch, and roll, every running child on an
    operator upgrade), and hashing copies nothing a caller holds."""
    import copy
    import hashlib
    import json

    for child in render_manifests(spec(), make_plan(), name="llama", namespace="ml"):
        held = copy.deepcopy(child)
        expected = copy.deepcopy(child)
        expected["metadata"]["annotations"].pop(PLAN_HASH_ANNOTATION)
        if not expected["metadata"]["annotations"]:
            del expected["metadata"]["annotations"]
        digest = hashlib.sha256(json.dumps(expected, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        assert plan_hash(child) == digest == child["metadata"]["annotations"][PLAN_HASH_ANNOTATION]
        assert child == held
