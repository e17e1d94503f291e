"""Conditions from what the operator decided and what the workload reports. Pure: `now` is
passed in, so the same inputs give the same status and unchanged conditions keep their
lastTransitionTime (which is what makes "nothing changed -> nothing written" hold)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from specdeploy.api.conditions import (
    AVAILABLE, CONDITION_TYPES, PLANNED, PREFLIGHT, PREFLIGHT_WARNINGS, PROGRESSING, READY, RECONCILING, SPEC_CONDITIONS, STALLED,
    STUCK_REASONS, UNKNOWN, VALIDATED, Reason, Verdict,
)
from specdeploy.api.status import Condition
from specdeploy.findings import VALIDATION_STAGES

Verdicts = dict[str, Verdict]  # condition type -> its value
# A scheduler message is read from the cluster: kept to a size a condition message carries.
SCHEDULER_MESSAGE_LIMIT = 1024
Event = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True)
class WorkloadState:
    """What the live Deployment/LeaderWorkerSet says about its replicas."""

    kind: str
    name: str
    desired: int
    replicas: int
    ready: int
    updated: int
    current: bool  # the workload controller has observed the latest workload spec
    unschedulable: str = ""  # what the scheduler said of a pod it could not place, if any

    @classmethod
    def from_live(cls, live: dict[str, Any], unschedulable: str = "") -> "WorkloadState":
        spec, status, meta = live.get("spec") or {}, live.get("status") or {}, live.get("metadata") or {}
        generation, observed = meta.get("generation"), status.get("observedGeneration")
        return cls(
            kind=live.get("kind", ""),
            name=meta.get("name", ""),
            desired=int(spec.get("replicas", 1)),
            replicas=int(status.get("replicas", 0)),
            ready=int(status.get("readyReplicas", 0)),
            updated=int(status.get("updatedReplicas", status.get("replicas", 0))),
            current=generation is None or observed is None or observed >= generation,
            unschedulable=unschedulable,
        )

    @property
    def rolled_out(self) -> bool:
        return self.current and self.updated >= self.desired and self.ready >= self.desired


def scheduling_problem(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message for a pod it could not place (PodScheduled=False, Unschedulable);
    None once it is placed, or while it has not tried."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return str(condition.get("message") or "the scheduler found no node")[:SCHEDULER_MESSAGE_LIMIT]
    return None


def workload_verdicts(workload: WorkloadState | None, applied: bool) -> Verdicts:
    """Progressing and Available from the workload alone."""
    if workload is None:
        return {
            PROGRESSING: Verdict("True", Reason.CREATING) if applied else Verdict("False", Reason.NO_WORKLOAD),
            AVAILABLE: Verdict("False", Reason.NO_WORKLOAD, "no workload has been created yet"),
        }
    where = f"{workload.kind} {workload.name}: {workload.ready}/{workload.desired} replicas ready"
    if workload.rolled_out:
        progressing = Verdict("False", Reason.ROLLOUT_COMPLETE, where)
    elif workload.unschedulable:
        progressing = Verdict("True", Reason.UNSCHEDULABLE, f"{where}; {workload.unschedulable}")
    else:
        progressing = Verdict("True", Reason.ROLLING_OUT, where)
    if workload.desired == 0:
        available = Verdict("False", Reason.SCALED_TO_ZERO, where)
    elif workload.ready > 0:
        available = Verdict("True", Reason.REPLICAS_READY, where)
    else:
        available = Verdict("False", Reason.NO_REPLICAS_READY, where)
    return {PROGRESSING: progressing, AVAILABLE: available}


def ready_verdict(verdicts: Verdicts, workload: WorkloadState | None) -> Verdict:
    """Ready summarises: the current spec is valid, planned, applied and fully rolled out."""
    for kind in SPEC_CONDITIONS:
        v = verdicts[kind]
        if v.status != "True":
            suffix = " (the last valid workload keeps serving)" if workload and workload.ready else ""
            return Verdict("False" if v.status == "False" else "Unknown", v.reason, f"{kind}: {v.message}{suffix}")
    progressing = verdicts.get(PROGRESSING)
    if progressing is not None and progressing.status == "False" and progressing.reason in STUCK_REASONS:
        return Verdict("False", progressing.reason, progressing.message)
    if workload is None:
        if progressing is not None and progressing.status == "True" and progressing.reason != Reason.CREATING:
            return Verdict("Unknown", progressing.reason, progressing.message)  # e.g. waiting for the preflight
        return Verdict("Unknown", Reason.CREATING, "the workload is being created")
    if workload.rolled_out and workload.desired > 0:
        return Verdict("True", Reason.SERVING, verdicts[AVAILABLE].message)
    if workload.desired == 0:
        return Verdict("False", Reason.SCALED_TO_ZERO, "replicas is 0")
    return Verdict("False", verdicts[PROGRESSING].reason, verdicts[PROGRESSING].message)


def kstatus_verdicts(verdicts: Verdicts) -> Verdicts:
    """kstatus (Flux's health check) ignores Ready and reads Reconciling/Stalled: Stalled
    when the spec cannot be served as written, Reconciling while Ready is on its way."""
    blocked = [verdicts.get(k, UNKNOWN) for k in SPEC_CONDITIONS if verdicts.get(k, UNKNOWN).status == "False"]
    progressing = verdicts.get(PROGRESSING, UNKNOWN)
    if progressing.status == "False" and progressing.reason in STUCK_REASONS:
        blocked.append(progressing)  # the children cannot be written: stuck until it is fixed
    stalled = Verdict("True", blocked[0].reason, blocked[0].message) if blocked else Verdict("False", Reason.NOT_STALLED)
    ready = verdicts.get(READY, UNKNOWN)
    settled = blocked or ready.status == "True" or ready.reason == Reason.SCALED_TO_ZERO
    reconciling = (Verdict("False", Reason.SETTLED) if settled
                   else Verdict("True", ready.reason or Reason.RECONCILING, ready.message))
    return {RECONCILING: reconciling, STALLED: stalled}


def condition_entry(kind: str, verdict: Verdict, old: Mapping[str, Any] | None, *, now: str,
                    generation: int | None) -> dict[str, Any]:
    """The one condition writer: `verdict` as a stored condition. lastTransitionTime changes
    only when the status does, so an unchanged verdict writes nothing."""
    same = old is not None and old.get("status") == verdict.status
    since = (old or {}).get("lastTransitionTime") if same else None
    cond = Condition(type=kind, status=verdict.status, reason=verdict.reason, message=verdict.message[:32768],
                     last_transition_time=since or now, observed_generation=generation)
    return cond.model_dump(by_alias=True, exclude_none=True)


def merge_conditions(
    previous: list[dict[str, Any]], verdicts: Verdicts, *, now: str, generation: int | None
) -> list[dict[str, Any]]:
    """Conditions in a fixed order, the kstatus pair derived from the others; a type with no
    verdict keeps its stored condition."""
    before = {c.get("type"): c for c in previous or []}
    verdicts = {**verdicts, **kstatus_verdicts(verdicts)}
    out = []
    for kind in CONDITION_TYPES:
        v = verdicts.get(kind)
        if v is not None:
            out.append(condition_entry(kind, v, before.get(kind), now=now, generation=generation))
        elif kind in before:
            out.append(before[kind])
    return out


def verdicts_from(conditions: list[dict[str, Any]]) -> Verdicts:
    """Read back the verdicts another writer stored (the readiness mirror keeps Validated
    and Planned as the reconcile left them)."""
    return {
        c["type"]: Verdict(c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
        for c in conditions or []
        if c.get("type") in CONDITION_TYPES
    }


def condition_events(previous: list[dict[str, Any]], current: list[dict[str, Any]], *,
                     said: frozenset[str] = frozenset()) -> list[Event]:
    """Events for Warnings and meaningful transitions only: a condition's first appearance in
    its expected state (Validated/Planned True, Available/Ready False) is no news. `said`: the
    conditions whose findings have an Event each (`finding_events`), so no summary repeats them;
    nor does Stalled=True repeat the False spec condition it is derived from."""
    before = {c.get("type"): c for c in previous or []}
    blocked = {c["reason"] for c in current if c["type"] in SPEC_CONDITIONS and c["status"] == "False"}
    events = []
    for cond in current:
        kind, status, old = cond["type"], cond["status"], before.get(cond["type"])
        message = f"{kind}={status}" + (f": {cond['message']}" if cond.get("message") else "")
        stale = cond["reason"] == Reason.CONFIG_REFRESH_RETRYING
        if kind == VALIDATED and stale and (old or {}).get("reason") != Reason.CONFIG_REFRESH_RETRYING:
            events.append(("Warning", cond["reason"], message))
        elif kind == PREFLIGHT and cond["reason"] in PREFLIGHT_WARNINGS and (old or {}).get("reason") != cond["reason"]:
            events.append(("Warning", cond["reason"], message))  # CouldNotRun: Unknown (BestEffort) or False (Required)
        elif (kind in said and status == "False") or (kind == STALLED and cond["reason"] in blocked):
            continue
        elif old is None or old.get("status") != status:
            events += _transition_event(kind, status, old, cond["reason"], message)
    return events


# A spec with more errors than this gets this many Events and one counting the rest.
MAX_FINDING_EVENTS = 10


def finding_events(findings: list[dict[str, Any]] | None, previous: list[dict[str, Any]] | None,
                   verdicts: Verdicts) -> tuple[list[Event], frozenset[str]]:
    """One Warning per error finding the status newly holds, with the reason of the condition it
    decides (a finding already said is not said again), and those conditions: each finding is
    one line of `kubectl describe`, not a summary of the first plus two copies of it."""
    known = {(f.get("code"), f.get("field"), f.get("message")) for f in previous or []}
    new = [f for f in findings or [] if f.get("severity") == "error" and (f.get("code"), f.get("field"), f.get("message")) not in known]
    validation = {stage.value for stage in VALIDATION_STAGES}
    kinds = [VALIDATED if f.get("stage") in validation else PLANNED for f in new]
    events: list[Event] = [("Warning", verdicts.get(kind, UNKNOWN).reason or kind, f"{f['field']}: {f['message']} [{f['code']}]")
                           for f, kind in zip(new[:MAX_FINDING_EVENTS], kinds)]
    if len(new) > MAX_FINDING_EVENTS:
        events.append(("Warning", events[-1][1], f"{len(new) - MAX_FINDING_EVENTS} more finding(s): see status.findings"))
    return events, frozenset(kinds)


def verdict_line(conditions: list[dict[str, Any]]) -> str:
    """A reconcile's outcome in a few words for the log: what blocks the spec, else readiness."""
    by_type = {c.get("type"): c for c in conditions}
    for kind, word in ((VALIDATED, "invalid"), (PLANNED, "not planned")):
        cond = by_type.get(kind) or {}
        if cond.get("status") == "False":
            return f"{word} ({cond.get('reason')}: {str(cond.get('message', ''))[:300]})"
    ready = by_type.get(READY) or {}
    word = "ready" if ready.get("status") == "True" else "not ready"
    return f"{word} ({ready.get('reason')}: {str(ready.get('message', ''))[:300]})"


def _transition_event(kind: str, status: str, old: Mapping[str, Any] | None, reason: str, message: str) -> list[Event]:
    """The Event for a condition whose status changed (or that appeared), if it is news."""
    if kind in SPEC_CONDITIONS:
        if status == "False":
            return [("Warning", reason, message)]
        return [("Normal", reason, message)] if old is not None else []
    if kind in (AVAILABLE, READY):
        if status == "True":
            return [("Normal", reason, message)]
        if old is not None and old.get("status") == "True":
            return [("Warning" if kind == AVAILABLE else "Normal", reason, message)]
    if kind == STALLED and status == "True":
        return [("Warning", reason, message)]
    return []
