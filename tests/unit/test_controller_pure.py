"""The controller's pure parts: the merge patch computed from desired state, conditions that
keep their lastTransitionTime while nothing changes (so nothing is rewritten), the Events a
status change posts and the log line that says the verdict."""

from __future__ import annotations

import pytest

from specdeploy.controller.reconcile.apply import merge_patch
from specdeploy.api.conditions import Verdict
from specdeploy.controller.reconcile.conditions import WorkloadState, merge_conditions, ready_verdict, workload_verdicts


def test_merge_patch_sends_only_differences_and_replaces_lists() -> None:
    live = {"metadata": {"labels": {"a": "1", "other": "x"}, "uid": "u"}, "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "vllm", "args": ["m", "--x"]}], "dnsPolicy": "ClusterFirst"}}}, "status": {"readyReplicas": 1}}
    desired = {"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "vllm", "args": ["m", "--y"]}]}}}}
    assert merge_patch(live, desired) == {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["m", "--y"]}]}}}}


def test_merge_patch_removes_scheduling_fields_and_selector_keys_no_longer_rendered() -> None:
    live = {"spec": {"selector": {"app": "v", "leaderworkerset.sigs.k8s.io/worker-index": "0"}, "template": {"spec": {"nodeSelector": {"gpu": "h100"}, "priorityClassName": "p", "dnsPolicy": "ClusterFirst"}}}}
    desired = {"spec": {"selector": {"app": "v"}, "template": {"spec": {}}}}
    patch = merge_patch(live, desired)
    assert patch == {"spec": {"selector": {"leaderworkerset.sigs.k8s.io/worker-index": None}, "template": {"spec": {"nodeSelector": None, "priorityClassName": None}}}}


def test_merge_patch_of_equal_objects_is_empty() -> None:
    obj = {"spec": {"selector": {"a": "b"}, "template": {"spec": {"nodeSelector": {"x": "y"}}}}}
    assert merge_patch(obj, obj) == {}


def _verdicts(workload: WorkloadState | None) -> dict[str, Verdict]:
    verdicts = {"Validated": Verdict("True", "Valid"), "Planned": Verdict("True", "Planned")}
    verdicts.update(workload_verdicts(workload, applied=True))
    verdicts["Ready"] = ready_verdict(verdicts, workload)
    return verdicts


def test_conditions_keep_transition_time_until_status_changes() -> None:
    rolling = WorkloadState("Deployment", "d", desired=2, replicas=2, ready=1, updated=2, current=True)
    first = merge_conditions([], _verdicts(rolling), now="t1", generation=3)
    assert {c["type"]: c["status"] for c in first} == {"Validated": "True", "Planned": "True", "Progressing": "True", "Available": "True", "Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert all(c["lastTransitionTime"] == "t1" and c["observedGeneration"] == 3 for c in first)
    again = merge_conditions(first, _verdicts(rolling), now="t2", generation=3)
    assert again == first  # same inputs, a later clock: nothing to write
    done = WorkloadState("Deployment", "d", desired=2, replicas=2, ready=2, updated=2, current=True)
    later = {c["type"]: c for c in merge_conditions(first, _verdicts(done), now="t3", generation=3)}
    assert later["Ready"]["status"] == "True" and later["Ready"]["lastTransitionTime"] == "t3"
    assert later["Available"]["lastTransitionTime"] == "t1"


def test_ready_is_false_when_the_spec_is_invalid_even_if_the_old_workload_serves() -> None:
    serving = WorkloadState("Deployment", "d", desired=1, replicas=1, ready=1, updated=1, current=True)
    verdicts = {"Validated": Verdict("False", "ValidationFailed", "spec.draft: bad"), "Planned": Verdict("Unknown", "NotValidated")}
    verdicts.update(workload_verdicts(serving, applied=True))
    ready = ready_verdict(verdicts, serving)
    assert (ready.status, ready.reason) == ("False", "ValidationFailed")
    assert "keeps serving" in ready.message
    assert verdicts["Available"].status == "True"


def test_workload_state_reads_deployment_status() -> None:
    live = {"kind": "Deployment", "metadata": {"name": "d", "generation": 4}, "spec": {"replicas": 3}, "status": {"observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}}
    state = WorkloadState.from_live(live)
    assert (state.desired, state.ready, state.current, state.rolled_out) == (3, 3, False, False)


def test_kstatus_pair_follows_ready_validated_and_scale_to_zero() -> None:
    """Flux's kstatus reads Reconciling/Stalled, not Ready: both must say what Ready says."""
    from specdeploy.controller.reconcile.conditions import kstatus_verdicts

    ok = {"Validated": Verdict("True", "Valid"), "Planned": Verdict("True", "Planned")}
    serving = kstatus_verdicts({**ok, "Ready": Verdict("True", "Serving")})
    assert (serving["Reconciling"].status, serving["Stalled"].status) == ("False", "False")
    rolling = kstatus_verdicts({**ok, "Ready": Verdict("False", "RollingOut", "0/1 ready")})
    assert (rolling["Reconciling"].status, rolling["Reconciling"].reason) == ("True", "RollingOut")
    invalid = kstatus_verdicts({**ok, "Validated": Verdict("False", "InvalidPair", "draft heads"), "Ready": Verdict("False", "InvalidPair")})
    assert (invalid["Stalled"].status, invalid["Stalled"].reason, invalid["Reconciling"].status) == ("True", "InvalidPair", "False")
    zero = kstatus_verdicts({**ok, "Ready": Verdict("False", "ScaledToZero")})
    assert zero["Reconciling"].status == "False"
    assert (serving["Reconciling"].reason, serving["Stalled"].reason) == ("Settled", "NotStalled")


def test_no_workload_before_the_first_apply() -> None:
    """Nothing applied yet (the spec is invalid from the start): no workload, not progressing."""
    verdicts = workload_verdicts(None, applied=False)
    assert (verdicts["Progressing"].status, verdicts["Progressing"].reason) == ("False", "NoWorkload")
    assert (verdicts["Available"].status, verdicts["Available"].reason) == ("False", "NoWorkload")


def test_merge_patch_ignores_fields_the_api_server_adds() -> None:
    """Defaults inside list items (terminationMessagePath, protocol) are not drift."""
    from specdeploy.controller.reconcile.apply import covers

    desired = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "ports": [{"containerPort": 8000}]}]}}}}
    live = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "terminationMessagePath": "/dev/termination-log",
                                                            "ports": [{"containerPort": 8000, "protocol": "TCP"}]}]}}}}
    assert covers(live, desired) and merge_patch(live, desired) == {}
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})  # one more item: drift
    assert merge_patch(live, desired) == desired


def test_status_is_compared_as_stored_and_removed_keys_are_nulled() -> None:
    from specdeploy.controller.reconcile.steps import _changes

    stored_plan = {"method": "ngram", "tensorParallelSize": 1}  # the API server dropped draftTensorParallelSize: null
    assert _changes({"plan": stored_plan}, {"plan": {**stored_plan, "draftTensorParallelSize": None}}) == {}
    assert _changes({"plan": {**stored_plan, "old": 1}}, {"plan": stored_plan}) == {"plan": {"old": None}}


def test_events_only_for_warnings_and_real_transitions() -> None:
    from specdeploy.controller.reconcile.conditions import condition_events as _events

    def conds(**status: str) -> list[dict[str, str]]:
        return [{"type": t, "status": s, "reason": f"R{t}{s}", "message": ""} for t, s in status.items()]

    # A healthy create: every condition appears in its expected state: no Event.
    first = conds(Validated="True", Planned="True", Progressing="True", Available="False", Ready="False", Stalled="False")
    assert _events([], first) == []
    # Serving: Available and Ready turning True are news.
    serving = conds(Validated="True", Planned="True", Progressing="False", Available="True", Ready="True", Stalled="False")
    assert [(t, r) for t, r, _ in _events(first, serving)] == [("Normal", "RAvailableTrue"), ("Normal", "RReadyTrue")]
    # Replicas lost: a Warning; an invalid edit: a Warning; stuck: a Warning.
    lost = conds(Validated="False", Planned="True", Progressing="False", Available="False", Ready="False", Stalled="True")
    kinds = {r: t for t, r, _ in _events(serving, lost)}
    assert kinds == {"RValidatedFalse": "Warning", "RAvailableFalse": "Warning", "RReadyFalse": "Normal", "RStalledTrue": "Warning"}


def _finding(code: str, field: str, stage: str = "spec", severity: str = "error") -> dict[str, str]:
    return {"code": code, "severity": severity, "stage": stage, "field": field, "message": f"{field} is wrong"}


def test_each_error_finding_is_one_event_and_no_summary_repeats_it() -> None:
    """An invalid CR used to get two identical Warnings (Validated=False, then Stalled=True with
    the same words) naming only the first finding."""
    from specdeploy.controller.reconcile.conditions import condition_events, finding_events

    verdicts = {"Validated": Verdict("False", "InvalidSpec", "spec.image: wrong (+1 more)"), "Planned": Verdict("Unknown", "NotValidated")}
    findings = [_finding("image-invalid", "spec.image"), _finding("method-misspelled", "spec.draft.method"),
                _finding("vllm-version-unknown", "spec.image", severity="warning")]
    events, said = finding_events(findings, None, verdicts)
    assert events == [("Warning", "InvalidSpec", "spec.image: spec.image is wrong [image-invalid]"),
                      ("Warning", "InvalidSpec", "spec.draft.method: spec.draft.method is wrong [method-misspelled]")]
    invalid = [{"type": "Validated", "status": "False", "reason": "InvalidSpec", "message": "x"},
               {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "x"}]
    assert condition_events([], invalid, said=said) == []  # the findings' own Events say it
    # Another edit, one finding fixed and one added: only the new one is news.
    events, _ = finding_events([findings[1], _finding("extra-arg-joined", "spec.vllm.extraArgs[0]")], findings, verdicts)
    assert [e[2].split(":")[0] for e in events] == ["spec.vllm.extraArgs[0]"]
    assert finding_events(findings, findings, verdicts)[0] == []  # a re-reconcile says nothing again


def test_a_plan_finding_takes_the_planned_reason_and_many_findings_are_counted() -> None:
    from specdeploy.controller.reconcile.conditions import MAX_FINDING_EVENTS, finding_events

    verdicts = {"Validated": Verdict("True", "Valid"), "Planned": Verdict("False", "NoFeasiblePlan", "x")}
    events, said = finding_events([_finding("gpu-unknown", "spec.resources.gpu.product", stage="plan")], [], verdicts)
    assert events[0][1] == "NoFeasiblePlan" and said == {"Planned"}
    many = [_finding("spec-invalid", f"spec.vllm.env[{i}].name") for i in range(MAX_FINDING_EVENTS + 3)]
    events, _ = finding_events(many, [], {"Validated": Verdict("False", "InvalidSpec")})
    assert len(events) == MAX_FINDING_EVENTS + 1 and events[-1][2] == "3 more finding(s): see status.findings"


def test_a_stall_of_its_own_still_warns() -> None:
    """Stalled=True that no spec condition explains (the children cannot be written) is the one Event."""
    from specdeploy.controller.reconcile.conditions import condition_events

    stuck = [{"type": "Validated", "status": "True", "reason": "Valid", "message": ""},
             {"type": "Stalled", "status": "True", "reason": "ApplyFailed", "message": "RBAC"}]
    assert [(t, r) for t, r, _ in condition_events([], stuck)] == [("Warning", "ApplyFailed")]


def test_the_log_line_gives_the_verdict() -> None:
    from specdeploy.controller.reconcile.conditions import verdict_line

    def cond(kind: str, status: str, reason: str, message: str = "m") -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "message": message}

    assert verdict_line([cond("Validated", "False", "InvalidSpec", "spec.image: bad")]) == "invalid (InvalidSpec: spec.image: bad)"
    assert verdict_line([cond("Validated", "True", "Valid"), cond("Planned", "False", "NoFeasiblePlan")]).startswith("not planned")
    assert verdict_line([cond("Validated", "True", "Valid"), cond("Ready", "True", "Serving")]) == "ready (Serving: m)"
    assert verdict_line([cond("Ready", "Unknown", "Creating")]).startswith("not ready (Creating")


def test_the_text_log_names_the_object_and_drops_kopfs_succeeded_line(capsys: pytest.CaptureFixture[str]) -> None:
    """kopf's "Handler 'reconcile' succeeded." said so for an invalid CR too, and named nothing."""
    import logging

    import kopf

    from specdeploy.controller.process.main import configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("text")
        body = kopf.Body({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                          "metadata": {"namespace": "ns1", "name": "sd", "uid": "u"}})
        logger = kopf.LocalObjectLogger(body=body, settings=kopf.OperatorSettings())
        logger.info("Handler 'reconcile' succeeded.")
        logger.info("Reconciled SpeculativeDeployment ns1/sd: invalid (InvalidSpec: spec.image: bad)")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "[ns1/sd] Reconciled SpeculativeDeployment ns1/sd: invalid" in lines[0], lines
