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
    and the GPU device (planning.placement.device_findings: resource name, image build), whatever the models

When the rule set is a guess (the image is no release we have rules for: a custom tag, a
nightly, a fork) and it refuses, the refusal is not vLLM's word: `Evaluation.image_plan` holds the
plan the image's own vLLM then judges in a preflight (`plan_for_image`), and the caller reports the
guess's errors as the guess they are (`Evaluation.as_guess`) until that verdict comes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from specdeploy.api.spec import ROLLOUT_STRATEGY_FIELD, SpeculativeDeploymentSpec
from specdeploy.findings import VALIDATION_STAGES, Finding, Severity, Stage, at_stage, error, has_errors
from specdeploy.geometry import ModelInputs, Models, read_models
from specdeploy.planning.gpus import spec_gpu
from specdeploy.planning.plan import Plan
from specdeploy.planning.placement import device_findings
from specdeploy.planning.planner import LayoutRules, layout_findings, plan_layout
from specdeploy.render.speculative_config import speculative_config
from specdeploy.validation.extra_args import check_extra_args
from specdeploy.validation.load import check_load_layout, check_load_pair
from specdeploy.validation.rules import METHOD_NEEDS_PREFLIGHT, check_layout, check_pair
from specdeploy.validation.speculative_config import check_speculative_config
from specdeploy.validation.speculative_tokens import resolve_num_speculative_tokens
from specdeploy.vllm import RELEASE_REFUSALS, SUPPORTED_VERSIONS, VERSION_UNKNOWN, VllmFacts, judging_version

__all__ = ["Evaluation", "ModelInputs", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    plan: Plan | None
    vllm_version: str | None = None  # the rule set that judged (None: the spec did not parse)
    speculative_config: dict[str, Any] | None = None  # what --speculative-config will carry
    # Guessed rules refused: the evaluation whose plan a preflight of the image judges (plan_for_image).
    image_plan: Evaluation | None = None

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.findings)

    @property
    def guessed(self) -> bool:
        """The rule set is a guess: no supported release is the image's (`vllm-version-unknown`)."""
        return any(f.code == VERSION_UNKNOWN for f in self.findings)

    def as_guess(self) -> tuple[Finding, ...]:
        """The findings with each error worded as the guess it is, a warning: only the image's own
        vLLM can say whether a rule of a release it may not be holds for it."""
        return tuple(
            replace(f, severity=Severity.WARNING,
                    message=f"guessed by vLLM {self.vllm_version}'s rules (the image's release is unknown; its preflight decides): {f.message}")
            if f.severity is Severity.ERROR else f for f in self.findings)

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
    telemetry chose (status.speculation), which the plan and --speculative-config then carry.
    Guessed rules that refuse also give `image_plan`, for the image's own vLLM to judge."""
    evaluation = _evaluate(spec, target, draft, k_in_force)
    if evaluation.ok or not evaluation.guessed:
        return evaluation
    return replace(evaluation, image_plan=plan_for_image(spec, target, draft, evaluation.vllm_version, k_in_force))


def plan_for_image(spec: SpeculativeDeploymentSpec, target: ModelInputs, draft: ModelInputs | None,
                   guessed_version: str | None, k_in_force: int | None = None) -> Evaluation | None:
    """The plan a preflight judges (and the pods run, if the image accepts it) when the rules
    guessed for an image of unknown release refuse the spec. First the newest other release whose
    rules accept it: a plan one real vLLM takes, so a refusal can only be the image's own. Else the
    guessed rules' plan with their RELEASE_REFUSALS set aside (the layout search still asks vLLM's
    layout rules, and the memory must fit). None when any other refusal stands, or no layout is
    found: there are no args to judge, and the refusal is final."""
    for version in reversed(SUPPORTED_VERSIONS):
        if version != guessed_version:
            other = _evaluate(spec.model_copy(update={"vllm_version": version}), target, draft, k_in_force)
            if other.ok:
                return other
    lenient = _evaluate(spec, target, draft, k_in_force, despite_refusals=True)
    standing = [f for f in lenient.findings if f.severity is Severity.ERROR and f.code not in RELEASE_REFUSALS]
    return lenient if lenient.plan is not None and not standing else None


def _evaluate(spec: SpeculativeDeploymentSpec, target: ModelInputs, draft: ModelInputs | None,
              k_in_force: int | None, *, despite_refusals: bool = False) -> Evaluation:
    """The stages in vLLM's order, stopping before the plan at the pair's errors, except (with
    `despite_refusals`: a plan for the image to judge, plan_for_image) RELEASE_REFUSALS."""
    facts, findings = judging_version(spec.vllm_version, spec.image)
    # What fails only at deploy time (the args, the GPU's resource and image): said whatever the models.
    gpu = spec_gpu(spec)
    deploy_time = check_extra_args(spec, facts) + device_findings(spec, gpu)
    models, model_findings = read_models(spec, target, draft, facts)
    findings += at_stage(model_findings, Stage.CONFIG)
    if models is None:
        return Evaluation(tuple(findings + deploy_time), None, facts.version)
    rules = _layout_rules(spec, models, facts)
    findings += check_pair(spec, models, facts)
    findings += check_load_pair(spec, models, facts)
    k, k_findings = resolve_num_speculative_tokens(spec, models, facts, k_in_force)
    findings += k_findings + check_speculative_config(spec, k, models, facts)
    if k is None or has_errors([f for f in findings if not (despite_refusals and f.code in RELEASE_REFUSALS)]):
        # No plan for an invalid pair, but every reason at once: vLLM's layout rules too.
        return Evaluation(tuple(findings + layout_findings(spec, models, rules) + deploy_time), None, facts.version)
    plan, plan_findings = plan_layout(spec, models, k, target, draft, facts, rules, gpu)
    findings += plan_findings + _rollout_findings(spec, plan) + deploy_time
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


ROLLOUT_CANARY_MULTI_NODE = "rollout-canary-multi-node"


def _rollout_findings(spec: SpeculativeDeploymentSpec, plan: Plan | None) -> list[Finding]:
    """A draft canary is a second Deployment; a replica that spans nodes is a LeaderWorkerSet
    group, which has none (docs/rollout.md): refused rather than rolled out some other way."""
    if plan is None or not plan.multi_node or spec.rollout.strategy != "Canary":
        return []
    return [error(ROLLOUT_CANARY_MULTI_NODE, ROLLOUT_STRATEGY_FIELD,
                  f"strategy Canary needs a replica on one node; this plan spans {plan.nodes_per_replica} nodes per replica "
                  "(a LeaderWorkerSet). Set spec.rollout.strategy to RollingUpdate, or a layout that fits one node", Stage.PLAN)]
