"""Stage 1 of the flow: both models' config.json -> Geometry, as the judging vLLM reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, error, has_errors
from specdeploy.geometry.drafts import vllm_draft_config
from specdeploy.geometry.model_geometry import Geometry, read_geometry
from specdeploy.vllm import VllmFacts


@dataclass(frozen=True)
class ModelInputs:
    """A model's config.json as read by sources/, plus the weight size when the Hub knows it."""

    config: dict[str, Any]
    weight_bytes: int | None = None


@dataclass(frozen=True)
class Models:
    """The pair as vLLM will build it. For mtp (and dspark without draft.model) the draft is
    the target itself: its MTP layers or in-checkpoint DSpark head draft."""

    target: Geometry
    draft: Geometry | None
    draft_is_target: bool = False


def read_models(spec: SpeculativeDeploymentSpec, target_in: ModelInputs, draft_in: ModelInputs | None,
                facts: VllmFacts) -> tuple[Models | None, list[Finding]]:
    target, findings = read_geometry(target_in.config, "spec.target.config", facts)
    method = spec.draft.speculative_method
    draft: Geometry | None = None
    draft_is_target = method.target_as_draft and not spec.draft.model
    if draft_is_target:
        draft = target
    elif spec.draft.has_own_checkpoint:
        if draft_in is None:
            findings.append(error("draft-config-missing", "spec.draft.config",
                                  f"method {method.name} needs the draft's config.json (draft.config, draft.configMapRef, or a reachable draft.model)"))
        else:
            draft_config = vllm_draft_config(method, draft_in.config, target.vocab_size) if target else draft_in.config
            draft, draft_findings = read_geometry(draft_config, "spec.draft.config", facts)
            findings += draft_findings
    if target is None or has_errors(findings):
        return None, findings
    return Models(target, draft, draft_is_target), findings
