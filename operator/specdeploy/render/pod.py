"""The vLLM pod: container args, env, probes, volumes and scheduling.

Pure: the spec and the plan in, a PodTemplateSpec dict out. Multi-node pods differ only in
the launcher flags (`NodeRole`), so one builder serves the Deployment and both LWS templates.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.placement import Placement
from specdeploy.planning.plan import Plan
from specdeploy.render.labels import HTTP_PORT, LWS_WORKER_INDEX_LABEL, labels
from specdeploy.render.speculative_config import speculative_config_arg

HF_HOME = "/root/.cache/huggingface"
MASTER_PORT = 29500
NODE_RANK_ENV = "SPECDEPLOY_NODE_RANK"
# Startup budget for the first load of a multi-TB checkpoint (download + load + compile):
# 10 s x 720 = 2 h before the kubelet gives up. /health only answers once the engine is up.
STARTUP_PERIOD_S = 10
# For Prometheus' annotation-based pod discovery; vLLM serves /metrics on the API port.
SCRAPE_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": str(HTTP_PORT), "prometheus.io/path": "/metrics"}
STARTUP_FAILURE_THRESHOLD = 720


class NodeRole(enum.Enum):
    SINGLE = "single"  # one pod per replica (Deployment)
    LEADER = "leader"  # LWS rank 0: serves HTTP
    WORKER = "worker"  # LWS ranks > 0: --headless


def vllm_args(spec: SpeculativeDeploymentSpec, plan: Plan, role: NodeRole = NodeRole.SINGLE) -> list[str]:
    """The exec list after the image's `vllm serve` entrypoint: the model comes first."""
    target = spec.target
    args = [
        target.model,
        "--served-model-name", target.model,
        "--port", str(HTTP_PORT),
        "--tensor-parallel-size", str(plan.tensor_parallel_size),
        "--pipeline-parallel-size", str(plan.pipeline_parallel_size),
        "--gpu-memory-utilization", str(spec.serving.gpu_memory_utilization),
        "--speculative-config", speculative_config_arg(spec, plan),
    ]
    if plan.max_model_len is not None:
        args += ["--max-model-len", str(plan.max_model_len)]
    if spec.serving.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", spec.serving.kv_cache_dtype]
    if target.revision:
        args += ["--revision", target.revision]
    if target.trust_remote_code:
        args.append("--trust-remote-code")
    if role is not NodeRole.SINGLE:
        rank = "0" if role is NodeRole.LEADER else f"$({NODE_RANK_ENV})"
        args += [
            "--distributed-executor-backend", "mp",
            "--nnodes", str(plan.nodes_per_replica),
            "--node-rank", rank,
            "--master-addr", "$(LWS_LEADER_ADDRESS)",
            "--master-port", str(MASTER_PORT),
        ]
        if role is NodeRole.WORKER:
            args.append("--headless")
    return args + list(spec.vllm.extra_args)


def _env(spec: SpeculativeDeploymentSpec, role: NodeRole) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": HF_HOME}]
    if spec.hf_token_secret_ref is not None:
        ref = spec.hf_token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    if role is not NodeRole.SINGLE:
        # Each node's own reachable IP for vLLM's process group (vllm-facts §6).
        env.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if role is NodeRole.WORKER:
        env.append({
            "name": NODE_RANK_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_WORKER_INDEX_LABEL}']"}},
        })
    for var in spec.vllm.env:
        env.append(var.model_dump(by_alias=True, exclude_none=True))
    return env


def _probe(period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def host_requests(spec: SpeculativeDeploymentSpec, plan: Plan) -> dict[str, str]:
    """CPU and memory each vLLM pod requests, unless the spec sets them: 2 cores + 2 per GPU
    (vLLM runs the API server, the engine core and one worker process per GPU, each busy on a
    core) and 16Gi + 8Gi per GPU (Python and the tokenizer, pinned staging buffers, the page
    cache of the weights while they load). Requests only: no CPU limit (throttling a GPU
    server's host side costs throughput), no memory limit (an OOM kill mid-load wastes GPUs)."""
    gpus = plan.gpus_per_pod
    return {
        "cpu": spec.resources.cpu or str(2 + 2 * gpus),
        "memory": spec.resources.memory or f"{16 + 8 * gpus}Gi",
    }


def _container(spec: SpeculativeDeploymentSpec, plan: Plan, role: NodeRole) -> dict[str, Any]:
    gpus = {plan.gpu_resource_name: str(plan.gpus_per_pod)}
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "args": vllm_args(spec, plan, role),
        "env": _env(spec, role),
        "resources": {"requests": {**host_requests(spec, plan), **gpus}, "limits": dict(gpus)},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": HF_HOME},
        ],
    }
    if role is not NodeRole.WORKER:  # headless ranks run no HTTP server
        container["ports"] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
        container["startupProbe"] = _probe(STARTUP_PERIOD_S, STARTUP_FAILURE_THRESHOLD, 5)
        container["readinessProbe"] = _probe(10, 3, 5)
        container["livenessProbe"] = _probe(30, 5, 10)
    return container


def _volumes(spec: SpeculativeDeploymentSpec, role: NodeRole) -> list[dict[str, Any]]:
    # vLLM's LWS example sizes /dev/shm larger for multi-node NCCL traffic.
    shm = "2Gi" if role is NodeRole.SINGLE else "15Gi"
    cache = spec.model_cache
    if cache.persistent_volume_claim:
        cache_source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": cache.persistent_volume_claim}}
    else:
        cache_source = {"emptyDir": {"sizeLimit": cache.size_limit}}
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
        {"name": "model-cache", **cache_source},
    ]


def scheduling_fields(spec: SpeculativeDeploymentSpec) -> dict[str, Any]:
    """The pod-spec fields spec.scheduling sets (the serving pods and the preflight pod)."""
    scheduling = spec.scheduling
    fields: dict[str, Any] = {}
    if scheduling.node_selector:
        fields["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        fields["tolerations"] = [dict(t) for t in scheduling.tolerations]
    if scheduling.affinity:
        fields["affinity"] = dict(scheduling.affinity)
    if scheduling.priority_class_name:
        fields["priorityClassName"] = scheduling.priority_class_name
    if scheduling.runtime_class_name:
        fields["runtimeClassName"] = scheduling.runtime_class_name
    return fields


def placed_affinity(user: dict[str, Any] | None, placement: Placement | None) -> dict[str, Any] | None:
    """The user's affinity with the plan's node requirements added to every required
    nodeSelectorTerm (terms are ORed, a term's expressions ANDed: each way onto a node then
    also needs the planned GPU)."""
    if placement is None:
        return user
    ours = placement.requirements()
    affinity = copy.deepcopy(user) if user else {}
    required = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**term, "matchExpressions": [*(term.get("matchExpressions") or []), *ours]} for term in terms]
    return affinity


def pod_template(spec: SpeculativeDeploymentSpec, plan: Plan, name: str, role: NodeRole = NodeRole.SINGLE) -> dict[str, Any]:
    """A PodTemplateSpec for one vLLM node of one replica."""
    pod: dict[str, Any] = {
        # Service links would inject VLLM_PORT=tcp://... for a Service named vllm (vllm-facts §6).
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,
        "containers": [_container(spec, plan, role)],
        "volumes": _volumes(spec, role),
    }
    pod.update(scheduling_fields(spec))
    if spec.scheduling.gpu_node_affinity == "Required":
        if affinity := placed_affinity(spec.scheduling.affinity, plan.placement):
            pod["affinity"] = affinity
    metadata: dict[str, Any] = {"labels": labels(name)}
    if role is not NodeRole.WORKER:  # vLLM serves Prometheus metrics on its HTTP port
        metadata["annotations"] = dict(SCRAPE_ANNOTATIONS)
    return {"metadata": metadata, "spec": pod}
