"""The Argo CD health check shipped with the chart, run by a real Lua runtime (lupa).

Argo CD evaluates `resource.customizations.health.<group>_<Kind>` scripts with the live object
bound to the global `obj` and reads the returned table's `status` and `message`. These tests do
the same against sample SpeculativeDeployment statuses in the shape api/status.py defines.
"""

from __future__ import annotations

import re
from pathlib import Path

import lupa
import pytest

from specdeploy.api.conditions import CONDITION_TYPES, REASONS, Reason, Verdict
from specdeploy.controller.reconcile.conditions import WorkloadState, merge_conditions, ready_verdict, workload_verdicts

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
    cond("Validated", "True", Reason.VALID),
    cond("Planned", "True", Reason.PLANNED),
    cond("Progressing", "False", Reason.ROLLOUT_COMPLETE),
    cond("Available", "True", Reason.REPLICAS_READY),
    cond("Ready", "True", Reason.SERVING, "2/2 replicas ready at http://k3.ml.svc:8000"),
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
        cond("Validated", "True", Reason.VALID),
        cond("Planned", "True", Reason.PLANNED),
        cond("Progressing", "True", Reason.ROLLING_OUT, "1/2 replicas updated"),
        cond("Available", "False", Reason.NO_REPLICAS_READY),
        cond("Ready", "False", Reason.ROLLING_OUT, "waiting for the Deployment"),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Progressing", "message": "1/2 replicas updated"}


def test_ready_unknown_is_progressing():
    conditions = [cond("Validated", "True"), cond("Ready", "Unknown", Reason.CREATING)]
    assert run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))["status"] == "Progressing"


def test_ready_missing_is_progressing():
    conditions = [cond("Validated", "True")]
    assert run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))["status"] == "Progressing"


def test_invalid_spec_is_degraded_even_while_the_old_workload_serves():
    # A bad edit keeps the last good children running (Available=True) but must show up.
    message = "draft num_attention_heads=96 does not divide tensorParallelSize=64"
    conditions = [
        cond("Validated", "False", Reason.VALIDATION_FAILED, message),
        cond("Planned", "Unknown", Reason.NOT_VALIDATED),
        cond("Progressing", "False", Reason.ROLLOUT_COMPLETE),
        cond("Available", "True", Reason.REPLICAS_READY),
        cond("Ready", "False", Reason.VALIDATION_FAILED, message),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out["status"] == "Degraded"
    assert out["message"] == f"Validated=False: {message}"


def test_impossible_plan_is_degraded():
    conditions = [
        cond("Validated", "True", Reason.VALID),
        cond("Planned", "False", Reason.NO_FEASIBLE_PLAN, "weights need 700 GiB per replica, 8xA100-40GB hold 320"),
        cond("Ready", "False", Reason.NO_FEASIBLE_PLAN),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out["status"] == "Degraded"
    assert "700 GiB" in out["message"]


def test_ready_false_without_progress_is_degraded():
    conditions = [
        cond("Validated", "True", Reason.VALID),
        cond("Planned", "True", Reason.PLANNED),
        cond("Progressing", "False", Reason.APPLY_FAILED),
        cond("Available", "False", Reason.NO_REPLICAS_READY),
        cond("Ready", "False", Reason.APPLY_FAILED, "pods crash-loop"),
    ]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Degraded", "message": "Ready=False: pods crash-loop"}


def test_message_falls_back_to_reason():
    conditions = [cond("Ready", "False", Reason.APPLY_FAILED, "")]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Degraded", "message": "Ready=False: ApplyFailed"}


def test_docs_give_the_argocd_cm_key_and_the_shipped_script():
    """docs/install.md names the exact argocd-cm key and embeds this very script."""
    doc = (REPO_ROOT / "docs" / "install.md").read_text()
    assert "resource.customizations.health.specdeploy.io_SpeculativeDeployment" in doc
    body = [line for line in SCRIPT.read_text().splitlines() if line.strip() and not line.startswith("--")]
    assert all(line in doc for line in body), "docs/install.md embeds a stale copy of argocd-health.lua"


def test_scaled_to_zero_is_suspended():
    conditions = [cond("Validated", "True"), cond("Planned", "True"),
                  cond("Progressing", "False", Reason.ROLLOUT_COMPLETE), cond("Available", "False", Reason.SCALED_TO_ZERO),
                  cond("Ready", "False", Reason.SCALED_TO_ZERO, "replicas is 0")]
    out = run_health(sdep(3, {"observedGeneration": 3, "conditions": conditions}))
    assert out == {"status": "Suspended", "message": "replicas is 0"}


# --- statuses built by the controller's own condition code ---------------------------------


def _controller_status(verdicts: dict[str, Verdict], workload: WorkloadState | None, generation: int = 5) -> dict:
    verdicts = dict(verdicts)
    if workload is not None or "Progressing" not in verdicts:
        verdicts.update(workload_verdicts(workload, applied=True))
    verdicts["Ready"] = ready_verdict(verdicts, workload)
    conditions = merge_conditions([], verdicts, now="2026-01-01T00:00:00Z", generation=generation)
    return {"observedGeneration": generation, "conditions": conditions}


def _workload(desired: int, ready: int, updated: int) -> WorkloadState:
    return WorkloadState(kind="Deployment", name="k3", desired=desired, replicas=desired, ready=ready, updated=updated, current=True)


VALID = {"Validated": Verdict("True", Reason.VALID), "Planned": Verdict("True", Reason.PLANNED)}


@pytest.mark.parametrize(
    ("verdicts", "workload", "expected"),
    [
        (VALID, _workload(2, 2, 2), "Healthy"),
        (VALID, _workload(2, 1, 1), "Progressing"),
        (VALID, None, "Progressing"),
        (VALID, _workload(0, 0, 0), "Suspended"),
        ({"Validated": Verdict("False", Reason.VALIDATION_FAILED, "draft heads 96 do not divide tp 64"),
          "Planned": Verdict("Unknown", Reason.NOT_VALIDATED)}, _workload(1, 1, 1), "Degraded"),
        ({"Validated": Verdict("False", Reason.INVALID_SPEC, "spec.replicas: must be >= 0"),
          "Planned": Verdict("Unknown", Reason.NOT_VALIDATED)}, None, "Degraded"),
        ({"Validated": Verdict("Unknown", Reason.CONFIG_UNAVAILABLE, "the Hub is down (retrying)")}, None, "Progressing"),
        ({"Validated": Verdict("True", Reason.VALID), "Planned": Verdict("False", Reason.NO_FEASIBLE_PLAN, "needs 700 GiB")}, None, "Degraded"),
        ({**VALID, "Progressing": Verdict("False", Reason.APPLY_FAILED, "forbidden")}, None, "Degraded"),
        ({**VALID, "Progressing": Verdict("Unknown", Reason.APPLY_RETRYING, "timeout (retrying)")}, None, "Progressing"),
        ({**VALID, "Progressing": Verdict("True", Reason.PREFLIGHT_RUNNING, "Job k3-preflight-1 runs")}, None, "Progressing"),
        ({"Validated": Verdict("False", Reason.PREFLIGHT_REFUSED, "vLLM refused at load")}, _workload(1, 1, 1), "Degraded"),
        ({**VALID, "Progressing": Verdict("False", Reason.PREFLIGHT_HELD, "image cannot be pulled")}, None, "Degraded"),
        ({**VALID, "Progressing": Verdict("False", Reason.PREFLIGHT_NEEDED, "a plugin's method, preflight Disabled")}, None, "Degraded"),
    ],
    ids=["serving", "rolling-out", "creating", "scaled-to-zero", "invalid-while-serving", "invalid-spec",
         "config-unavailable", "no-feasible-plan", "apply-failed", "apply-retrying",
         "preflight-running", "preflight-refused", "preflight-held", "preflight-needed"],
)
def test_statuses_the_controller_writes(verdicts: dict[str, Verdict], workload: WorkloadState | None, expected: str) -> None:
    status = _controller_status({**{"Planned": Verdict("Unknown", Reason.NOT_VALIDATED)}, **verdicts}, workload)
    assert run_health(sdep(5, status))["status"] == expected, status


def test_the_script_names_only_condition_types_and_reasons_the_operator_writes() -> None:
    """The Lua check and api/conditions.py read one list: a type or reason spelt in the script
    that the operator never writes (a rename, a typo) would silently never match."""
    quoted = set(re.findall(r'"([A-Z][A-Za-z]+)"', SCRIPT.read_text()))
    names = quoted - ARGO_STATUSES - {"True", "False"}
    assert names, "the script names no condition: the pattern above no longer matches it"
    assert names <= set(CONDITION_TYPES) | REASONS, names - set(CONDITION_TYPES) - REASONS
