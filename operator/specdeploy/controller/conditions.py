"""Conditions from what the operator decided and what the workload reports. Pure: `now` is
passed in, so the same inputs give the same status and unchanged conditions keep their
lastTransitionTime (which is what makes "nothing changed -> nothing written" hold)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.api.status import CONDITION_TYPES, Condition


# Progressing reasons that mean the operator cannot make progress on its own (kstatus Stalled).
# PreflightHeld: spec.preflight.mode Required and the preflight Job could not run.
STUCK_REASONS = frozenset({"ApplyFailed", "InvalidChildNames", "ReconcileError", "PreflightHeld"})


@dataclass(frozen=True)
class Verdict:
    """One condition's value before timestamps are attached."""

    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


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

    @classmethod
    def from_live(cls, live: dict[str, Any]) -> "WorkloadState":
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
        )

    @property
    def rolled_out(self) -> bool:
        return self.current and self.updated >= self.desired and self.ready >= self.desired


def workload_verdicts(workload: WorkloadState | None, applied: bool) -> dict[str, Verdict]:
    """Progressing and Available from the workload alone."""
    if workload is None:
        return {
            "Progressing": Verdict("True" if applied else "False", "Creating" if applied else "NoWorkload"),
            "Available": Verdict("False", "NoWorkload", "no workload has been created yet"),
        }
    where = f"{workload.kind} {workload.name}: {workload.ready}/{workload.desired} replicas ready"
    if workload.rolled_out:
        progressing = Verdict("False", "RolloutComplete", where)
    else:
        progressing = Verdict("True", "RollingOut", where)
    if workload.desired == 0:
        available = Verdict("False", "ScaledToZero", where)
    elif workload.ready > 0:
        available = Verdict("True", "ReplicasReady", where)
    else:
        available = Verdict("False", "NoReplicasReady", where)
    return {"Progressing": progressing, "Available": available}


def ready_verdict(verdicts: dict[str, Verdict], workload: WorkloadState | None) -> Verdict:
    """Ready summarises: the current spec is valid, planned, applied and fully rolled out."""
    for kind in ("Validated", "Planned"):
        v = verdicts[kind]
        if v.status != "True":
            suffix = " (the last valid workload keeps serving)" if workload and workload.ready else ""
            return Verdict("False" if v.status == "False" else "Unknown", v.reason, f"{kind}: {v.message}{suffix}")
    progressing = verdicts.get("Progressing")
    if progressing is not None and progressing.status == "False" and progressing.reason in STUCK_REASONS:
        return Verdict("False", progressing.reason, progressing.message)
    if workload is None:
        if progressing is not None and progressing.status == "True" and progressing.reason != "Creating":
            return Verdict("Unknown", progressing.reason, progressing.message)  # e.g. waiting for the preflight
        return Verdict("Unknown", "Creating", "the workload is being created")
    if workload.rolled_out and workload.desired > 0:
        return Verdict("True", "Serving", verdicts["Available"].message)
    if workload.desired == 0:
        return Verdict("False", "ScaledToZero", "replicas is 0")
    return Verdict("False", verdicts["Progressing"].reason, verdicts["Progressing"].message)


def kstatus_verdicts(verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """kstatus (Flux's health check) ignores Ready and reads Reconciling/Stalled: Stalled
    when the spec cannot be served as written, Reconciling while Ready is on its way."""
    unknown = Verdict("Unknown", "")
    blocked = [verdicts.get(k, unknown) for k in ("Validated", "Planned") if verdicts.get(k, unknown).status == "False"]
    progressing = verdicts.get("Progressing", unknown)
    if progressing.status == "False" and progressing.reason in STUCK_REASONS:
        blocked.append(progressing)  # the children cannot be written: stuck until it is fixed
    stalled = Verdict("True", blocked[0].reason, blocked[0].message) if blocked else Verdict("False", "NotStalled")
    ready = verdicts.get("Ready", unknown)
    settled = blocked or ready.status == "True" or ready.reason == "ScaledToZero"
    reconciling = Verdict("False", "Settled") if settled else Verdict("True", ready.reason or "Reconciling", ready.message)
    return {"Reconciling": reconciling, "Stalled": stalled}


def merge_conditions(
    previous: list[dict[str, Any]], verdicts: dict[str, Verdict], *, now: str, generation: int | None
) -> list[dict[str, Any]]:
    """Conditions in a fixed order; lastTransitionTime changes only when status does."""
    before = {c.get("type"): c for c in previous or []}
    verdicts = {**verdicts, **kstatus_verdicts(verdicts)}
    out = []
    for kind in CONDITION_TYPES:
        v = verdicts.get(kind)
        if v is None:
            if kind in before:
                out.append(before[kind])
            continue
        old = before.get(kind)
        since = old.get("lastTransitionTime") if old and old.get("status") == v.status else now
        cond = Condition(
            type=kind, status=v.status, reason=v.reason, message=v.message,
            last_transition_time=since or now, observed_generation=generation,
        )
        out.append(cond.model_dump(by_alias=True, exclude_none=True))
    return out


def verdicts_from(conditions: list[dict[str, Any]]) -> dict[str, Verdict]:
    """Read back the verdicts another writer stored (the readiness mirror keeps Validated
    and Planned as the reconcile left them)."""
    return {
        c["type"]: Verdict(c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
        for c in conditions or []
        if c.get("type") in CONDITION_TYPES
    }


def transitions(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions whose status changed (or appeared): each gets an Event."""
    before = {c.get("type"): c.get("status") for c in previous or []}
    return [c for c in current if before.get(c["type"]) != c["status"]]
