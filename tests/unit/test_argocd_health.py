"""The Argo CD health check shipped with the chart, run by a real Lua runtime (lupa).

Argo CD evaluates `resource.customizations.health.<group>_<Kind>` scripts with the live object
bound to the global `obj` and reads the returned table's `status` and `message`. These tests do
the same against sample SpeculativeDeployment statuses in the shape api/status.py defines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

lupa = pytest.importorskip("lupa", reason="lupa (a dev dependency) runs the Lua health check")

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "charts" / "specdeploy" / "files" / "argocd-health.lua"
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def run_health(obj: dict) -> dict:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    # Argo CD runs the script as a chunk and takes its top-level `return`; so does execute().
    result = lua.execute(SCRIPT.read_text())
    out = dict(result.items())
    assert out["status"] in ARGO_STATUSES
    assert isinstance(out.get("message", ""), str)
    return out


def cond(type_: str, status: str, reason: str = "Reason", message: str = "", gen: int | None = 3) -> dict:
    c = {"type": type_, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
    if gen is not None:
        c["observedGeneration"] = gen
    return c


def sdep(generation: int = 3, status: dict | None = None) -> dict:
    obj = {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "k3", "namespace": "ml", "generation": generation},
        "spec": {"target": {"model": "moonshotai/Kimi-K3"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


ALL_GOOD = [
    cond("Validated", "True", "Valid"),
    cond("Planned", "True", "Planned"),
    cond("Progressing", "False", "RolloutComplete"),
    cond("Available", "True", "MinimumReplicasAvailable"),
    cond("Ready", "True", "Ready", "2/2 replicas ready at http://k3.ml.svc:8000"),
]


def test_ready_and_current_generation_is_healthy():
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": ALL_GOOD}))
    assert out == {"status": "Healthy", "message": "2/2 replicas ready at http://k3.ml.svc:8000"}


@pytest.mark.parametrize("status", [None, {}, {"conditions": []}])
def test_no_status_yet_is_progressing(status):
    assert run_health(sdep(1, status))["status"] == "Progressing"


def test_unobserved_generation_is_progressing_even_when_ready():
    # The user edited the spec (generation 4); the Ready=True describes generation 3.
    out = run_health(sdep(4, {"observedGeneration": 3, "conditions": ALL_GOOD}))
    assert out["status"] == "Progressing"
    assert "generation 4" in out["message"]


def test_missing_observed_generation_is_progressing():
    out = run_health(sdep(2, {"conditions": ALL_GOOD}))
    assert out["status"] == "Progressing"


def test_stale_ready_condition_is_progressing():
    conditions = [c if c["type"] != "Ready" else cond("Ready", "True", gen=2) for c in ALL_GOOD]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out["status"] == "Progressing"


def test_rolling_out_is_progressing():
    conditions = [
        cond("Validated", "True", "Valid"),
        cond("Planned", "True", "Planned"),
        cond("Progressing", "True", "RollingOut", "1/2 replicas updated"),
        cond("Available", "False", "WaitingForReplicas"),
        cond("Ready", "False", "RollingOut", "waiting for the Deployment"),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Progressing", "message": "1/2 replicas updated"}


def test_ready_unknown_is_progressing():
    conditions = [cond("Validated", "True"), cond("Ready", "Unknown", "Reconciling")]
    assert run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))["status"] == "Progressing"


def test_ready_missing_is_progressing():
    conditions = [cond("Validated", "True")]
    assert run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))["status"] == "Progressing"


def test_invalid_spec_is_degraded_even_while_the_old_workload_serves():
    # A bad edit keeps the last good children running (Available=True) but must show up.
    message = "draft num_attention_heads=96 does not divide tensorParallelSize=64"
    conditions = [
        cond("Validated", "False", "InvalidSpec", message),
        cond("Planned", "Unknown", "NotValidated"),
        cond("Progressing", "False", "InvalidSpec"),
        cond("Available", "True", "MinimumReplicasAvailable"),
        cond("Ready", "False", "InvalidSpec", message),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out["status"] == "Degraded"
    assert out["message"] == f"Validated=False: {message}"


def test_impossible_plan_is_degraded():
    conditions = [
        cond("Validated", "True", "Valid"),
        cond("Planned", "False", "DoesNotFit", "weights need 700 GiB per replica, 8xA100-40GB hold 320"),
        cond("Ready", "False", "DoesNotFit"),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out["status"] == "Degraded"
    assert "700 GiB" in out["message"]


def test_ready_false_without_progress_is_degraded():
    conditions = [
        cond("Validated", "True", "Valid"),
        cond("Planned", "True", "Planned"),
        cond("Progressing", "False", "ProgressDeadlineExceeded"),
        cond("Available", "False", "MinimumReplicasUnavailable"),
        cond("Ready", "False", "ProgressDeadlineExceeded", "pods crash-loop"),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Degraded", "message": "Ready=False: pods crash-loop"}


def test_message_falls_back_to_reason():
    conditions = [cond("Ready", "False", "ProgressDeadlineExceeded", "")]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Degraded", "message": "Ready=False: ProgressDeadlineExceeded"}


def test_docs_give_the_argocd_cm_key_and_the_shipped_script():
    """docs/install.md names the exact argocd-cm key and embeds this very script."""
    doc = (REPO_ROOT / "docs" / "install.md").read_text()
    assert "resource.customizations.health.specdeploy.io_SpeculativeDeployment" in doc
    body = [line for line in SCRIPT.read_text().splitlines() if line.strip() and not line.startswith("--")]
    assert all(line in doc for line in body), "docs/install.md embeds a stale copy of argocd-health.lua"


def test_scaled_to_zero_is_suspended():
    conditions = [cond("Validated", "True"), cond("Planned", "True"),
                  cond("Progressing", "False", "RolloutComplete"), cond("Available", "False", "ScaledToZero"),
                  cond("Ready", "False", "ScaledToZero", "replicas is 0")]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Suspended", "message": "replicas is 0"}


# --- statuses built by the controller's own condition code ---------------------------------


def _controller_status(verdicts: dict, workload, generation: int = 5) -> dict:
    conditions_mod = pytest.importorskip(
        "specdeploy.controller.conditions", reason="controller/conditions.py does not exist yet")
    verdicts = dict(verdicts)
    if workload is not None or "Progressing" not in verdicts:
        verdicts.update(conditions_mod.workload_verdicts(workload, applied=True))
    verdicts["Ready"] = conditions_mod.ready_verdict(verdicts, workload)
    conditions = conditions_mod.merge_conditions([], verdicts, now="2026-01-01T00:00:00Z", generation=generation)
    return {"observedGeneration": generation, "conditions": conditions}


def _workload(desired: int, ready: int, updated: int):
    conditions_mod = pytest.importorskip(
        "specdeploy.controller.conditions", reason="controller/conditions.py does not exist yet")
    return conditions_mod.WorkloadState(kind="Deployment", name="k3", desired=desired, replicas=desired,
                                        ready=ready, updated=updated, current=True)


def _ok():
    conditions_mod = pytest.importorskip(
        "specdeploy.controller.conditions", reason="controller/conditions.py does not exist yet")
    return conditions_mod.Verdict


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("serving", "Healthy"),
        ("rolling_out", "Progressing"),
        ("creating", "Progressing"),
        ("scaled_to_zero", "Suspended"),
        ("invalid_while_serving", "Degraded"),
        ("does_not_fit", "Degraded"),
    ],
)
def test_statuses_the_controller_writes(scenario, expected):
    verdict = _ok()
    valid = {"Validated": verdict("True", "Valid"), "Planned": verdict("True", "Planned")}
    if scenario == "serving":
        status = _controller_status(valid, _workload(2, 2, 2))
    elif scenario == "rolling_out":
        status = _controller_status(valid, _workload(2, 1, 1))
    elif scenario == "creating":
        status = _controller_status(valid, None)
    elif scenario == "scaled_to_zero":
        status = _controller_status(valid, _workload(0, 0, 0))
    elif scenario == "invalid_while_serving":
        status = _controller_status(
            {"Validated": verdict("False", "InvalidSpec", "draft heads 96 do not divide tp 64"),
             "Planned": verdict("Unknown", "NotValidated")}, _workload(1, 1, 1))
    else:
        status = _controller_status(
            {"Validated": verdict("True", "Valid"), "Planned": verdict("False", "DoesNotFit", "needs 700 GiB")}, None)
    assert run_health(sdep(5, status))["status"] == expected, status
