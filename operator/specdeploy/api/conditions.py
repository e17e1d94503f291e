"""Every condition type and reason the operator writes, in one place.

The controller, the telemetry and the Argo CD health check (charts/specdeploy/files/
argocd-health.lua, tested against this module in tests/unit/test_argocd_health.py) read these
names; nothing else spells them. To add a reason: one line in `Reason`, under the condition it
belongs to. To add a condition type: a constant here and its place in `CONDITION_TYPES` (the
order conditions are written in status).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

VALIDATED: Final = "Validated"
PLANNED: Final = "Planned"
PREFLIGHT: Final = "Preflight"  # the image's own vLLM on the exact args (controller/reconcile/preflight_gate.py)
PROGRESSING: Final = "Progressing"
AVAILABLE: Final = "Available"
READY: Final = "Ready"  # the summary Argo CD and `kubectl wait` read
RECONCILING: Final = "Reconciling"  # kstatus's own pair (abnormal-true), which Flux reads
STALLED: Final = "Stalled"
SPECULATION_EFFECTIVE: Final = "SpeculationEffective"  # from the pods' acceptance counters
ROLLOUT: Final = "Rollout"  # a draft canary's phase and decision (rollout/, docs/rollout.md)

CONDITION_TYPES: Final[tuple[str, ...]] = (
    VALIDATED, PLANNED, PREFLIGHT, PROGRESSING, AVAILABLE, READY, RECONCILING, STALLED, SPECULATION_EFFECTIVE, ROLLOUT,
)
# The verdicts of one reconcile on the spec; the others follow the workload.
SPEC_CONDITIONS: Final[tuple[str, ...]] = (VALIDATED, PLANNED)


class Reason:
    """CamelCase reasons of conditions and Events, grouped by the condition that first carries
    them (Ready, Reconciling and Stalled repeat the reason of the condition that decides them)."""

    # Validated
    VALID = "Valid"
    INVALID_SPEC = "InvalidSpec"
    VALIDATION_FAILED = "ValidationFailed"
    CONFIG_INVALID = "ConfigInvalid"
    CONFIG_UNAVAILABLE = "ConfigUnavailable"
    CONFIG_REFRESH_RETRYING = "ConfigRefreshRetrying"  # the last good config stands
    PREFLIGHT_REFUSED = "PreflightRefused"  # the fast rules accepted, the image's vLLM refused
    # Unknown: rules guessed for an image of unknown release refuse; the image's preflight decides
    GUESSED_REFUSAL = "GuessedRefusal"
    # Planned
    PLANNED = "Planned"
    NOT_VALIDATED = "NotValidated"
    NO_FEASIBLE_PLAN = "NoFeasiblePlan"
    # Progressing
    NO_WORKLOAD = "NoWorkload"
    CREATING = "Creating"
    ROLLING_OUT = "RollingOut"
    ROLLOUT_COMPLETE = "RolloutComplete"
    INVALID_CHILD_NAMES = "InvalidChildNames"
    APPLY_RETRYING = "ApplyRetrying"
    APPLY_FAILED = "ApplyFailed"
    RECONCILE_ERROR = "ReconcileError"
    RECONCILE_TIMEOUT = "ReconcileTimeout"
    PREFLIGHT_RUNNING = "PreflightRunning"  # the workload waits for the preflight's verdict
    UNSCHEDULABLE = "Unschedulable"  # the rollout waits: the scheduler can place no pod (its message)
    PREFLIGHT_HELD = "PreflightHeld"  # spec.preflight.mode Required and the Job could not run
    # A method only a preflight of the image can judge (a plugin's) while no preflight runs: no workload
    PREFLIGHT_NEEDED = "PreflightNeeded"
    # Preflight
    PASSED = "Passed"
    REFUSED = "Refused"
    RUNNING = "Running"
    COULD_NOT_RUN = "CouldNotRun"
    DISABLED = "Disabled"
    # No verdict is taken from what the operator did not make (controller/reconcile/preflight_gate.py, preflight/outcome.py);
    # each holds the workload in every mode.
    UNTRUSTED_POD = "UntrustedPod"  # a pod claims the Job's verdict but the Job did not make it
    UNTRUSTED_JOB = "UntrustedJob"  # the Job at the preflight's name is not owned by this CR
    JUDGE_EDITED = "JudgeEdited"  # a mounted file is not the one the operator wrote: the Job is made again
    UNREADABLE_VERDICT = "UnreadableVerdict"  # the termination message is beyond what the judge writes
    # Available
    REPLICAS_READY = "ReplicasReady"
    NO_REPLICAS_READY = "NoReplicasReady"
    SCALED_TO_ZERO = "ScaledToZero"
    # Ready
    SERVING = "Serving"
    # Reconciling / Stalled
    RECONCILING = "Reconciling"
    SETTLED = "Settled"
    NOT_STALLED = "NotStalled"
    # SpeculationEffective
    NOT_ENOUGH_DRAFTS = "NotEnoughDrafts"
    ACCEPTANCE_COLLAPSED = "AcceptanceCollapsed"
    NO_SPEEDUP = "NoSpeedup"
    NO_SPEEDUP_AT_LOAD = "NoSpeedupAtLoad"  # the typical observed batch is past the crossover (telemetry/load.py)
    EFFECTIVE = "Effective"
    # Rollout (NOT_ENOUGH_DRAFTS above also: the canary's decision waits for drafts)
    STABLE = "Stable"  # no draft change in flight: the stable arm serves the spec's draft
    CANARY_STARTING = "CanaryStarting"
    CANARY_NOT_WORSE = "CanaryNotWorse"
    CANARY_WORSE = "CanaryWorse"
    CANARY_ERRORS = "CanaryErrors"
    CANARY_NOT_READY = "CanaryNotReady"
    WITHIN_MARGIN = "WithinMargin"  # MAX_DRAFTS reached inside the bounds: the point estimate decided
    MANUAL_PROMOTE = "ManualPromote"
    MANUAL_ABORT = "ManualAbort"
    PROMOTING = "Promoting"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    # Events only (no condition carries them)
    SPECULATIVE_TOKENS_CHANGED = "SpeculativeTokensChanged"
    PREFLIGHT_DISAGREES = "PreflightDisagrees"  # Warning: the fast rules accepted, the image's vLLM refused


REASONS: Final[frozenset[str]] = frozenset(v for k, v in vars(Reason).items() if k.isupper())
# Progressing reasons that mean the operator cannot make progress on its own (kstatus Stalled).
STUCK_REASONS: Final[frozenset[str]] = frozenset({Reason.APPLY_FAILED, Reason.INVALID_CHILD_NAMES, Reason.RECONCILE_ERROR,
                                                        Reason.PREFLIGHT_HELD, Reason.PREFLIGHT_NEEDED})
# Preflight reasons posted as a Warning Event when the condition takes them (not at every poll).
PREFLIGHT_WARNINGS: Final[frozenset[str]] = frozenset({Reason.COULD_NOT_RUN, Reason.UNTRUSTED_POD, Reason.UNTRUSTED_JOB,
                                                        Reason.JUDGE_EDITED, Reason.UNREADABLE_VERDICT})


@dataclass(frozen=True)
class Verdict:
    """One condition's value before timestamps are attached."""

    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


UNKNOWN: Final = Verdict("Unknown", "")
