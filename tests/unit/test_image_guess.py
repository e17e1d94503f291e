"""An image of unknown release (a custom tag, a nightly, a fork): the rules judging it are a
guess, so when they refuse, the refusal is reported as a guess and the image's own vLLM judges a
plan made for it (pipeline.plan_for_image): in `specdeploy preflight`, in the operator's gate and
at admission. The runs of the image's vLLM itself are in test_preflight_cli.py and
tests/integration/test_preflight.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.api.parse import parse_spec
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller.reconcile import preflight_gate as gate
from specdeploy.controller.admission import webhook
from specdeploy.geometry import ModelInputs
from specdeploy.pipeline import Evaluation, evaluate
from specdeploy.preflight.outcome import Outcome, parse_verdict
from specdeploy.preflight.request import judge_request

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = "registry.example/team/vllm:fast-build"  # a tag that names no release: the newest rules guess
# The options whose rules the newest release changed (issue 30): each refused by its rules, and
# accepted by 0.32.0's and 0.33.0's.
CASES = {
    "ngram-parallel-drafting": ("qwen3-8b-ngram.yaml", {"parallel_drafting": True}),
    "eagle3-parallel-drafting": ("llama-3.1-8b-eagle3.yaml", {"parallel_drafting": True}),
    "ngram-unpadded-drafter-batch": ("qwen3-8b-ngram.yaml", {"disable_padded_drafter_batch": True}),
    "draft-model-heterogeneous-vocab": ("qwen3-32b-draft-model.yaml", {"use_heterogeneous_vocab": True}),
}


def document(example: str, options: dict[str, Any], image: str = CUSTOM, **spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / example).read_text())
    doc["spec"]["draft"].setdefault("speculativeConfig", {}).update(options)
    doc["spec"].update(image=image, **spec)
    return doc


def judged(doc: dict[str, Any]) -> tuple[SpeculativeDeploymentSpec, Evaluation]:
    spec, findings = parse_spec(copy.deepcopy(doc["spec"]))
    assert spec is not None, findings
    draft = ModelInputs(spec.draft.config) if spec.draft.config else None
    return spec, evaluate(spec, ModelInputs(spec.target.config), draft)


@pytest.mark.parametrize("case", CASES)
def test_a_guessed_refusal_is_a_guess_and_the_image_gets_a_plan_a_release_accepts(case: str) -> None:
    spec, evaluation = judged(document(*CASES[case]))
    assert not evaluation.ok and evaluation.guessed
    image_plan = evaluation.image_plan
    # The newest other release whose rules accept the spec plans it, with the user's option kept.
    assert image_plan is not None and image_plan.ok and image_plan.vllm_version == "0.33.0"
    assert image_plan.plan is not None and image_plan.plan.vllm_version == "0.33.0"
    (option,) = CASES[case][1].items()
    assert image_plan.speculative_config is not None and option in image_plan.speculative_config.items()
    # The guess's errors, worded as the guess they are: warnings, naming the rules that guessed.
    errors = [f for f in evaluation.findings if f.severity.value == "error"]
    guessed = {f.code: f for f in evaluation.as_guess() if f.code in {e.code for e in errors}}
    assert errors and all(f.severity.value == "warning" for f in guessed.values())
    assert all(f.message.startswith("guessed by vLLM 0.34.0's rules") and e.message in f.message
               for e in errors for f in [guessed[e.code]])


@pytest.mark.parametrize("case", CASES)
def test_a_known_releases_refusal_is_final(case: str) -> None:
    _, evaluation = judged(document(*CASES[case], image="vllm/vllm-openai:v0.34.0"))
    assert not evaluation.ok and not evaluation.guessed and evaluation.image_plan is None


def test_when_no_release_accepts_the_guess_plans_with_its_release_refusals_set_aside() -> None:
    """eagle3 with use_heterogeneous_vocab: 0.32.0 and 0.33.0 take it only with draft_model,
    0.34.0 has no such key; the image's vLLM judges the guess's own plan (and refuses it:
    test_preflight_cli.py)."""
    _, evaluation = judged(document("llama-3.1-8b-eagle3.yaml", {"use_heterogeneous_vocab": True}))
    image_plan = evaluation.image_plan
    assert image_plan is not None and image_plan.plan is not None and not image_plan.ok
    assert image_plan.vllm_version == "0.34.0"
    assert image_plan.speculative_config is not None and image_plan.speculative_config["use_heterogeneous_vocab"] is True


@pytest.mark.parametrize("spec", [
    {"parallelism": {"tensorParallelSize": 5}},  # 32 heads: no layout at all
    {"vllm": {"extraArgs": ["--tensor-parallel-size", "2"]}},  # the plan's own flag: our rule, not a release's
], ids=["no-layout", "a-rule-of-ours"])
def test_no_plan_for_the_image_when_a_refusal_is_not_a_releases(spec: dict[str, Any]) -> None:
    _, evaluation = judged(document("llama-3.1-8b-eagle3.yaml", {"parallel_drafting": True}, **spec))
    assert not evaluation.ok and evaluation.guessed and evaluation.image_plan is None


def request_of(doc: dict[str, Any]) -> Any:
    spec, evaluation = judged(doc)
    assert evaluation.image_plan is not None and evaluation.image_plan.plan is not None
    return judge_request(spec, evaluation.image_plan.plan, spec.target.config, spec.draft.config)


GUESS = "spec.draft.speculativeConfig.parallel_drafting: vLLM 0.34.0: parallel_drafting is only supported by the dflash and dspark methods"
VERDICT = {"ok": True, "stage": None, "error": None, "vllmVersion": "0.32.0"}


def test_the_images_acceptance_replaces_the_guess() -> None:
    passed = Outcome("Passed", parse_verdict(json.dumps(VERDICT)))
    decision = gate.decide(passed, request_of(document(*CASES["eagle3-parallel-drafting"])), mode="Required", job="j",
                           fast_version="0.33.0", guess=GUESS)
    assert decision.proceed and decision.validated is not None
    assert (decision.validated.status, decision.validated.reason) == ("True", "Valid")
    assert "vLLM 0.32.0" in decision.validated.message and GUESS in decision.validated.message


def test_the_images_refusal_agrees_with_the_guess_so_nothing_disagrees() -> None:
    refused = Outcome("Refused", parse_verdict(json.dumps({**VERDICT, "ok": False, "stage": "config", "error": "ValueError: no"})))
    decision = gate.decide(refused, request_of(document(*CASES["eagle3-parallel-drafting"])), mode="Required", job="j",
                           fast_version="0.33.0", guess=GUESS)
    assert not decision.proceed and decision.validated is not None and decision.validated.reason == "PreflightRefused"
    assert decision.events == []


def test_a_guessed_refusal_holds_the_workload_when_the_image_cannot_answer() -> None:
    pull = Outcome("CouldNotRun", why="the image cannot be pulled (ErrImagePull)", final=False)
    decision = gate.decide(pull, request_of(document(*CASES["ngram-parallel-drafting"])), mode="Required", job="j",
                           fast_version="0.33.0", guess=GUESS)
    assert not decision.proceed and decision.progressing is not None and decision.progressing.reason == "PreflightHeld"
    assert "guessed" in decision.progressing.message and "BestEffort" not in decision.progressing.message


def test_admission_lets_the_image_decide_a_guessed_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = document(*CASES["eagle3-parallel-drafting"])
    doc["metadata"]["namespace"] = "ml"
    verdict = webhook.admission_verdict(doc)
    assert verdict.allowed and any("guessed by vLLM 0.34.0's rules" in w and "parallel_drafting" in w for w in verdict.warnings)
    # With no preflight to judge it, the guess is all there is, and it refuses.
    disabled = copy.deepcopy(doc)
    disabled["spec"]["preflight"] = {"mode": "Disabled"}
    assert not webhook.admission_verdict(disabled).allowed
    monkeypatch.setenv(gate.PREFLIGHT_ENV, "false")
    refused = webhook.admission_verdict(doc)
    assert not refused.allowed and "parallel_drafting" in refused.message
