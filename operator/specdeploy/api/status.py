"""The SpeculativeDeployment status: what the operator reports, in the shapes tools read.

Conditions follow metav1.Condition so kstatus (Flux), Argo CD and `kubectl wait
--for=condition=Ready` understand them. The CRD's status schema is generated from these
models, and the controller builds its status patch through them, so the two cannot differ.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specdeploy.api.spec import SpecModel

# Reconciling and Stalled are kstatus's own types (abnormal-true): Flux reads them with no
# configuration, while Argo CD and `kubectl wait` read Ready.
ConditionType = Literal["Validated", "Planned", "Progressing", "Available", "Ready", "Reconciling", "Stalled"]
CONDITION_TYPES: tuple[str, ...] = ConditionType.__args__  # type: ignore[attr-defined]
ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(SpecModel):
    """One observation in the standard Kubernetes condition shape."""

    type: ConditionType = Field(description="Validated, Planned, Progressing, Available, Ready (the summary), or the kstatus pair Reconciling and Stalled.")
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


class SpeculativeDeploymentStatus(SpecModel):
    """Observed state: verdict, plan, and the workload's readiness."""

    observed_generation: int | None = Field(None, ge=0, description="The .metadata.generation the operator last acted on.")
    # listType map keyed by type: one condition per type, and server-side apply merges by type.
    conditions: list[Condition] = Field(default_factory=list, max_length=16, description="Validated, Planned, Progressing, Available and Ready.",
                                        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    plan: dict[str, Any] | None = Field(None, description="The parallelism and memory plan with every decision explained (same shape as `specdeploy plan`).", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    findings: list[FindingStatus] = Field(default_factory=list, max_length=256, description="Validation findings for the current spec.")
    replicas: int | None = Field(None, ge=0, description="Serving replicas the workload has (scale subresource).")
    ready_replicas: int | None = Field(None, ge=0, description="Replicas whose every pod passes its readiness probe.")
    selector: str | None = Field(None, description="Label selector of the serving pods (scale subresource, for HPA/KEDA).", max_length=1024)
    endpoint: str | None = Field(None, description="In-cluster URL of the OpenAI-compatible API.", max_length=512)
    workload: str | None = Field(None, description="The workload serving the model, as Kind/name.", max_length=512)
