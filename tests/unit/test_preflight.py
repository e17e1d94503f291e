"""preflight/ and the gate's decisions: the Job and ConfigMap the operator creates (valid for
the real Kubernetes schemas, restricted, no GPU, spec.image), the request and its cache key,
the verdict line, what a Job and its pod say about the run, and the gate's reasons."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller import preflight as gate
from specdeploy.controller.kube import KubePermanentError, KubeTemporaryError
from specdeploy.geometry import ModelInputs
from specdeploy.pipeline import evaluate
from specdeploy.preflight.job import JOB_LABEL, MODEL_DIRS, preflight_config_map, preflight_job
from specdeploy.preflight.outcome import Outcome, job_outcome, parse_verdict
from specdeploy.preflight.request import judge_request

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSIONS = ["1.31.0", "1.35.0"]
IMAGE = "registry.example/team/vllm:fast-build"


def example_spec(name: str, **changes: Any) -> SpeculativeDeploymentSpec:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]
    return SpeculativeDeploymentSpec.model_validate({**doc["spec"], **changes})


def request_for(spec: SpeculativeDeploymentSpec) -> Any:
    target, draft = ModelInputs(spec.target.config), ModelInputs(spec.draft.config) if spec.draft.config else None
    evaluation = evaluate(spec, target, draft)
    assert evaluation.plan is not None, evaluation.findings
    return judge_request(spec, evaluation.plan, target.config, draft.config if draft else None)


SCHEDULING = {"nodeSelector": {"pool": "h200"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "priorityClassName": "inference", "runtimeClassName": "nvidia"}
LLAMA = example_spec("llama-3.1-8b-eagle3.yaml", image=IMAGE, scheduling=SCHEDULING,
                     preflight={"resources": {"cpu": "2", "memory": "3Gi"}, "deadlineSeconds": 600})


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("example", ["llama-3.1-8b-eagle3.yaml", "kimi-k3-dspark-h200.yaml"])
def test_job_and_config_map_are_valid_kubernetes_objects(example: str, version: str) -> None:
    spec = example_spec(example)
    request = request_for(spec)
    kubernetes_validate.validate(preflight_job(spec, request, cr_name="sd", namespace="ns"), version, strict=True)
    kubernetes_validate.validate(preflight_config_map(request, "print()", cr_name="sd", namespace="ns"), version, strict=True)


def test_job_runs_the_image_restricted_without_a_gpu_where_the_serving_pods_go() -> None:
    request = request_for(LLAMA)
    job = preflight_job(LLAMA, request, cr_name="sd", namespace="ns")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"memory": "3Gi"}}
    assert {k: pod[k] for k in SCHEDULING} == SCHEDULING  # lands in the GPU pool: pre-pulls the image
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 600)
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    # Restricted Pod Security Standard.
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and security["runAsUser"] > 0
    assert {v["name"]: set(v) - {"name"} for v in pod["volumes"]} == {"judge": {"configMap"}, "scratch": {"emptyDir"}}
    assert pod["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOME"] == "/tmp" and env["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in env  # no Hub: configs are mounted
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # The verdict comes back as the termination message.
    assert container["command"][-2:] == ["--verdict-file", container["terminationMessagePath"]]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # Its pods are found by their Job's name, and never match the serving pods' selector.
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels[JOB_LABEL] == job["metadata"]["name"] and labels["app.kubernetes.io/name"] != "vllm"


def test_config_map_holds_the_judge_the_request_and_the_configs_at_the_mounted_paths() -> None:
    request = request_for(LLAMA)
    config_map = preflight_config_map(request, "JUDGE", cr_name="sd", namespace="ns")
    job = preflight_job(LLAMA, request, cr_name="sd", namespace="ns")
    assert config_map["metadata"]["name"] == job["metadata"]["name"]
    data = config_map["data"]
    judged = json.loads(data["request.json"])
    assert judged["args"] == list(request.args) and judged["args"][0] == LLAMA.target.model
    assert judged["models"] == {LLAMA.target.model: MODEL_DIRS["target"], LLAMA.draft.model: MODEL_DIRS["draft"]}
    assert json.loads(data["target.config.json"]) == LLAMA.target.config
    items = {i["key"]: i["path"] for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v for i in v["configMap"]["items"]}
    assert set(items) == set(data) and items["draft.config.json"] == "models/draft/config.json"


def test_trust_remote_code_fetches_code_with_the_serving_pods_token() -> None:
    spec = example_spec("kimi-k3-dspark-h200.yaml")
    env = preflight_job(spec, request_for(spec), cr_name="k3", namespace="ns")["spec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["HF_HUB_OFFLINE"]["value"] == "0"
    assert by_name["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}


def test_the_key_names_image_args_configs_and_gpu() -> None:
    base = request_for(LLAMA)
    assert request_for(LLAMA).key == base.key  # a resync or a restart: the same combination
    other_image = request_for(LLAMA.model_copy(update={"image": "vllm/vllm-openai:nightly"}))
    config = copy.deepcopy(LLAMA.target.config) | {"rope_theta": 1.0}
    other_config = request_for(LLAMA.model_copy(update={"target": LLAMA.target.model_copy(update={"config": config})}))
    other_args = request_for(LLAMA.model_copy(update={"serving": LLAMA.serving.model_copy(update={"gpu_memory_utilization": 0.8})}))
    assert len({base.key, other_image.key, other_config.key, other_args.key}) == 4


def test_multi_node_plans_judge_the_leaders_args() -> None:
    spec = example_spec("kimi-k3-dspark-h200.yaml")
    request = request_for(spec)
    assert "--nnodes" in request.args and "--headless" not in request.args
    assert request.gpu is not None and request.gpu["count"] == 16


VERDICT = {"ok": False, "stage": "config", "error": "ValidationError: x Unexpected keyword argument", "vllmVersion": "9.9.9", "memory": None}


def test_parse_verdict_takes_the_last_verdict_line() -> None:
    assert parse_verdict("some log\n" + json.dumps(VERDICT) + "\n").stage == "config"
    assert parse_verdict("Traceback (most recent call last):\n  ...\nKilled") is None
    assert parse_verdict('{"ok": "yes"}') is None and parse_verdict(None) is None


def pod(state: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"name": "judge", "state": state}], "conditions": conditions or []}}


@pytest.mark.parametrize("pods, job_status, kind, final, words", [
    ([pod({"terminated": {"exitCode": 1, "message": json.dumps(VERDICT)}})], {}, "Refused", True, ""),
    ([pod({"terminated": {"exitCode": 0, "message": json.dumps({**VERDICT, "ok": True, "stage": None})}})], {}, "Passed", True, ""),
    ([pod({"terminated": {"exitCode": 2, "message": json.dumps({**VERDICT, "stage": None, "error": "no vllm module"})}})], {}, "CouldNotRun", True, "no vllm module"),
    ([pod({"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": ""}})], {}, "CouldNotRun", True, "spec.preflight.resources.memory"),
    ([pod({"terminated": {"exitCode": 1, "message": "ImportError: libcuda.so"}})], {}, "CouldNotRun", True, "libcuda"),
    ([pod({"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}})], {}, "CouldNotRun", False, "cannot be pulled"),
    ([pod({}, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}])], {}, "CouldNotRun", False, "0/4 nodes"),
    ([], {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}]}, "CouldNotRun", True, "DeadlineExceeded"),
    ([pod({"running": {}})], {}, "Running", False, ""),
])
def test_job_outcome(pods: list[dict[str, Any]], job_status: dict[str, Any], kind: str, final: bool, words: str) -> None:
    outcome = job_outcome({"status": job_status}, pods)
    assert (outcome.kind, outcome.final) == (kind, final) and words in outcome.why


def test_a_job_gone_without_a_verdict_could_not_run() -> None:
    assert job_outcome(None, []).kind == "CouldNotRun"


REFUSED = Outcome("Refused", parse_verdict(json.dumps(VERDICT)))
PULL = Outcome("CouldNotRun", why="the image cannot be pulled (ErrImagePull)", final=False)


@pytest.mark.parametrize("outcome, mode, proceed, condition, other", [
    (Outcome("Passed", parse_verdict(json.dumps({**VERDICT, "ok": True}))), "Required", True, ("True", "Passed"), None),
    (REFUSED, "BestEffort", False, ("False", "Refused"), ("Validated", "False", "PreflightRefused")),
    (Outcome("Running", final=False), "BestEffort", False, ("Unknown", "Running"), ("Progressing", "True", "PreflightRunning")),
    (PULL, "BestEffort", True, ("Unknown", "CouldNotRun"), None),
    (PULL, "Required", False, ("False", "CouldNotRun"), ("Progressing", "False", "PreflightHeld")),
])
def test_decide(outcome: Outcome, mode: str, proceed: bool, condition: tuple[str, str], other: tuple[str, str, str] | None) -> None:
    decision = gate.decide(outcome, request_for(LLAMA), mode=mode, job="j", fast_version="0.0.1")
    assert decision.proceed is proceed
    assert (decision.preflight.status, decision.preflight.reason) == condition
    if other is not None:
        verdict = decision.validated if other[0] == "Validated" else decision.progressing
        assert verdict is not None and (verdict.status, verdict.reason) == other[1:]


def test_a_refusal_names_vllms_words_and_the_disagreement() -> None:
    decision = gate.decide(REFUSED, request_for(LLAMA), mode="BestEffort", job="j", fast_version="0.0.1")
    assert decision.validated is not None and VERDICT["error"] in decision.validated.message and "9.9.9" in decision.validated.message
    assert [e[:2] for e in decision.events] == [("Warning", "PreflightDisagrees")]
    assert decision.findings[0]["code"] == "preflight-refused" and decision.findings[0]["stage"] == "pair"


def test_required_keeps_polling_a_pull_that_may_recover_but_not_a_finished_job() -> None:
    request = request_for(LLAMA)
    assert gate.decide(PULL, request, mode="Required", job="j", fast_version=None).retry
    final = Outcome("CouldNotRun", why="DeadlineExceeded")
    assert gate.decide(final, request, mode="Required", job="j", fast_version=None).retry is None


def test_the_images_release_replaces_the_tags_guess() -> None:
    status = {"preflight": {"image": IMAGE, "vllmVersion": "0.31.2.dev14+g1234.cpu"}}
    assert gate.judged_version(LLAMA, status) == "0.31.2"
    assert gate.judged_version(LLAMA.model_copy(update={"image": "other:tag"}), status) is None
    assert gate.judged_version(LLAMA.model_copy(update={"vllm_version": "0.30.0"}), status) is None  # the spec's word wins


class RefusingKube:
    """The API server refuses the Job (a quota, an admission policy); the ConfigMap goes through."""

    def __init__(self, error: Exception):
        self.error, self.created, self.deleted = error, [], []

    async def get(self, kind: str, namespace: str, name: str) -> None:
        return None

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Job":
            raise self.error
        self.created.append(obj["kind"])
        return obj

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.deleted.append(kind)


@pytest.mark.parametrize("error", [KubePermanentError("HTTP 422: violates PodSecurity", status=422),
                                   KubeTemporaryError("HTTP 403: exceeded quota", slow=True, status=403)])
@pytest.mark.parametrize("mode, proceed", [("BestEffort", True), ("Required", False)])
async def test_a_job_the_api_server_refuses_could_not_run(error: Exception, mode: str, proceed: bool) -> None:
    kube = RefusingKube(error)
    spec = LLAMA.model_copy(update={"preflight": LLAMA.preflight.model_copy(update={"mode": mode})})
    decision = await gate.PreflightGate(kube, logging.getLogger("test")).check(  # type: ignore[arg-type]
        spec, request_for(spec), name="sd", namespace="ns", status={}, owner={"uid": "u"}, fast_version=None)
    assert decision.proceed is proceed and decision.preflight.reason == "CouldNotRun"
    assert str(error.status) in decision.preflight.message  # type: ignore[attr-defined]
    assert kube.created == ["ConfigMap"] and kube.deleted == ["ConfigMap"]  # nothing left behind
