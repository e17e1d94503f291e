"""The preflight Job and the ConfigMap it reads. Pure: the spec, the request and the judge's
source in, two manifests out (owner references are the controller's to add, as for every child).

The pod runs `spec.image` with the judge as its command, placed by `spec.scheduling` (so it
lands in the GPU pool and pulls the image the serving pods will use), requests no GPU, and
runs under the restricted Pod Security Standard. Everything it reads comes from the
ConfigMap: the judge, REQUEST.json and each model's config.json at fixed paths, so it needs
no Hub access (only `trustRemoteCode` models fetch their code, with the serving pods' token).
Its verdict line is its termination message.
"""

from __future__ import annotations

import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.preflight.request import DRAFT, TARGET, JudgeRequest
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, label_value, short_name
from specdeploy.render.pod import scheduling_fields

MOUNT = "/preflight"
JUDGE_PATH = f"{MOUNT}/vllm_judge.py"
REQUEST_PATH = f"{MOUNT}/request.json"
MODEL_DIRS = {TARGET: f"{MOUNT}/models/{TARGET}", DRAFT: f"{MOUNT}/models/{DRAFT}"}
SCRATCH = "/tmp"  # the only writable path: HOME, TMPDIR and the caches live here
TERMINATION_LOG = "/dev/termination-log"
CONTAINER = "judge"
# The pods' label naming their Job: the controller lists the run's pods by it.
JOB_LABEL = "specdeploy.io/preflight-job"
# Any non-root uid works: the judge reads the mounted files and writes only under /tmp.
RUN_AS_USER = 1000
TTL_AFTER_FINISHED_S = 3600  # the verdict is kept in status; the Job stays an hour for its logs
# Kubernetes refuses a ConfigMap over 1 MiB.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024


def preflight_name(cr_name: str, key: str) -> str:
    """The Job's and the ConfigMap's name: one per (CR, combination)."""
    return short_name(cr_name, f"-preflight-{key[:8]}")


def _labels(cr_name: str) -> dict[str, str]:
    # Not the serving pods' selector labels: the Service and the PodDisruptionBudget must not
    # select the preflight pod.
    return {
        "app.kubernetes.io/name": "specdeploy-preflight",
        "app.kubernetes.io/instance": label_value(cr_name),
        "app.kubernetes.io/component": "preflight",
        "app.kubernetes.io/part-of": "specdeploy",
        MANAGED_BY_LABEL: MANAGED_BY,
        OWNER_LABEL: label_value(cr_name),
    }


def _config_file_key(role: str) -> str:
    return f"{role}.config.json"


def preflight_config_map(request: JudgeRequest, judge_source: str, *, cr_name: str, namespace: str) -> dict[str, Any]:
    """The judge, REQUEST.json and the configs the operator read."""
    data = {"vllm_judge.py": judge_source, "request.json": json.dumps(request.to_json(MODEL_DIRS), indent=1)}
    for role, config in request.configs.items():
        data[_config_file_key(role)] = json.dumps(config, indent=1)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": preflight_name(cr_name, request.key), "namespace": namespace, "labels": _labels(cr_name)},
        "data": data,
    }


def config_map_bytes(config_map: dict[str, Any]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in config_map["data"].items())


def _env(spec: SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    remote_code = spec.target.trust_remote_code or spec.draft.trust_remote_code
    ours: list[dict[str, Any]] = [
        {"name": "HOME", "value": SCRATCH},
        {"name": "TMPDIR", "value": SCRATCH},
        {"name": "HF_HOME", "value": f"{SCRATCH}/huggingface"},
        # Only remote code is fetched; the configs are mounted.
        {"name": "HF_HUB_OFFLINE", "value": "0" if remote_code else "1"},
        # No GPU is requested; on nodes whose default runtime is nvidia's, the image's own
        # NVIDIA_VISIBLE_DEVICES=all would still expose the serving pods' GPUs.
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]
    if remote_code and spec.hf_token_secret_ref is not None:
        ref = spec.hf_token_secret_ref
        ours.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    names = {e["name"] for e in ours}
    # The serving pod's own environment (it can change vLLM's choices), except what the judge needs.
    theirs = [v.model_dump(by_alias=True, exclude_none=True) for v in spec.vllm.env if v.name not in names]
    return theirs + ours


def _volumes(request: JudgeRequest, config_map: str) -> list[dict[str, Any]]:
    items = [{"key": "vllm_judge.py", "path": "vllm_judge.py"}, {"key": "request.json", "path": "request.json"}]
    items += [{"key": _config_file_key(role), "path": f"models/{role}/config.json"} for role in request.configs]
    return [
        {"name": "judge", "configMap": {"name": config_map, "items": items, "defaultMode": 0o444}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}},
    ]


def _container(spec: SpeculativeDeploymentSpec) -> dict[str, Any]:
    resources = spec.preflight.resources
    return {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        # The image's entrypoint is `vllm serve`: the judge is run by the image's own Python.
        "command": ["python3", JUDGE_PATH, REQUEST_PATH, "--verdict-file", TERMINATION_LOG],
        "env": _env(spec),
        "resources": {"requests": {"cpu": resources.cpu, "memory": resources.memory}, "limits": {"memory": resources.memory}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
        },
        "terminationMessagePath": TERMINATION_LOG,
        # A judge that dies before writing its verdict leaves its log's tail there instead.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "judge", "mountPath": MOUNT, "readOnly": True}, {"name": "scratch", "mountPath": SCRATCH}],
    }


def _pod_spec(spec: SpeculativeDeploymentSpec, request: JudgeRequest, name: str) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_container(spec)],
        "volumes": _volumes(request, name),
        **scheduling_fields(spec),
    }


def preflight_job(spec: SpeculativeDeploymentSpec, request: JudgeRequest, *, cr_name: str, namespace: str) -> dict[str, Any]:
    """One try (backoffLimit 0) within spec.preflight.deadlineSeconds, removed an hour after it ends."""
    name = preflight_name(cr_name, request.key)
    labels = _labels(cr_name)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.preflight.deadline_seconds,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {"metadata": {"labels": {**labels, JOB_LABEL: name}}, "spec": _pod_spec(spec, request, name)},
        },
    }
