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
from specdeploy.controller.reconcile import preflight_gate as gate
from specdeploy.controller.process.kube import KubePermanentError, KubeTemporaryError
from specdeploy.controller.reconcile.state import PreflightWaits
from specdeploy.geometry import ModelInputs
from specdeploy.pipeline import evaluate
from specdeploy.preflight.job import JOB_LABEL, MODEL_DIRS, file_digests, preflight_config_map, preflight_job
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


def job_for(spec: SpeculativeDeploymentSpec, judge: str = "JUDGE", *, cr_name: str = "sd") -> dict[str, Any]:
    request = request_for(spec)
    return preflight_job(spec, request, preflight_config_map(request, judge, cr_name=cr_name, namespace="ns"), cr_name=cr_name, namespace="ns")


SCHEDULING = {"nodeSelector": {"pool": "h200"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "priorityClassName": "inference", "runtimeClassName": "nvidia"}
LLAMA = example_spec("llama-3.1-8b-eagle3.yaml", image=IMAGE, scheduling=SCHEDULING,
                     preflight={"resources": {"cpu": "2", "memory": "3Gi"}, "deadlineSeconds": 600})


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("example", ["llama-3.1-8b-eagle3.yaml", "kimi-k3-dspark-h200.yaml"])
def test_job_and_config_map_are_valid_kubernetes_objects(example: str, version: str) -> None:
    spec = example_spec(example)
    request = request_for(spec)
    config_map = preflight_config_map(request, "print()", cr_name="sd", namespace="ns")
    kubernetes_validate.validate(preflight_job(spec, request, config_map, cr_name="sd", namespace="ns"), version, strict=True)
    kubernetes_validate.validate(config_map, version, strict=True)


def test_job_runs_the_image_restricted_without_a_gpu_where_the_serving_pods_go() -> None:
    job = job_for(LLAMA)
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
    job = preflight_job(LLAMA, request, config_map, cr_name="sd", namespace="ns")
    data = config_map["data"]
    judged = json.loads(data["request.json"])
    assert judged["args"] == list(request.args) and judged["args"][0] == LLAMA.target.model
    assert judged["models"] == {LLAMA.target.model: MODEL_DIRS["target"], LLAMA.draft.model: MODEL_DIRS["draft"]}
    assert json.loads(data["target.config.json"]) == LLAMA.target.config
    items = {i["key"]: i["path"] for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v for i in v["configMap"]["items"]}
    assert set(items) == set(data) and items["draft.config.json"] == "models/draft/config.json"


def test_trust_remote_code_fetches_code_with_the_serving_pods_token() -> None:
    spec = example_spec("kimi-k3-dspark-h200.yaml")
    env = job_for(spec, cr_name="k3")["spec"]["template"]["spec"]["containers"][0]["env"]
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


def test_the_judge_is_told_the_gpus_name_which_decides_vllms_batch_size() -> None:
    """vLLM keeps any A100 on its small batch tier by name (engine/arg_utils.py get_batch_defaults):
    the judge gets the product, and memoryGiB alone gives no name."""
    gpu = LLAMA.resources.gpu
    a100 = request_for(LLAMA.model_copy(update={"resources": LLAMA.resources.model_copy(
        update={"gpu": gpu.model_copy(update={"product": "A100-80GB", "memory_gi_b": None})})}))
    assert a100.gpu["deviceName"] == "A100-80GB" and a100.gpu["memoryBytes"] == 80 * 1024**3
    memory_only = request_for(LLAMA.model_copy(update={"resources": LLAMA.resources.model_copy(
        update={"gpu": gpu.model_copy(update={"product": None, "memory_gi_b": 80})})}))
    assert "deviceName" not in memory_only.gpu


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


JOB_UID = "job-uid-1"
JOB = {**job_for(LLAMA), "status": {}}
JOB["metadata"] = {**JOB["metadata"], "uid": JOB_UID}


def pod(state: dict[str, Any], conditions: list[dict[str, Any]] | None = None, *, name: str = "sd-preflight-x",
        owner_uid: str | None = JOB_UID, labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod as the Job controller makes it for JOB (owner, controller-uid labels, the template's
    spec), unless told otherwise; its judge container in `state`."""
    template = JOB["spec"]["template"]
    meta: dict[str, Any] = {"name": name, "labels": labels if labels is not None else {
        **template["metadata"]["labels"], "batch.kubernetes.io/controller-uid": JOB_UID, "controller-uid": JOB_UID}}
    if owner_uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": owner_uid, "controller": True}]
    return {"metadata": meta, "spec": copy.deepcopy(spec if spec is not None else template["spec"]),
            "status": {"containerStatuses": [{"name": "judge", "state": state}], "conditions": conditions or []}}


def job(status: dict[str, Any]) -> dict[str, Any]:
    return {**JOB, "status": status}


ACCEPTED = json.dumps({**VERDICT, "ok": True, "stage": None})


@pytest.mark.parametrize("pods, job_status, kind, final, words", [
    ([pod({"terminated": {"exitCode": 1, "message": json.dumps(VERDICT)}})], {}, "Refused", True, ""),
    ([pod({"terminated": {"exitCode": 0, "message": ACCEPTED}})], {}, "Passed", True, ""),
    ([pod({"terminated": {"exitCode": 2, "message": json.dumps({**VERDICT, "stage": None, "error": "no vllm module"})}})], {}, "CouldNotRun", True, "no vllm module"),
    ([pod({"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": ""}})], {}, "CouldNotRun", True, "spec.preflight.resources.memory"),
    ([pod({"terminated": {"exitCode": 139, "message": "ImportError: libcuda.so"}})], {}, "CouldNotRun", True, "libcuda"),
    ([pod({"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}})], {}, "CouldNotRun", False, "cannot be pulled"),
    ([pod({}, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}])], {}, "CouldNotRun", False, "0/4 nodes"),
    ([], {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}]}, "CouldNotRun", True, "DeadlineExceeded"),
    ([pod({"running": {}})], {}, "Running", False, ""),
    # The judge exits 0 or 1 only after writing its verdict: without one, the exit is not its word.
    ([pod({"terminated": {"exitCode": 1, "message": "Traceback ...\nSystemExit: 1"}})], {}, "UnreadableVerdict", True, "no verdict line"),
    ([pod({"terminated": {"exitCode": 1, "message": ACCEPTED}})], {}, "UnreadableVerdict", True, "contradicts"),
    ([pod({"terminated": {"exitCode": 3, "message": '{"ok": false, "stage": "integrity", "error": "not the files the operator wrote: vllm_judge.py"}'}})],
     {}, "JudgeEdited", True, "vllm_judge.py"),
])
def test_job_outcome(pods: list[dict[str, Any]], job_status: dict[str, Any], kind: str, final: bool, words: str) -> None:
    outcome = job_outcome(job(job_status), pods)
    assert (outcome.kind, outcome.final) == (kind, final) and words in outcome.why


def test_a_job_gone_without_a_verdict_could_not_run() -> None:
    assert job_outcome(None, [pod({"terminated": {"exitCode": 0, "message": ACCEPTED}})]).kind == "CouldNotRun"


FORGED = {"terminated": {"exitCode": 0, "message": ACCEPTED}}
OTHER_COMMAND = copy.deepcopy(JOB["spec"]["template"]["spec"])
OTHER_COMMAND["containers"][0]["command"] = ["sh", "-c", "echo '{\"ok\": true}' > /dev/termination-log"]
OTHER_ENV = copy.deepcopy(JOB["spec"]["template"]["spec"])
OTHER_ENV["containers"][0]["env"].append({"name": "PYTHONPATH", "value": "/tmp"})
OTHER_VOLUME = copy.deepcopy(JOB["spec"]["template"]["spec"])
OTHER_VOLUME["volumes"][0]["configMap"]["name"] = "someone-elses-judge"


@pytest.mark.parametrize("forged, words", [
    (pod(FORGED, name="foreign", owner_uid=None, labels={JOB_LABEL: JOB["metadata"]["name"]}), "ownerReference uid"),
    (pod(FORGED, name="other-owner", owner_uid="another-job-uid"), "ownerReference uid"),
    (pod(FORGED, name="no-uid-label", labels={JOB_LABEL: JOB["metadata"]["name"]}), "controller-uid label"),
    (pod(FORGED, name="wrong-uid-label", labels={"controller-uid": "another-job-uid"}), "controller-uid label"),
    (pod(FORGED, name="copied-owner", spec=OTHER_COMMAND), "command"),
    (pod(FORGED, name="copied-owner-env", spec=OTHER_ENV), "env"),
    (pod(FORGED, name="copied-owner-volume", spec=OTHER_VOLUME), "volumes"),
])
def test_a_pod_the_job_did_not_make_gives_no_verdict(forged: dict[str, Any], words: str) -> None:
    """Each alone, or beside the Job's own pod before it ends: named, never read."""
    alone = job_outcome(job({}), [forged])
    assert (alone.kind, alone.final) == ("UntrustedPod", False)
    assert forged["metadata"]["name"] in alone.why and words in alone.why
    beside = job_outcome(job({}), [forged, pod({"running": {}})])
    assert beside.kind == "UntrustedPod" and beside.verdict is None
    # The Job's own pod decides once it ends: the copy cannot hold its verdict back.
    refused = job_outcome(job({}), [forged, pod({"terminated": {"exitCode": 1, "message": json.dumps(VERDICT)}})])
    assert refused.kind == "Refused"


def test_two_pods_that_both_pass_for_the_jobs_own_give_no_verdict() -> None:
    """A perfect copy of the Job's pod: backoffLimit 0 makes one pod, so two are a forgery."""
    both = [pod(FORGED, name="a"), pod({"terminated": {"exitCode": 1, "message": json.dumps(VERDICT)}}, name="b")]
    outcome = job_outcome(job({}), both)
    assert (outcome.kind, outcome.final) == ("UntrustedPod", True) and "2 pods claim" in outcome.why


def test_a_job_that_completed_without_a_verdict_of_its_own_is_not_trusted() -> None:
    complete = {"conditions": [{"type": "Complete", "status": "True"}]}
    foreign = pod(FORGED, name="foreign", owner_uid=None, labels={JOB_LABEL: JOB["metadata"]["name"]})
    outcome = job_outcome(job(complete), [foreign])
    assert (outcome.kind, outcome.final) == ("UntrustedPod", True) and "foreign" in outcome.why


def test_only_the_judge_container_is_read() -> None:
    """A sidecar (injected, or added by a copy) that ends with a verdict says nothing."""
    own = pod({"running": {}})
    own["status"]["containerStatuses"].append({"name": "sidecar", "state": FORGED})
    assert job_outcome(job({}), [own]).kind == "Running"


DEEP = ['[' * 4000, '{"a":' * 2000, "{" * 4096, '{"ok": true, "memory": ' + '{"m": ' * 50 + "1" + "}" * 51,
        "[" * 100_000, json.dumps({**VERDICT, "ok": True, "error": "x" * 5000}), "\n".join(["{"] * 3000), "1" * 4096,
        '{"ok": true, "memory": {"x": 1e999999}}', '{"ok": true, "memory": {"x": NaN}}', "\udcff" * 1000]


@pytest.mark.parametrize("message", DEEP, ids=range(len(DEEP)))
@pytest.mark.parametrize("code", [0, 1])
def test_a_hostile_termination_message_is_an_unreadable_verdict_never_an_exception(message: str, code: int) -> None:
    outcome = job_outcome(job({}), [pod({"terminated": {"exitCode": code, "message": message}})])
    assert (outcome.kind, outcome.verdict) == ("UnreadableVerdict", None)
    assert outcome.why and len(outcome.why) < 600


@pytest.mark.parametrize("message", DEEP, ids=range(len(DEEP)))
def test_a_hostile_log_tail_of_a_crash_is_bounded(message: str) -> None:
    outcome = job_outcome(job({}), [pod({"terminated": {"exitCode": 2, "message": message}})])
    assert outcome.kind == "CouldNotRun" and len(outcome.why) < 600


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    verdict = parse_verdict(json.dumps({**VERDICT, "error": "[[[[[[[[[[{{{{{{{{{{ \\\" [[[[[[[[[["}))
    assert verdict is not None and verdict.error is not None and verdict.error.startswith("[[[[")


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


def test_required_waits_on_a_pull_that_may_recover_but_not_on_a_finished_job() -> None:
    request = request_for(LLAMA)
    assert gate.decide(PULL, request, mode="Required", job="j", fast_version=None).waits
    final = Outcome("CouldNotRun", why="DeadlineExceeded")
    assert not gate.decide(final, request, mode="Required", job="j", fast_version=None).waits


def test_the_images_release_replaces_the_tags_guess() -> None:
    status = {"preflight": {"image": IMAGE, "outcome": "Passed", "vllmVersion": "0.31.2.dev14+g1234.cpu"}}
    assert gate.judged_version(LLAMA, status) == "0.31.2"
    assert gate.judged_version(LLAMA.model_copy(update={"image": "other:tag"}), status) is None
    assert gate.judged_version(LLAMA.model_copy(update={"vllm_version": "0.30.0"}), status) is None  # the spec's word wins


def test_a_pass_overrules_the_guessed_refusal_and_says_so() -> None:
    passed = Outcome("Passed", parse_verdict(json.dumps({**VERDICT, "ok": True, "error": None, "stage": None})))
    decision = gate.decide(passed, request_for(LLAMA), mode="Required", job="j", fast_version=None, guess="parallel_drafting: not a field")
    assert decision.proceed and decision.validated is not None
    assert (decision.validated.status, decision.validated.reason) == ("True", "Valid")
    assert "guessed for the image refused: parallel_drafting" in decision.validated.message
    assert gate.decide(passed, request_for(LLAMA), mode="Required", job="j", fast_version=None).validated is None

def test_a_refusal_leaves_the_guess_and_its_verdict_standing() -> None:
    """Judged again under the refusing release's rules, the verdict would flip from the image's words to theirs."""
    status = {"preflight": {"image": IMAGE, "outcome": "Refused", "vllmVersion": "0.31.2"}}
    assert gate.judged_version(LLAMA, status) is None


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

    async def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
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


# ---------------------------------------------------------------- what the pod runs is the operator's


def test_the_config_map_is_immutable_and_named_by_its_content() -> None:
    request = request_for(LLAMA)
    one, other = (preflight_config_map(request, judge, cr_name="sd", namespace="ns") for judge in ("JUDGE", "JUDGE 2"))
    assert one["immutable"] is True
    assert one["metadata"]["name"] != other["metadata"]["name"]  # another judge: another ConfigMap, never an edit
    assert one["metadata"]["name"] == preflight_config_map(request, "JUDGE", cr_name="sd", namespace="ns")["metadata"]["name"]
    job = preflight_job(LLAMA, request, one, cr_name="sd", namespace="ns")
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == one["metadata"]["name"]
    # The bootstrap is told the sha256 of every mounted file, at the path it is mounted at.
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    digests = json.loads(command[4])
    paths = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert digests == {paths[key]: digest for key, digest in file_digests(one).items()}


def _run_container(tmp_path: Path, job: dict[str, Any], config_map: dict[str, Any], *, edit: dict[str, str] | None = None) -> tuple[int, str]:
    """The Job's container command under this Python, its mount laid out under tmp_path (the
    ConfigMap's items byte for byte, with `edit` replacing some): (exit code, termination log)."""
    import subprocess
    import sys

    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    data = {**config_map["data"], **(edit or {})}
    for item in volume["configMap"]["items"]:
        (tmp_path / "mnt" / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mnt" / item["path"]).write_bytes(data[item["key"]].encode())
    log = tmp_path / "termination-log"
    host = {mount: str(tmp_path / "mnt"), container["terminationMessagePath"]: str(log), f"{mount}/request.json": str(tmp_path / "mnt" / "request.json")}
    command = [sys.executable] + [host.get(arg, arg) for arg in container["command"][1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return done.returncode, log.read_text() if log.exists() else ""


def test_the_bootstrap_runs_the_operators_judge(tmp_path: Path) -> None:
    """Under a Python without vLLM the real judge runs, from the bytes checked, and says why it
    cannot judge (exit 2, its own verdict line)."""
    from specdeploy.preflight import JUDGE_FILE

    request = request_for(LLAMA)
    config_map = preflight_config_map(request, JUDGE_FILE.read_text(), cr_name="sd", namespace="ns")
    code, message = _run_container(tmp_path, preflight_job(LLAMA, request, config_map, cr_name="sd", namespace="ns"), config_map)
    verdict = parse_verdict(message)
    assert code == 2 and verdict is not None and (verdict.stage, verdict.vllm_version) == (None, "unknown")
    assert "No module named" in (verdict.error or "")  # the judge's own words: it ran, and found no vLLM stack


@pytest.mark.parametrize("key", ["vllm_judge.py", "request.json", "target.config.json"])
def test_an_edited_file_is_never_run(tmp_path: Path, key: str) -> None:
    request = request_for(LLAMA)
    marker = tmp_path / "the-edited-judge-ran"
    edited_judge = f"open({str(marker)!r}, 'w').write('ran'); print('{{\"ok\": true}}')"
    config_map = preflight_config_map(request, "raise SystemExit(0)", cr_name="sd", namespace="ns")
    job = preflight_job(LLAMA, request, config_map, cr_name="sd", namespace="ns")
    edit = {key: edited_judge if key == "vllm_judge.py" else config_map["data"][key] + " "}
    code, message = _run_container(tmp_path, job, config_map, edit=edit)
    outcome = job_outcome(job_with_uid(job), [pod({"terminated": {"exitCode": code, "message": message}}, spec=job["spec"]["template"]["spec"])])
    assert (code, outcome.kind) == (3, "JudgeEdited") and "not the files the operator wrote" in outcome.why
    assert not marker.exists()


def job_with_uid(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "metadata": {**job["metadata"], "uid": JOB_UID}, "status": {}}


@pytest.mark.parametrize("outcome, condition, progressing, waits", [
    (Outcome("UntrustedPod", why="ignored pods not made by the Job: x", final=False), ("Unknown", "UntrustedPod"), ("True", "PreflightRunning"), True),
    (Outcome("UntrustedPod", why="2 pods claim to be the one pod of Job j"), ("Unknown", "UntrustedPod"), ("True", "PreflightRunning"), True),
    (Outcome("JudgeEdited", why="not the files the operator wrote: vllm_judge.py"), ("Unknown", "JudgeEdited"), ("True", "PreflightRunning"), True),
    (Outcome("UntrustedJob", why="not ours", final=False), ("False", "UntrustedJob"), ("False", "PreflightHeld"), True),
    (Outcome("UnreadableVerdict", why="a line nests deeper than 8 levels"), ("False", "UnreadableVerdict"), ("False", "PreflightHeld"), False),
])
@pytest.mark.parametrize("mode", ["BestEffort", "Required"])
def test_no_verdict_from_what_the_operator_did_not_make_in_any_mode(outcome: Outcome, condition: tuple[str, str],
                                                                    progressing: tuple[str, str], waits: bool, mode: str) -> None:
    decision = gate.decide(outcome, request_for(LLAMA), mode=mode, job="j", fast_version="0.0.1")
    assert decision.proceed is False
    assert (decision.preflight.status, decision.preflight.reason) == condition and outcome.why in decision.preflight.message
    assert decision.progressing is not None and (decision.progressing.status, decision.progressing.reason) == progressing
    assert decision.waits is waits
    assert decision.status is not None and decision.status["outcome"] == outcome.kind


def test_a_claimed_verdict_leaves_no_version_in_status() -> None:
    """status.preflight.vllmVersion picks the rule set (judged_version): only the judge's own word."""
    forged = Outcome("UnreadableVerdict", parse_verdict(json.dumps({**VERDICT, "ok": True, "vllmVersion": "0.1.0"})), "contradicts")
    decision = gate.decide(forged, request_for(LLAMA), mode="BestEffort", job="j", fast_version=None)
    assert decision.status is not None and "vllmVersion" not in decision.status and "stage" not in decision.status
    assert gate.judged_version(LLAMA, {"preflight": decision.status}) is None


class LiveKube:
    """One live Job and its pods, as the API server would return them; what was deleted."""

    def __init__(self, job: dict[str, Any] | None, pods: list[dict[str, Any]]):
        self.job, self.pods, self.deleted, self.calls = job, pods, [], 0

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls += 1
        return self.job

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls += 1
        return self.pods

    async def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        self.deleted.append((kind, name, uid))


CR_UID = "cr-uid"


def live_job(*, owner_uid: str = CR_UID, command: list[str] | None = None) -> dict[str, Any]:
    from specdeploy.controller.reconcile.preflight_gate import judge_source

    request = request_for(LLAMA)
    config_map = preflight_config_map(request, judge_source(), cr_name="sd", namespace="ns")
    job = job_with_uid(preflight_job(LLAMA, request, config_map, cr_name="sd", namespace="ns"))
    job["metadata"]["ownerReferences"] = [{"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "sd",
                                           "uid": owner_uid, "controller": True}]
    if command is not None:
        job["spec"]["template"]["spec"]["containers"][0]["command"] = command
    return job


async def check(kube: LiveKube, status: dict[str, Any] | None = None) -> Any:
    return await gate.PreflightGate(kube, logging.getLogger("test")).check(  # type: ignore[arg-type]
        LLAMA, request_for(LLAMA), name="sd", namespace="ns", status=status or {}, owner={"uid": CR_UID}, fast_version=None)


def own_pod(job: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return pod(state, spec=job["spec"]["template"]["spec"])


async def test_a_job_this_cr_does_not_own_is_not_read() -> None:
    """A Job at the preflight's name made by someone else (or for an earlier CR of that name)."""
    job = live_job(owner_uid="another-cr")
    kube = LiveKube(job, [own_pod(job, FORGED)])
    decision = await check(kube)
    assert (decision.preflight.reason, decision.proceed) == ("UntrustedJob", False) and kube.deleted == []


async def test_a_job_that_runs_another_template_is_made_again() -> None:
    job = live_job(command=["python3", "/preflight/vllm_judge.py", "/preflight/request.json"])
    kube = LiveKube(job, [own_pod(job, FORGED)])
    decision = await check(kube)
    assert decision.preflight.reason == "Running" and not decision.proceed
    assert [(kind, uid) for kind, _, uid in kube.deleted] == [("Job", JOB_UID), ("ConfigMap", None)]


async def test_an_edited_judge_makes_the_job_again() -> None:
    job = live_job()
    tampered = {"terminated": {"exitCode": 3, "message": '{"ok": false, "stage": "integrity", "error": "not the files the operator wrote: vllm_judge.py"}'}}
    kube = LiveKube(job, [own_pod(job, tampered)])
    decision = await check(kube)
    assert decision.preflight.reason == "JudgeEdited" and decision.waits
    assert [kind for kind, _, _ in kube.deleted] == ["Job", "ConfigMap"]


async def test_an_unreadable_verdict_is_kept_and_holds_the_workload_without_reading_again() -> None:
    job = live_job()
    kube = LiveKube(job, [own_pod(job, {"terminated": {"exitCode": 0, "message": "[" * 4000}})])
    decision = await check(kube)
    assert (decision.preflight.reason, decision.waits) == ("UnreadableVerdict", False)
    assert [kind for kind, _, _ in kube.deleted] == ["ConfigMap"]  # the Job stays for its logs
    calls = kube.calls
    again = await check(kube, {"preflight": decision.status})
    assert (again.preflight.reason, again.proceed, kube.calls) == ("UnreadableVerdict", False, calls)


def test_a_watch_event_wakes_the_cr_waiting_on_the_job_once_per_change() -> None:
    waits, job = PreflightWaits(), ("Job", "sd-preflight-1")
    assert waits.woken("ns", "sd-preflight-1", job, "1", deleted=False) is None  # nobody waits on it
    waits.wait("ns", "sd-preflight-1", "sd")
    assert waits.woken("ns", "sd-preflight-1", job, "1", deleted=False) == "sd"
    assert waits.woken("ns", "sd-preflight-1", job, "1", deleted=False) is None  # kopf's re-list: nothing new
    assert waits.woken("ns", "sd-preflight-1", ("Pod", "sd-preflight-1-abc"), "1", deleted=False) == "sd"
    assert waits.woken("ns", "sd-preflight-1", job, "2", deleted=False) == "sd"
    assert waits.woken("ns", "sd-preflight-1", job, "2", deleted=True) == "sd"  # gone: always news
    assert waits.woken("other", "sd-preflight-1", job, "3", deleted=False) is None
    waits.wait("ns", "sd-preflight-2", "sd", "uid-2")  # another combination: the old Job wakes no one
    assert waits.woken("ns", "sd-preflight-1", job, "3", deleted=False) is None
    waits.done("ns", "sd", "uid-1")  # an earlier CR of that name deleted: not this one's wait
    assert waits.woken("ns", "sd-preflight-2", ("Job", "sd-preflight-2"), "1", deleted=False) == "sd"
    waits.done("ns", "sd", "uid-2")
    assert waits.woken("ns", "sd-preflight-2", ("Job", "sd-preflight-2"), "2", deleted=False) is None and len(waits) == 0


async def test_a_cr_waits_on_its_running_job_until_the_verdict() -> None:
    """Registered before the Job is read (a change after the read wakes it); dropped once the
    outcome is final, and for a verdict kept in status, which reads nothing."""
    job = live_job()
    name = job["metadata"]["name"]
    kube, waits = LiveKube(job, []), PreflightWaits()
    running = await gate.PreflightGate(kube, logging.getLogger("test"), waits).check(  # type: ignore[arg-type]
        LLAMA, request_for(LLAMA), name="sd", namespace="ns", status={}, owner={"uid": CR_UID}, fast_version=None)
    assert running.preflight.reason == "Running" and running.waits
    assert waits.woken("ns", name, ("Job", name), "1", deleted=False) == "sd"
    kube.pods = [own_pod(job, {"terminated": {"exitCode": 0, "message": "[" * 4000}})]
    final = await gate.PreflightGate(kube, logging.getLogger("test"), waits).check(  # type: ignore[arg-type]
        LLAMA, request_for(LLAMA), name="sd", namespace="ns", status={}, owner={"uid": CR_UID}, fast_version=None)
    assert final.preflight.reason == "UnreadableVerdict" and not final.waits and len(waits) == 0
    waits.wait("ns", name, "sd")
    await gate.PreflightGate(kube, logging.getLogger("test"), waits).check(  # type: ignore[arg-type]
        LLAMA, request_for(LLAMA), name="sd", namespace="ns", status={"preflight": final.status}, owner={"uid": CR_UID}, fast_version=None)
    assert len(waits) == 0


def test_every_outcome_can_be_kept_in_status() -> None:
    """status.preflight.outcome is an enum in the CRD: an outcome it lacks is a refused write."""
    from typing import get_args

    from specdeploy.api.status import PreflightStatus
    from specdeploy.preflight.outcome import Kind

    assert set(get_args(Kind)) == set(get_args(PreflightStatus.model_fields["outcome"].annotation))
