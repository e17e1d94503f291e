"""The preflight Job and the ConfigMap it reads. Pure: the spec, the request and the judge's
source in, two manifests out (owner references are the controller's to add, as for every child).

The pod runs `spec.image` with the judge as its command, placed by `spec.scheduling` (so it
lands in the GPU pool and pulls the image the serving pods will use), requests no GPU, and
runs under the restricted Pod Security Standard. Everything it reads comes from the
ConfigMap: the judge, REQUEST.json and each model's config.json at fixed paths, so it needs
no Hub access (only `trustRemoteCode` models fetch their code, with the serving pods' token).
Its verdict line is its termination message.

What the pod runs is the operator's, by content: the ConfigMap is immutable and named by the
digest of its data, and the container's command is a bootstrap (`BOOTSTRAP`, in the Job's own
spec) that checks each mounted file against the sha256 the operator wrote into the args before
it runs the judge from the very bytes it checked. An edited file gives no verdict: the bootstrap
exits EXIT_TAMPERED with a line saying which file (preflight/outcome.py reads it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.preflight.outcome import CONTAINER, EXIT_TAMPERED, INTEGRITY_STAGE
from specdeploy.preflight.request import DRAFT, TARGET, JudgeRequest
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, label_value, short_name
from specdeploy.render.pod import scheduling_fields

MOUNT = "/preflight"
REQUEST_PATH = f"{MOUNT}/request.json"
# Relative to the request file (the judge reads them from its directory): request.json names no
# mount path, so its bytes are the same wherever the volume is mounted.
MODEL_DIRS = {TARGET: f"models/{TARGET}", DRAFT: f"models/{DRAFT}"}
JUDGE_KEY = "vllm_judge.py"
SCRATCH = "/tmp"  # the only writable path: HOME, TMPDIR and the caches live here
TERMINATION_LOG = "/dev/termination-log"
# The pods' label naming their Job: the controller lists the run's pods by it.
JOB_LABEL = "specdeploy.io/preflight-job"
# Any non-root uid works: the judge reads the mounted files and writes only under /tmp.
RUN_AS_USER = 1000
TTL_AFTER_FINISHED_S = 3600  # the verdict is kept in status; the Job stays an hour for its logs
# Kubernetes refuses a ConfigMap over 1 MiB.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024
# `python3 -c BOOTSTRAP MOUNT DIGESTS REQUEST --verdict-file LOG`: checks every file of DIGESTS
# ({file: sha256}) under MOUNT, then runs the judge from the bytes it hashed (no second read to
# race with), as `python3 MOUNT/vllm_judge.py REQUEST --verdict-file LOG` would run it.
BOOTSTRAP = f"""\
import hashlib, json, os, sys, types
root, want = sys.argv[1], json.loads(sys.argv[2])
files = {{}}
for name in want:
    try:
        with open(os.path.join(root, name), "rb") as f:
            files[name] = f.read()
    except OSError:
        files[name] = None
bad = sorted(n for n in want if files[n] is None or hashlib.sha256(files[n]).hexdigest() != want[n])
if bad:
    line = json.dumps({{"ok": False, "stage": "{INTEGRITY_STAGE}", "error": "not the files the operator wrote: " + ", ".join(bad)}})
    print(line, flush=True)
    with open(sys.argv[-1], "w") as f:
        f.write(line)
    sys.exit({EXIT_TAMPERED})
judge = os.path.join(root, "{JUDGE_KEY}")
sys.argv = [judge] + sys.argv[3:]
if sys.path and sys.path[0] == "":
    sys.path[0] = root
main = types.ModuleType("__main__")
main.__file__ = judge
sys.modules["__main__"] = main
exec(compile(files["{JUDGE_KEY}"], judge, "exec"), main.__dict__)
"""


def preflight_name(cr_name: str, key: str) -> str:
    """The Job's name: one per (CR, combination)."""
    return short_name(cr_name, f"-preflight-{key[:8]}")


def file_digests(config_map: dict[str, Any]) -> dict[str, str]:
    """sha256 of each file the ConfigMap mounts, as the bootstrap hashes it (UTF-8 bytes)."""
    return {key: hashlib.sha256(text.encode()).hexdigest() for key, text in sorted(config_map["data"].items())}


def _content_name(cr_name: str, data: dict[str, str]) -> str:
    """Named by its content: another content is another ConfigMap, never an edit of this one."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return short_name(cr_name, f"-judge-{digest[:10]}")


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
    """The judge, REQUEST.json and the configs the operator read: immutable, named by content."""
    data = {JUDGE_KEY: judge_source, "request.json": json.dumps(request.to_json(MODEL_DIRS), indent=1)}
    for role, config in request.configs.items():
        data[_config_file_key(role)] = json.dumps(config, indent=1)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": _content_name(cr_name, data), "namespace": namespace, "labels": _labels(cr_name)},
        "immutable": True,
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


def _items(request: JudgeRequest) -> list[dict[str, str]]:
    """Each ConfigMap key and the path it is mounted at under MOUNT."""
    items = [{"key": JUDGE_KEY, "path": JUDGE_KEY}, {"key": "request.json", "path": "request.json"}]
    return items + [{"key": _config_file_key(role), "path": f"{MODEL_DIRS[role]}/config.json"} for role in request.configs]


def _volumes(request: JudgeRequest, config_map: str) -> list[dict[str, Any]]:
    return [
        {"name": "judge", "configMap": {"name": config_map, "items": _items(request), "defaultMode": 0o444}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}},
    ]


def _container(spec: SpeculativeDeploymentSpec, request: JudgeRequest, config_map: dict[str, Any]) -> dict[str, Any]:
    resources = spec.preflight.resources
    digests = file_digests(config_map)
    by_path = json.dumps({i["path"]: digests[i["key"]] for i in _items(request)}, sort_keys=True, separators=(",", ":"))
    return {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        # The image's entrypoint is `vllm serve`: the judge is run by the image's own Python,
        # through the bootstrap that checks it is the operator's.
        "command": ["python3", "-c", BOOTSTRAP, MOUNT, by_path, REQUEST_PATH, "--verdict-file", TERMINATION_LOG],
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


def _pod_spec(spec: SpeculativeDeploymentSpec, request: JudgeRequest, config_map: dict[str, Any]) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_container(spec, request, config_map)],
        "volumes": _volumes(request, config_map["metadata"]["name"]),
        **scheduling_fields(spec),
    }


def preflight_job(spec: SpeculativeDeploymentSpec, request: JudgeRequest, config_map: dict[str, Any], *, cr_name: str,
                  namespace: str) -> dict[str, Any]:
    """One try (backoffLimit 0) within spec.preflight.deadlineSeconds, removed an hour after it
    ends, running the judge of `config_map` (preflight_config_map) checked file by file."""
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
            "template": {"metadata": {"labels": {**labels, JOB_LABEL: name}}, "spec": _pod_spec(spec, request, config_map)},
        },
    }
