"""The one pure flow every caller shares: spec + configs -> findings + plan.

The CLI, the operator and the tests all call `evaluate`; nothing here touches the network, the
Kubernetes API or the clock. The stages run in the order vLLM itself checks, each in its own
module, and every finding carries the stage that produced it:

    which vLLM judges  (vllm.versions)                     stage spec
    read the models    (geometry.models)                   stage config
    check the pair     (validation.rules)                  stage pair
                       (validation.load: what fails when vLLM builds the models)  stage load
    resolve k          (validation.speculative_tokens, then the speculativeConfig keys
                        that depend on it: validation.speculative_config)  stage pair
    plan the layout    (planning.planner)                  stage plan (vLLM's layout rules: pair)
    check extra args   (validation.extra_args)             stage spec
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import VALIDATION_STAGES, Finding, Stage, at_stage, has_errors
from specdeploy.geometry import ModelInputs, Models, read_models
from specdeploy.planning.plan import Plan
from specdeploy.planning.planner import LayoutRules, image_findings, layout_findings, plan_layout
from specdeploy.render.speculative_config import speculative_config
from specdeploy.validation.extra_args import check_extra_args
from specdeploy.validation.load import check_load_layout, check_load_pair
from specdeploy.validation.rules import METHOD_NEEDS_PREFLIGHT, check_layout, check_pair
from specdeploy.validation.speculative_config import check_speculative_config
from specdeploy.validation.speculative_tokens import resolve_num_speculative_tokens
from specdeploy.vllm import VllmFacts, judging_version

__all__ = ["Evaluation", "ModelInputs", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    plan: Plan | None
    vllm_version: str | None = None  # the rule set that judged (None: the spec did not parse)
    speculative_config: dict[str, Any] | None = None  # what --speculative-config will carry

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.findings)

    @property
    def needs_preflight(self) -> bool:
        """The fast rules cannot judge the method (a plugin's, a class in the image): only a
        preflight of the image can, so no workload runs without its verdict."""
        return any(f.code == METHOD_NEEDS_PREFLIGHT for f in self.findings)

    @property
    def validated(self) -> bool:
        """No spec/config/pair/load error: vLLM would accept the pair (the `Validated` condition)."""
        return not has_errors(self.findings, VALIDATION_STAGES)

    def plan_dict(self) -> dict[str, Any] | None:
        if self.plan is None:
            return None
        return {**self.plan.to_dict(), "speculativeConfig": self.speculative_config}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "vllmVersion": self.vllm_version,
            "findings": [f.to_dict() for f in self.findings],
            "plan": self.plan_dict(),
        }


def evaluate(
    spec: SpeculativeDeploymentSpec, target: ModelInputs, draft: ModelInputs | None, *, k_in_force: int | None = None
) -> Evaluation:
    """Validate the pair and plan its layout. `draft` is None for ngram/suffix (and mtp, which
    reads the target's own MTP layers). `k_in_force`: with numSpeculativeTokens auto, the k the
    telemetry chose (status.speculation), which the plan and --speculative-config then carry."""
    facts, findings = judging_version(spec.vllm_version, spec.image)
    extra_args = check_extra_args(spec, facts)
    models, model_findings = read_models(spec, target, draft, facts)
    findings += at_stage(model_findings, Stage.CONFIG)
    if models is None:
        return Evaluation(tuple(findings + extra_args), None, facts.version)
    rules = _layout_rules(spec, models, facts)
    findings += check_pair(spec, models, facts)
    findings += check_load_pair(spec, models, draft.config if draft else None, facts)
    k, k_findings = resolve_num_speculative_tokens(spec, models, facts, k_in_force)
    findings += k_findings + check_speculative_config(spec, k, models, facts)
    if k is None or has_errors(findings):
        # No plan for an invalid pair, but every reason at once: vLLM's layout rules too.
        return Evaluation(tuple(findings + layout_findings(spec, models, rules) + extra_args), None, facts.version)
    plan, plan_findings = plan_layout(spec, models, k, target, draft, facts, rules)
    findings += plan_findings + image_findings(spec) + extra_args
    config = speculative_config(spec, plan) if plan is not None else None
    return Evaluation(tuple(findings), plan, facts.version, config)


def _layout_rules(spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts) -> LayoutRules:
    """vLLM's rules for one layout, as the planner asks them: the pair's (validation.rules)
    and what fails when vLLM builds the target and the draft at that TP (validation.load) —
    only for a layout its config check accepts: vLLM builds nothing it has refused."""
    def rules(tp: int, draft_tp: int | None, pp: int) -> list[Finding]:
        config = check_layout(spec, models, tp, draft_tp, pp, facts)
        if has_errors(config):
            return config
        return config + check_load_layout(spec, models, tp, draft_tp, facts.version)

    return rules
