"""The SpeculativeDeployment status: what the operator reports, in the shapes tools read.

Conditions follow metav1.Condition so kstatus (Flux), Argo CD and `kubectl wait
--for=condition=Ready` understand them. The CRD's status schema is generated from these
models, and the controller builds its status patch through them, so the two cannot differ.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specdeploy.api.conditions import CONDITION_TYPES
from specdeploy.api.spec import SpecModel

# The types are listed in api/conditions.py (the one list the controller and the Argo CD check read).
ConditionType = Literal[CONDITION_TYPES]  # type: ignore[valid-type]
ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(SpecModel):
    """One observation in the standard Kubernetes condition shape."""

    type: ConditionType = Field(description="Validated, Planned, Preflight (the image's own vLLM on the exact args), Progressing, Available, Ready (the summary), the kstatus pair Reconciling and Stalled, SpeculationEffective (from the pods' acceptance counters) or Rollout (a draft canary's phase).")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase machine-readable reason for the last transition.", max_length=1024)
    message: str = Field("", description="Human-readable details.", max_length=32768)
    last_transition_time: str = Field(description="When status last changed (RFC 3339).", max_length=64, json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(None, ge=0, description="The .metadata.generation this condition was computed from.")


class FindingStatus(SpecModel):
    """A validation finding (same shape as `specdeploy validate -o json`)."""

    code: str = Field(description="Stable rule identifier.", max_length=128)
    severity: Literal["error", "warning", "info"] = Field(description="error blocks the rollout; warning and info do not.")
    stage: Literal["spec", "config", "pair", "load", "plan"] | None = Field(None, description="The check that produced it: spec, config, pair and load findings decide Validated; plan findings decide Planned.")
    field: str = Field(description="Spec path the finding is about (what a user would edit).", max_length=512)
    message: str = Field(description="What is wrong and how to fix it.", max_length=4096)


class SkippedPod(SpecModel):
    """A serving pod whose /metrics could not be read this interval, and why."""

    pod: str = Field(description="Pod name.", max_length=253)
    reason: str = Field(description="Why its metrics were skipped (not ready, no IP, timeout, no spec-decode counters, ...).", max_length=1024)


class KPrediction(SpecModel):
    """The goodput model's prediction for one k."""

    k: int = Field(ge=1, description="Tokens proposed per step.")
    expected_tokens: float = Field(description="Expected tokens per target step: 1 + the sum of the first k per-position acceptances.")
    speedup: float = Field(description="Predicted decoding speedup over no speculation (1.0 = no gain).")
    extrapolated: bool = Field(False, description="k lies beyond the positions vLLM counted; its acceptance is extrapolated conservatively.")


class BatchSizePrediction(SpecModel):
    """The cost model's pick for one batch size (sequences decoding together on one replica)."""

    batch_size: int = Field(ge=1, description="Running sequences per replica.")
    recommended_num_speculative_tokens: int = Field(ge=0, description="The k with the highest predicted throughput at this batch size; 0: serving without speculation is faster.")
    predicted_speedup: float = Field(description="Predicted throughput at that k over serving without speculation (1.0 when k is 0).")


class BatchSizeShare(SpecModel):
    batch_size: int = Field(ge=1, description="Upper bound of the power-of-two bucket (readings above the previous bound up to this one).")
    share: float = Field(ge=0, le=1, description="Share of the readings in this bucket.")


class ObservedLoad(SpecModel):
    """The batch sizes the serving ran, from vllm:num_requests_running, over the same window as the acceptance."""

    samples: int = Field(ge=0, description="Readings (one per engine per scrape) with at least one running request.")
    typical_batch_size: float = Field(ge=0, description="The median reading: the batch most decoding steps ran at.")
    p90_batch_size: float = Field(ge=0, description="The 90th percentile reading.")
    max_batch_size: float = Field(ge=0, description="The largest reading.")
    distribution: list[BatchSizeShare] = Field(default_factory=list, max_length=32, description="Readings per power-of-two bucket.")
    recommended_num_speculative_tokens: int | None = Field(None, ge=0, description="The cost model's k at the typical batch size (0: speculation off is faster).")
    predicted_speedup: float | None = Field(None, description="Predicted throughput of the k in force at the typical batch size, over serving without speculation.")


class SpeculationStatus(SpecModel):
    """Acceptance as vLLM counted it on the serving pods, over a sliding window, and what
    the goodput model makes of it. Written only when the counters move."""

    drafts: int = Field(ge=0, description="Drafts proposed in the window (vllm:spec_decode_num_drafts_total), all pods.")
    draft_tokens: int = Field(ge=0, description="Draft tokens proposed (vllm:spec_decode_num_draft_tokens_total).")
    accepted_tokens: int = Field(ge=0, description="Draft tokens the target accepted (vllm:spec_decode_num_accepted_tokens_total).")
    acceptance_rate: float | None = Field(None, description="acceptedTokens / draftTokens. Falls with k by construction: compare k by predictedSpeedup instead.")
    mean_acceptance_length: float | None = Field(None, description="Tokens per target step: 1 + acceptedTokens / drafts.")
    per_position_acceptance: list[float] = Field(default_factory=list, max_length=64, description="Share of drafts whose first i+1 tokens were accepted, per position i.")
    window: str = Field(description="Length of the sliding window the counts cover, e.g. 600s.", max_length=32)
    observed_at: str = Field(description="When the counters last moved and these values were computed (RFC 3339).", max_length=64, json_schema_extra={"format": "date-time"})
    pods: int = Field(0, ge=0, description="Serving pods whose metrics were read in the last scrape.")
    skipped_pods: list[SkippedPod] = Field(default_factory=list, max_length=64, description="Serving pods whose metrics could not be read, with the reason.")
    draft_cost: float | None = Field(None, description="Cost of one draft pass relative to one target step, used by the goodput model.")
    draft_cost_source: str | None = Field(None, description="Where draftCost comes from.", max_length=512)
    predicted_speedup: float | None = Field(None, description="Predicted speedup at the k in force.")
    predictions: list[KPrediction] = Field(default_factory=list, max_length=66, description="Predicted speedup per k.")
    recommended_num_speculative_tokens: int | None = Field(None, ge=1, description="The k with the highest predicted speedup (set once enough drafts are counted).")
    num_speculative_tokens: int | None = Field(None, ge=1, description="The k in force (with numSpeculativeTokens: auto, the operator's choice).")
    num_speculative_tokens_reason: str | None = Field(None, description="Why that k is in force.", max_length=1024)
    num_speculative_tokens_changed_at: str | None = Field(None, description="When auto mode last changed k (it changes k at most once an hour).", max_length=64, json_schema_extra={"format": "date-time"})
    by_batch_size: list[BatchSizePrediction] = Field(default_factory=list, max_length=32, description="The cost model's best k and speedup per batch size (powers of two up to the serving's max sequences); k never rises as the batch grows.")
    crossover_batch_size: int | None = Field(None, ge=1, description="The smallest batch size at which no k pays: from there on serving without speculation is faster.")
    observed_load: ObservedLoad | None = Field(None, description="The batch sizes vLLM reported running over the window, and the cost model's verdict there.")
    cost_model: str | None = Field(None, description="What the cost model assumed: GPU roofline, context per sequence, acceptance source; or why it could not run.", max_length=1024)


class RolloutArmStatus(SpecModel):
    """One arm's figures over the comparison: counts since the canary became Ready."""

    drafts: int = Field(ge=0, description="Drafts the arm's pods counted (vllm:spec_decode_num_drafts_total).")
    acceptance_rate: float | None = Field(None, description="Accepted over proposed draft tokens. Falls with k by construction: with different k, compare speedup.")
    mean_accepted_length: float | None = Field(None, description="Tokens per target step: 1 + accepted tokens / drafts.")
    speedup: float | None = Field(None, description="The goodput model's speedup from the measured acceptance, E / (1 + c k): what the decision compares.")
    speedup_at_load: float | None = Field(None, description="The cost model's speedup at the batch size the arm ran (telemetry/load.py).")
    output_tokens_per_second_per_request: float | None = Field(None, description="vllm:generation_tokens_total per second per running request: reported, not decisive (it depends on the arm's request mix).")
    responses: int = Field(0, ge=0, description="HTTP responses of the arm's API servers (http_requests_total).")
    server_errors: int = Field(0, ge=0, description="Of which 5xx.")


class RolloutDecisionStatus(SpecModel):
    action: Literal["Wait", "Promote", "RollBack"] = Field(description="What the counters say: Wait (not enough drafts yet), Promote or RollBack.")
    reason: str = Field(description="CanaryStarting, NotEnoughDrafts, CanaryNotWorse, CanaryWorse, CanaryErrors, CanaryNotReady or WithinMargin.", max_length=64)
    message: str = Field("", description="The decision with its numbers.", max_length=4096)
    margin: float | None = Field(None, description="The margin it was taken with (spec.rollout.canary.margin).")
    difference: float | None = Field(None, description="Canary speedup - (1 - margin) x stable speedup.")
    lower_bound: float | None = Field(None, description="The one-sided 95 % lower bound of difference: >= 0 promotes.")
    upper_bound: float | None = Field(None, description="The one-sided 95 % upper bound of difference: < 0 rolls back.")


class RolloutStatus(SpecModel):
    """A draft change under spec.rollout.strategy Canary (docs/rollout.md)."""

    phase: Literal["Canary", "Promoting", "Promoted", "RolledBack"] | None = Field(None, description="Canary (the new draft serves a share next to the stable arm), Promoting, Promoted, RolledBack; unset: no draft change in flight.")
    draft: str | None = Field(None, description="Key of the draft the phase is about (sha256 of spec.draft, 16 hex digits).", max_length=64)
    rejected_draft: str | None = Field(None, description="Key of the draft last rolled back: it is not tried again until spec.draft changes or spec.rollout.canary.action is Promote.", max_length=64)
    canary_workload: str | None = Field(None, description="The canary's Deployment, as Kind/name.", max_length=512)
    canary_replicas: int | None = Field(None, ge=0, description="Pods the canary asks for.")
    message: str | None = Field(None, description="What the phase means now.", max_length=4096)
    stable: RolloutArmStatus | None = Field(None, description="The stable arm's figures.")
    canary: RolloutArmStatus | None = Field(None, description="The canary arm's figures.")
    decision: RolloutDecisionStatus | None = Field(None, description="The last decision from both arms' counters, with its numbers.")


class PreflightStatus(SpecModel):
    """The verdict of the image's own vLLM on one (image, args, configs) combination: kept so
    that a resync or an operator restart starts no second Job for it."""

    key: str = Field(description="sha256 of the image, the rendered vLLM args, the models' configs and the GPU memory judged.", max_length=64)
    image: str = Field(description="The image the preflight Job ran (spec.image).", max_length=512)
    job: str = Field(description="The preflight Job's name.", max_length=253)
    outcome: Literal["Running", "Passed", "Refused", "CouldNotRun", "UntrustedPod", "UntrustedJob", "JudgeEdited", "UnreadableVerdict"] = Field(
        description="Running, Passed (vLLM accepted the args), Refused (vLLM refused them), CouldNotRun (the Job could not run: image pull, "
                    "capacity, deadline, a judge error); or no verdict: UntrustedPod (a pod the Job did not make claims one), UntrustedJob "
                    "(the Job at this name is not this object's), JudgeEdited (a mounted file is not the operator's: the Job is made again), "
                    "UnreadableVerdict (the termination message is beyond what the judge writes).")
    stage: str | None = Field(None, description="Where vLLM refused: args, config, load or memory.", max_length=32)
    message: str | None = Field(None, description="vLLM's own error text, or why the Job could not run.", max_length=4096)
    vllm_version: str | None = Field(None, description="vllm.__version__ inside the image: it replaces the image tag's guess for later judgements of this object.", max_length=128)
    memory: dict[str, Any] | None = Field(None, description="The memory figures the image's vLLM computed per GPU.", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})


class SpeculativeDeploymentStatus(SpecModel):
    """Observed state: verdict, plan, and the workload's readiness."""

    observed_generation: int | None = Field(None, ge=0, description="The .metadata.generation the operator last acted on.")
    # listType map keyed by type: one condition per type, and server-side apply merges by type.
    conditions: list[Condition] = Field(default_factory=list, max_length=16, description="Validated, Planned, Preflight, Progressing, Available, Ready, the kstatus pair, SpeculationEffective and Rollout.",
                                        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    plan: dict[str, Any] | None = Field(None, description="The parallelism and memory plan with every decision explained (same shape as `specdeploy plan`).", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    findings: list[FindingStatus] = Field(default_factory=list, max_length=256, description="Validation findings for the current spec.")
    replicas: int | None = Field(None, ge=0, description="Serving replicas the workload has (scale subresource).")
    ready_replicas: int | None = Field(None, ge=0, description="Replicas whose every pod passes its readiness probe.")
    selector: str | None = Field(None, description="Label selector of the serving pods (scale subresource, for HPA/KEDA).", max_length=1024)
    endpoint: str | None = Field(None, description="In-cluster URL of the OpenAI-compatible API.", max_length=512)
    workload: str | None = Field(None, description="The workload serving the model, as Kind/name.", max_length=512)
    preflight: PreflightStatus | None = Field(None, description="The image's own vLLM's verdict on the exact args (spec.preflight).")
    speculation: SpeculationStatus | None = Field(None, description="Acceptance counted by vLLM on the serving pods, and the goodput model's verdict and recommended k.")
    rollout: RolloutStatus | None = Field(None, description="A draft canary's phase, both arms' figures and the decision (spec.rollout.strategy Canary).")
