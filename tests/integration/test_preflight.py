"""The preflight on the emulator, with the operator as shipped and a kubelet double that runs
the preflight Job's container with the Python standing for its image (tests/integration/kubelet.py).

The scenarios that need vLLM's verdict use the repository's vLLM venv (.venv-vllm, built by
`make test`) as the image `registry.example/team/vllm:fast-build`: a tag that names no release,
so the fast rules judge with their newest rule set and a warning, while the image's own vLLM
decides. They are skipped, saying so, when that venv is missing.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest
from prometheus_client import generate_latest

from specdeploy.controller.process.metrics import METRICS
from specdeploy.preflight.job import JOB_LABEL
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL

from .conftest import DEPLOYMENT, NS, ROOT, Cluster, Operator, eventually, example, with_identity
from .kubelet import JOBS, KubeletDouble

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
CUSTOM_IMAGE = "registry.example/team/vllm:fast-build"  # a team's own build of the CPU vLLM venv
MISSING_IMAGE = "registry.example/team/vllm:typo"  # no python stands for it: it cannot be pulled
LLAMA = example("llama-3.1-8b-eagle3.yaml")
needs_vllm = pytest.mark.needs_vllm_venv
# A speculative-config key the newest rule set knows and this vLLM's SpeculativeConfig does not.
NEWER_KEY = {"disable_lookahead_block_hashes": True}
JUDGE_TIMEOUT_S = 900.0  # a hang guard only: a judge on a loaded 2-core machine (import vLLM, build on meta) took 5 min


NO_VLLM_IMAGE = "registry.example/team/python:3"  # this Python: the real judge runs and finds no vLLM
HOSTILE_IMAGE = "registry.example/team/vllm:hostile"  # its python3 writes HOSTILE_MESSAGE and exits 0
HOSTILE_MESSAGE = "[" * 4000  # within the kubelet's 4096 bytes


def _hostile_python(path: Path) -> str:
    """An executable standing for a hostile image's python3: whatever it is asked to run, it
    writes HOSTILE_MESSAGE to its last argument (the termination log) and exits 0."""
    path.write_text(f"#!{sys.executable}\nimport sys\nopen(sys.argv[-1], 'w').write({HOSTILE_MESSAGE!r})\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
async def kubelet(emulator: Any, tmp_path: Path) -> Any:
    images = {CUSTOM_IMAGE: str(VLLM_PYTHON), NO_VLLM_IMAGE: sys.executable, HOSTILE_IMAGE: _hostile_python(tmp_path / "hostile-python3")}
    double = KubeletDouble(emulator, images, tmp_path / "node", NS)
    task = asyncio.create_task(double.run())
    yield double
    task.cancel()
    await double.close()


@pytest.fixture
async def operator(emulator: Any, kubelet: KubeletDouble, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The operator with the preflight on (the conftest's default is off: no kubelet there)."""
    monkeypatch.setenv("SPECDEPLOY_PREFLIGHT", "true")
    monkeypatch.setenv("SPECDEPLOY_BACKOFF_SCALE", "0.05")  # polls of a running Job
    op = Operator(emulator)
    await op.start()
    yield op
    await op.stop()


def cr(name: str, image: str, *, mode: str | None = None, speculative_config: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = name
    doc["spec"]["image"] = image
    if mode is not None:
        doc["spec"]["preflight"] = {"mode": mode}
    if speculative_config is not None:
        doc["spec"]["draft"]["speculativeConfig"] = speculative_config
    return with_identity(doc, f"uid-{name}")


def jobs(cluster: Cluster) -> list[dict[str, Any]]:
    resource = kmock.resource(JOBS)
    return [cluster.get(JOBS, name) for (r, _, name), obj in list(cluster.k.objects.items()) if r == resource and not obj.deleted]


def job_creates(cluster: Cluster) -> int:
    return sum(1 for r in cluster.writes(resource=JOBS) if str(r.method).upper().endswith("POST"))


def disagreements(stage: str) -> float:
    text = generate_latest(METRICS.registry).decode()
    line = next((ln for ln in text.splitlines() if ln.startswith(f'specdeploy_preflight_disagreements_total{{stage="{stage}"}}')), None)
    return float(line.split()[-1]) if line else 0.0


@needs_vllm
async def test_refused_by_the_images_vllm_creates_no_workload(operator: Operator, cluster: Cluster, kubelet: KubeletDouble,
                                                             operator_log: pytest.LogCaptureFixture) -> None:
    kubelet.hold.clear()  # the pod waits: the gate is seen while the Job runs
    before = disagreements("config")
    await cluster.create(cr("refused", CUSTOM_IMAGE, speculative_config=NEWER_KEY))
    await eventually(lambda: cluster.condition("refused", "Preflight").get("reason") == "Running", what="Preflight Running")
    assert cluster.condition("refused", "Progressing")["reason"] == "PreflightRunning"
    assert cluster.condition("refused", "Ready")["reason"] == "PreflightRunning"
    (job,) = jobs(cluster)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == CUSTOM_IMAGE
    assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-refused"
    kubelet.hold.set()
    await eventually(lambda: cluster.condition("refused", "Validated").get("reason") == "PreflightRefused", JUDGE_TIMEOUT_S, "PreflightRefused")

    validated = cluster.condition("refused", "Validated")
    preflight = cluster.sd("refused")["status"]["preflight"]
    assert validated["status"] == "False"
    # vLLM's own words, from the image's own release.
    assert "disable_lookahead_block_hashes" in validated["message"] and preflight["vllmVersion"] in validated["message"]
    assert (preflight["outcome"], preflight["stage"]) == ("Refused", "config")
    assert cluster.condition("refused", "Preflight")["reason"] == "Refused"
    assert not cluster.exists(DEPLOYMENT, "refused")
    assert any(f["code"] == "preflight-refused" for f in cluster.sd("refused")["status"]["findings"])
    await eventually(lambda: {"PreflightDisagrees", "PreflightRefused"} <= {e.get("reason") for e in cluster.events()},
                     what="Warning Events PreflightDisagrees and PreflightRefused")
    assert disagreements("config") == before + 1
    await eventually(lambda: not cluster.exists("v1/configmaps", job["metadata"]["name"]), what="the preflight ConfigMap removed")

    # A restart resyncs the CR: the image's refusal stands in its own words (the release it
    # named does not re-judge it by rules), with no second Job and no new Warning.
    warnings = len(cluster.events())
    await operator.stop()
    operator_log.clear()
    await operator.start()
    await eventually(lambda: any("Reconciled SpeculativeDeployment ns1/refused" in r.getMessage() for r in operator_log.records),
                     what="the resync's reconcile")
    assert cluster.condition("refused", "Validated")["reason"] == "PreflightRefused"
    assert job_creates(cluster) == 1 and len(cluster.events()) == warnings


@needs_vllm
async def test_accepted_pair_proceeds_and_is_judged_once(operator: Operator, cluster: Cluster, kubelet: KubeletDouble) -> None:
    await cluster.create(cr("accepted", CUSTOM_IMAGE))
    await eventually(lambda: cluster.condition("accepted", "Preflight").get("reason") == "Passed", JUDGE_TIMEOUT_S, "Preflight Passed")
    assert cluster.exists(DEPLOYMENT, "accepted")
    assert cluster.condition("accepted", "Validated")["status"] == "True"
    status = cluster.sd("accepted")["status"]
    real = status["preflight"]["vllmVersion"]
    assert status["preflight"]["outcome"] == "Passed" and real
    assert kubelet.started == [jobs(cluster)[0]["metadata"]["name"]]

    # A restart resyncs every CR: the verdict is kept in status, so no second Job.
    await operator.stop()
    mark = cluster.mark()
    await operator.start()
    # The image's real release now judges (the tag named none): its exact rule set, no guess.
    await eventually(lambda: cluster.sd("accepted")["status"]["plan"]["vllmVersion"] == real.split("+")[0], what="the real release judging")
    assert "vllm-version-unknown" not in [f["code"] for f in cluster.sd("accepted")["status"].get("findings", [])]
    assert job_creates(cluster) == 1 and len(kubelet.started) == 1
    assert cluster.writes(since=mark, resource=DEPLOYMENT) == []


async def test_unpullable_image_proceeds_under_best_effort(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("pull-best", MISSING_IMAGE))
    await eventually(lambda: cluster.condition("pull-best", "Preflight").get("reason") == "CouldNotRun", what="CouldNotRun")
    assert cluster.exists(DEPLOYMENT, "pull-best")
    preflight = cluster.condition("pull-best", "Preflight")
    assert (preflight["status"], preflight["reason"]) == ("Unknown", "CouldNotRun")
    assert "ErrImagePull" in preflight["message"] and "BestEffort" in preflight["message"]
    assert cluster.condition("pull-best", "Validated")["status"] == "True"
    await eventually(lambda: "CouldNotRun" in [e.get("reason") for e in cluster.events()], what="a CouldNotRun Warning")


async def test_unpullable_image_is_held_under_required(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("pull-required", MISSING_IMAGE, mode="Required"))
    await eventually(lambda: cluster.condition("pull-required", "Progressing").get("reason") == "PreflightHeld", what="PreflightHeld")
    preflight = cluster.condition("pull-required", "Preflight")
    assert (preflight["status"], preflight["reason"]) == ("False", "CouldNotRun")
    assert cluster.condition("pull-required", "Ready")["status"] == "False"
    assert cluster.condition("pull-required", "Stalled")["status"] == "True"
    assert not cluster.exists(DEPLOYMENT, "pull-required")


async def test_disabled_runs_no_job(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("no-preflight", MISSING_IMAGE, mode="Disabled"))
    await eventually(lambda: cluster.condition("no-preflight", "Preflight").get("reason") == "Disabled", what="Preflight Disabled")
    assert cluster.exists(DEPLOYMENT, "no-preflight")
    assert jobs(cluster) == []



async def test_a_held_update_leaves_the_serving_workload_as_it_is(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("serving", CUSTOM_IMAGE, mode="Disabled"))
    await eventually(lambda: cluster.condition("serving", "Preflight").get("reason") == "Disabled", what="Preflight Disabled")
    before = cluster.get(DEPLOYMENT, "serving")
    await cluster.patch_spec("serving", {"image": MISSING_IMAGE, "preflight": {"mode": "Required"}}, generation=2)
    await eventually(lambda: cluster.condition("serving", "Progressing").get("reason") == "PreflightHeld", what="PreflightHeld")
    after = cluster.get(DEPLOYMENT, "serving")
    assert after["spec"] == before["spec"]  # still the image the fast rules and the old spec chose
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == CUSTOM_IMAGE


def handled(cluster: Cluster, name: str) -> bool:
    """kopf recorded the spec as handled and keeps no retry for it: its reconcile finished."""
    annotations = cluster.sd(name)["metadata"].get("annotations") or {}
    return "specdeploy.io/last-handled-configuration" in annotations and "specdeploy.io/reconcile" not in annotations


def reads_of_job(cluster: Cluster, since: int, job: str) -> int:
    """The operator's reads of `job` (GET) and of its pods (LIST) since `since`."""
    return sum(1 for r in list(cluster.k)[since:] if str(r.method).upper().endswith("GET")
               and (r.url.path.endswith(f"/jobs/{job}") or (r.url.path.endswith("/pods") and job in str(r.url.query))))


async def test_a_cr_waiting_on_its_job_is_not_polled_and_its_pods_end_wakes_it(operator: Operator, cluster: Cluster,
                                                                              kubelet: KubeletDouble) -> None:
    """The reconcile that finds the Job running finishes (no retry for kopf to poll with); the
    watch event of the Job's pod, once it ends, reconciles the CR and brings the verdict."""
    kubelet.hold.clear()
    await cluster.create(cr("waiting", NO_VLLM_IMAGE, mode="Required"))
    await eventually(lambda: cluster.condition("waiting", "Preflight").get("reason") == "Running" and handled(cluster, "waiting"),
                     what="Preflight Running, the reconcile finished")
    (job,) = jobs(cluster)
    mark = cluster.mark()
    kubelet.hold.set()  # the judge runs (and finds no vLLM in this Python): the pod ends
    await eventually(lambda: cluster.condition("waiting", "Preflight").get("reason") == "CouldNotRun", what="the verdict")
    assert "No module named" in cluster.condition("waiting", "Preflight")["message"]
    assert cluster.condition("waiting", "Progressing")["reason"] == "PreflightHeld" and handled(cluster, "waiting")
    # Read again because it changed: the pod's end and the Job's (one reconcile each at most).
    assert 1 <= reads_of_job(cluster, mark, job["metadata"]["name"]) <= 4


async def _pod(cluster: Cluster, name: str, labels: dict[str, str], message: str) -> None:
    """A pod the scheduler could not place."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}
    response = await cluster.k.post(f"/api/v1/namespaces/{NS}/pods", json=body)
    assert response.status in (200, 201), await response.text()
    await cluster.patch_status("v1/pods", name, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]})


async def test_an_unplaceable_preflight_pod_is_not_said_of_the_serving_pods(operator: Operator, cluster: Cluster) -> None:
    """The pod watch serves two handlers: the scheduler's word on serving pods (Unschedulable),
    and the preflight pods' end. A preflight pod no node takes is its Job's business (its
    outcome says so), not the serving workload's."""
    await cluster.create(cr("placed", MISSING_IMAGE, mode="Disabled"))
    await eventually(lambda: cluster.exists(DEPLOYMENT, "placed"), what="the workload")
    ours = {MANAGED_BY_LABEL: MANAGED_BY, OWNER_LABEL: "placed"}
    await _pod(cluster, "placed-a-preflight", {**ours, JOB_LABEL: "placed-preflight-0"}, "preflight: 0/7 nodes are available")
    await _pod(cluster, "placed-b-serving", ours, "serving: 0/7 nodes are available")
    progressing = await eventually(lambda: cluster.condition("placed", "Progressing").get("reason") == "Unschedulable"
                                   and cluster.condition("placed", "Progressing"), what="Progressing Unschedulable")
    assert "placed-b-serving" in progressing["message"] and "preflight" not in progressing["message"]


# A method no built-in table knows: the image (no release tag) is judged by the newest rule set,
# whose vLLM lets plugins register methods, so only the image's own vLLM can judge it.
PLUGIN_METHOD = "team_tree_drafter"


def plugin_cr(name: str, image: str, *, mode: str | None = None) -> dict[str, Any]:
    doc = cr(name, image, mode=mode)
    doc["spec"]["draft"]["method"] = PLUGIN_METHOD
    return doc


def _codes(cluster: Cluster, name: str) -> list[str]:
    return [f["code"] for f in cluster.sd(name)["status"].get("findings", [])]


async def test_a_plugin_method_waits_for_the_preflight_even_under_best_effort(operator: Operator, cluster: Cluster) -> None:
    """BestEffort proceeds on the fast rules when the Job cannot run; for a method only the image
    can judge there are no fast rules to proceed on: held as under Required."""
    await cluster.create(plugin_cr("plugin-best", MISSING_IMAGE))
    await eventually(lambda: cluster.condition("plugin-best", "Progressing").get("reason") == "PreflightHeld", what="PreflightHeld")
    assert cluster.condition("plugin-best", "Preflight")["reason"] == "CouldNotRun"
    assert cluster.condition("plugin-best", "Stalled")["status"] == "True"
    assert "method-needs-preflight" in _codes(cluster, "plugin-best")
    assert not cluster.exists(DEPLOYMENT, "plugin-best")


async def test_a_plugin_method_with_the_preflight_disabled_gets_no_workload(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(plugin_cr("plugin-off", MISSING_IMAGE, mode="Disabled"))
    await eventually(lambda: cluster.condition("plugin-off", "Progressing").get("reason") == "PreflightNeeded", what="PreflightNeeded")
    preflight = cluster.condition("plugin-off", "Preflight")
    assert (preflight["status"], preflight["reason"]) == ("False", "PreflightNeeded")
    assert PLUGIN_METHOD in preflight["message"] and "spec.preflight.mode is Disabled" in preflight["message"]
    assert cluster.condition("plugin-off", "Ready")["status"] == "False"
    assert not cluster.exists(DEPLOYMENT, "plugin-off") and jobs(cluster) == []


async def test_an_operator_without_preflight_runs_no_workload_for_a_plugin_method(emulator: Any, cluster: Cluster) -> None:
    """SPECDEPLOY_PREFLIGHT=false (chart preflight.enabled=false, the emulator's default here)."""
    op = Operator(emulator)
    await op.start()
    try:
        await cluster.create(plugin_cr("plugin-no-jobs", CUSTOM_IMAGE))
        await eventually(lambda: cluster.condition("plugin-no-jobs", "Preflight").get("reason") == "PreflightNeeded", what="PreflightNeeded")
        assert "SPECDEPLOY_PREFLIGHT=false" in cluster.condition("plugin-no-jobs", "Preflight")["message"]
        assert cluster.condition("plugin-no-jobs", "Progressing")["reason"] == "PreflightNeeded"
        assert not cluster.exists(DEPLOYMENT, "plugin-no-jobs") and jobs(cluster) == []
    finally:
        await op.stop()


async def test_an_edit_to_a_plugin_method_leaves_the_serving_workload_as_it_is(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("serving-eagle", MISSING_IMAGE, mode="Disabled"))
    await eventually(lambda: cluster.exists(DEPLOYMENT, "serving-eagle"), what="the workload")
    before = cluster.get(DEPLOYMENT, "serving-eagle")
    await cluster.patch_spec("serving-eagle", {"draft": {"method": PLUGIN_METHOD}}, generation=2)
    await eventually(lambda: cluster.condition("serving-eagle", "Progressing").get("reason") == "PreflightNeeded", what="PreflightNeeded")
    assert cluster.get(DEPLOYMENT, "serving-eagle")["spec"] == before["spec"]


@needs_vllm
async def test_the_images_vllm_judges_a_method_the_fast_rules_cannot(operator: Operator, cluster: Cluster, kubelet: KubeletDouble) -> None:
    """The image (this venv's vLLM) registers no such method: its own refusal decides."""
    await cluster.create(plugin_cr("plugin-judged", CUSTOM_IMAGE))
    await eventually(lambda: cluster.condition("plugin-judged", "Validated").get("reason") == "PreflightRefused", JUDGE_TIMEOUT_S, "PreflightRefused")
    assert "method" in cluster.condition("plugin-judged", "Validated")["message"]  # vLLM's own words on the method
    assert cluster.sd("plugin-judged")["status"]["preflight"]["stage"] == "config"
    assert not cluster.exists(DEPLOYMENT, "plugin-judged")


# ---------------------------------------------------------------- forgeries: no verdict but the Job's own


@pytest.fixture
def operator_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record the operator logs (it runs in this process): the tests count tracebacks."""
    caplog.set_level(logging.INFO)
    return caplog


def tracebacks(log: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in log.records if r.exc_info]


async def _job(cluster: Cluster, kubelet: KubeletDouble) -> dict[str, Any]:
    """The one preflight Job, once its pod exists (held before its container starts)."""
    (job,) = await eventually(lambda: kubelet.started and jobs(cluster), what="the preflight Job and its pod")
    return job


async def _forge(cluster: Cluster, job: dict[str, Any], name: str, *, owner_uid: str | None, labels: dict[str, str],
                 spec: dict[str, Any]) -> None:
    """A pod someone else made, which ends with {"ok": true} in a container named judge."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels}
    if owner_uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": owner_uid,
                                    "controller": True}]
    response = await cluster.k.post(f"/api/v1/namespaces/{NS}/pods", json={"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    assert response.status in (200, 201), await response.text()
    terminated = {"exitCode": 0, "reason": "Completed", "message": '{"ok": true, "stage": null, "error": null, "vllmVersion": "9.9.9"}'}
    await cluster.patch_status("v1/pods", name, {"phase": "Succeeded", "containerStatuses": [
        {"name": "judge", "ready": False, "restartCount": 0, "image": spec["containers"][0]["image"], "state": {"terminated": terminated}}]})


def _no_verdict(cluster: Cluster, name: str, reason: str, log: pytest.LogCaptureFixture) -> dict[str, Any]:
    """What every forgery ends with: the reason named, nothing passed, no workload, no traceback."""
    preflight = cluster.condition(name, "Preflight")
    assert preflight["reason"] == reason and preflight["status"] != "True"
    assert not cluster.exists(DEPLOYMENT, name) and cluster.writes(resource=DEPLOYMENT) == []
    assert (cluster.sd(name)["status"].get("preflight") or {}).get("outcome") != "Passed"
    assert cluster.condition(name, "Ready")["status"] != "True"
    assert tracebacks(log) == []
    return preflight


async def test_a_foreign_pod_with_the_jobs_label_gives_no_verdict(operator: Operator, cluster: Cluster, kubelet: KubeletDouble,
                                                                   operator_log: pytest.LogCaptureFixture) -> None:
    kubelet.hold.clear()  # the Job's own pod has not ended: the foreign one is all there is
    await cluster.create(cr("foreign", NO_VLLM_IMAGE, mode="Required"))
    job = await _job(cluster, kubelet)
    template = job["spec"]["template"]
    # The template's labels copied (the Job's own among them): its watch event wakes the CR,
    # which reads the Job's pods itself.
    await _forge(cluster, job, "foreign-judge", owner_uid=None, labels=template["metadata"]["labels"], spec=template["spec"])
    await eventually(lambda: cluster.condition("foreign", "Preflight").get("reason") == "UntrustedPod", what="Preflight UntrustedPod")
    preflight = _no_verdict(cluster, "foreign", "UntrustedPod", operator_log)
    assert "foreign-judge" in preflight["message"] and "ownerReference" in preflight["message"]
    assert cluster.condition("foreign", "Progressing")["reason"] == "PreflightRunning"
    await eventually(lambda: "UntrustedPod" in [e.get("reason") for e in cluster.events() if e.get("type") == "Warning"],
                     what="an UntrustedPod Warning")


async def test_a_pod_with_the_jobs_owner_uid_that_is_not_its_pod_gives_no_verdict(
    operator: Operator, cluster: Cluster, kubelet: KubeletDouble, operator_log: pytest.LogCaptureFixture
) -> None:
    """The owner uid and the controller-uid labels copied: what it runs is not the Job's."""
    kubelet.hold.clear()
    await cluster.create(cr("copied", NO_VLLM_IMAGE, mode="Required"))
    job = await _job(cluster, kubelet)
    uid = job["metadata"]["uid"]
    spec = copy.deepcopy(job["spec"]["template"]["spec"])
    spec["containers"][0]["command"] = ["sh", "-c", "echo '{\"ok\": true}' > /dev/termination-log"]
    labels = {**job["spec"]["template"]["metadata"]["labels"], "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
    await _forge(cluster, job, "copied-judge", owner_uid=uid, labels=labels, spec=spec)
    await eventually(lambda: cluster.condition("copied", "Preflight").get("reason") == "UntrustedPod", what="Preflight UntrustedPod")
    preflight = _no_verdict(cluster, "copied", "UntrustedPod", operator_log)
    assert "copied-judge" in preflight["message"] and "command" in preflight["message"]


async def test_an_edited_judge_gives_no_verdict_and_the_job_is_made_again(
    operator: Operator, cluster: Cluster, kubelet: KubeletDouble, operator_log: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The ConfigMap's judge replaced (the emulator does not refuse an edit of an immutable
    ConfigMap; the API server would) before the pod starts: the edit never runs, the Job is
    made again, and the new Job runs the operator's judge (which finds no vLLM here)."""
    kubelet.hold.clear()
    await cluster.create(cr("edited", NO_VLLM_IMAGE, mode="Required"))
    job = await _job(cluster, kubelet)
    marker = tmp_path / "the-edited-judge-ran"
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    edited = f"open({str(marker)!r}, 'w').write('ran')\nimport sys\nopen(sys.argv[-1], 'w').write('{{\"ok\": true}}')\n"
    response = await cluster.k.patch(f"/api/v1/namespaces/{NS}/configmaps/{volume['configMap']['name']}", json={"data": {"vllm_judge.py": edited}})
    assert response.status == 200, await response.text()
    kubelet.hold.set()
    await eventually(lambda: "JudgeEdited" in [e.get("reason") for e in cluster.events() if e.get("type") == "Warning"],
                     what="a JudgeEdited Warning")
    await eventually(lambda: cluster.condition("edited", "Preflight").get("reason") == "CouldNotRun", what="the new Job's verdict")
    assert not marker.exists()  # the edited judge never ran
    assert job_creates(cluster) == 2 and len(kubelet.started) == 2
    (warning,) = [e for e in cluster.events() if e.get("reason") == "JudgeEdited"]
    assert "vllm_judge.py" in warning["message"] and "made again" in warning["message"]
    preflight = _no_verdict(cluster, "edited", "CouldNotRun", operator_log)
    assert "No module named" in preflight["message"]  # the operator's judge, run by the new Job
    assert cluster.condition("edited", "Progressing")["reason"] == "PreflightHeld"


async def test_a_hostile_termination_message_is_an_unreadable_verdict(
    operator: Operator, cluster: Cluster, kubelet: KubeletDouble, operator_log: pytest.LogCaptureFixture
) -> None:
    """4,000 '[' from an image whose python3 exits 0: no exception, a named reason, held even
    under BestEffort (the default mode), and judged once."""
    await cluster.create(cr("hostile", HOSTILE_IMAGE))
    await eventually(lambda: cluster.condition("hostile", "Preflight").get("reason") == "UnreadableVerdict", what="UnreadableVerdict")
    preflight = _no_verdict(cluster, "hostile", "UnreadableVerdict", operator_log)
    assert preflight["status"] == "False" and "no verdict line" in preflight["message"]
    assert cluster.condition("hostile", "Progressing")["reason"] == "PreflightHeld"
    assert cluster.sd("hostile")["status"]["preflight"]["outcome"] == "UnreadableVerdict"
    # Another reconcile (a spec edit that changes no judged input) reads the kept outcome: no second Job.
    await cluster.patch_spec("hostile", {"replicas": 2}, generation=2)
    await eventually(lambda: cluster.condition("hostile", "Preflight").get("observedGeneration") == 2, what="the next reconcile")
    _no_verdict(cluster, "hostile", "UnreadableVerdict", operator_log)
    assert job_creates(cluster) == 1


# ---------------------------------------------------------------- an image of unknown release: its own vLLM decides
# The rules guessing for CUSTOM_IMAGE (the newest) refuse these options; the venv's vLLM 0.32.0 takes
# the first and refuses the second (use_heterogeneous_vocab is for draft_model only there).
PARALLEL_DRAFTING = {"parallel_drafting": True}
HETEROGENEOUS_VOCAB = {"use_heterogeneous_vocab": True}


def _spec_config(cluster: Cluster, name: str) -> dict[str, Any]:
    args = cluster.get(DEPLOYMENT, name)["spec"]["template"]["spec"]["containers"][0]["args"]
    return json.loads(args[args.index("--speculative-config") + 1])


def _severities(cluster: Cluster, name: str) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in cluster.sd(name)["status"].get("findings", [])}


@needs_vllm
async def test_a_guessed_refusal_waits_for_the_images_verdict_which_replaces_it(operator: Operator, cluster: Cluster,
                                                                                kubelet: KubeletDouble) -> None:
    kubelet.hold.clear()
    await cluster.create(cr("guess-passed", CUSTOM_IMAGE, mode="Required", speculative_config=PARALLEL_DRAFTING))
    await eventually(lambda: cluster.condition("guess-passed", "Preflight").get("reason") == "Running", what="Preflight Running")
    validated = cluster.condition("guess-passed", "Validated")
    assert (validated["status"], validated["reason"]) == ("Unknown", "GuessedRefusal")
    assert "parallel_drafting" in validated["message"] and "preflight of the image decides" in validated["message"]
    assert _severities(cluster, "guess-passed")["speculative-config-method"] == "warning"  # the guess, as a guess
    assert cluster.condition("guess-passed", "Planned")["status"] == "True"
    assert cluster.condition("guess-passed", "Progressing")["reason"] == "PreflightRunning"
    assert cluster.condition("guess-passed", "Ready")["status"] == "Unknown"  # a GitOps tool waits, it does not fail
    assert cluster.condition("guess-passed", "Reconciling")["status"] == "True"
    assert not cluster.exists(DEPLOYMENT, "guess-passed")
    kubelet.hold.set()
    await eventually(lambda: cluster.condition("guess-passed", "Preflight").get("reason") == "Passed", JUDGE_TIMEOUT_S, "Preflight Passed")
    assert cluster.exists(DEPLOYMENT, "guess-passed")
    assert _spec_config(cluster, "guess-passed")["parallel_drafting"] is True  # what the image judged is what runs
    # The image named its release (0.32.0): its rules judge the CR from its next reconcile on (at
    # the latest the resync of a restart), no guess; they plan the same args, so the kept verdict
    # stands: no second Job, the Deployment written once.
    await operator.stop()
    await operator.start()
    await eventually(lambda: cluster.sd("guess-passed")["status"]["plan"]["vllmVersion"] == "0.32.0", what="the real release judging")
    validated = cluster.condition("guess-passed", "Validated")
    assert (validated["status"], validated["reason"]) == ("True", "Valid") and "0.32.0" in validated["message"]
    assert "warning" not in _severities(cluster, "guess-passed").values()  # the guess's refusal is gone
    assert job_creates(cluster) == 1 and len(cluster.writes(resource=DEPLOYMENT)) == 1


@needs_vllm
async def test_a_guessed_refusal_the_image_shares_is_its_refusal_with_no_disagreement(operator: Operator, cluster: Cluster) -> None:
    before = disagreements("config")
    await cluster.create(cr("guess-refused", CUSTOM_IMAGE, speculative_config=HETEROGENEOUS_VOCAB))
    await eventually(lambda: cluster.condition("guess-refused", "Validated").get("reason") == "PreflightRefused", JUDGE_TIMEOUT_S,
                     "PreflightRefused")
    assert "only works with method='draft_model'" in cluster.condition("guess-refused", "Validated")["message"]  # vLLM 0.32.0's words
    severities = _severities(cluster, "guess-refused")
    assert severities["preflight-refused"] == "error" and "speculative-config-unknown-key" not in severities
    assert not cluster.exists(DEPLOYMENT, "guess-refused")
    assert disagreements("config") == before
    assert "PreflightDisagrees" not in [e.get("reason") for e in cluster.events()]


async def test_a_guessed_refusal_is_held_under_best_effort_when_the_image_cannot_answer(operator: Operator, cluster: Cluster) -> None:
    """BestEffort proceeds on the fast rules when the Job cannot run; here they refused: held."""
    await cluster.create(cr("guess-held", MISSING_IMAGE, speculative_config=PARALLEL_DRAFTING))
    await eventually(lambda: cluster.condition("guess-held", "Progressing").get("reason") == "PreflightHeld", what="PreflightHeld")
    assert cluster.condition("guess-held", "Preflight")["reason"] == "CouldNotRun"
    assert "guessed" in cluster.condition("guess-held", "Progressing")["message"]
    assert cluster.condition("guess-held", "Validated")["reason"] == "GuessedRefusal"
    assert cluster.condition("guess-held", "Stalled")["status"] == "True"
    assert not cluster.exists(DEPLOYMENT, "guess-held")


async def test_with_no_preflight_the_guessed_refusal_is_the_verdict(operator: Operator, cluster: Cluster) -> None:
    await cluster.create(cr("guess-alone", CUSTOM_IMAGE, mode="Disabled", speculative_config=PARALLEL_DRAFTING))
    await eventually(lambda: cluster.condition("guess-alone", "Validated").get("reason") == "ValidationFailed", what="ValidationFailed")
    assert _severities(cluster, "guess-alone")["speculative-config-method"] == "error"
    assert not cluster.exists(DEPLOYMENT, "guess-alone") and jobs(cluster) == []
