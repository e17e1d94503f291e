"""The one pure flow every caller shares: spec + configs -> findings + plan.

The CLI, the operator and the tests all call `evaluate`; nothing here touches the
network, the Kubernetes API or the clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import Plan
from specdeploy.validation.findings import Finding, has_errors


@dataclass(frozen=True)
class ModelInputs:
    """A model's config.json as read by sources/, plus the weight size when the Hub knows it."""

    config: dict[str, Any]
    weight_bytes: int | None = None
    origin: str = "inline"  # where the config came from, for messages


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    plan: Plan | None

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(list(self.findings))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
            "plan": self.plan.to_dict() if self.plan else None,
        }


def evaluate(
    spec: SpeculativeDeploymentSpec,
    target: ModelInputs,
    draft: ModelInputs | None,
    *,
    k_in_force: int | None = None,
) -> Evaluation:
    """Validate the pair and plan its layout. `draft` is None for ngram/suffix (and mtp,
    which reads the target's own MTP layers). `k_in_force`: with numSpeculativeTokens auto,
    the k the telemetry chose (status.speculation), which the plan then renders."""
    from specdeploy.planning.planner import plan_deployment
    from specdeploy.render.owned_flags import extra_args_findings

    evaluation = plan_deployment(spec, target, draft, k_in_force)
    return Evaluation(evaluation.findings + tuple(extra_args_findings(spec)), evaluation.plan)
