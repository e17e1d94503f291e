"""Methods the method table cannot judge by itself, as a user meets them: a name a vLLM plugin
registers (judged only by a preflight of the image, never accepted silently, refused by a release
that lets no plugin register one), a proposer class in the image (custom_class), and
extract_hidden_states, which proposes no tokens."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.api.conditions import Reason
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate
from specdeploy.sources import resolve_pair
from specdeploy.telemetry.metrics import Counters
from specdeploy.telemetry.model import analyse
from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set
from tests.conftest import load_config

LLAMA8, EAGLE3 = "meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3"
WITH_PLUGINS = [v for v in SUPPORTED_VERSIONS if rule_set(v).plugin_methods]
WITHOUT_PLUGINS = [v for v in SUPPORTED_VERSIONS if not rule_set(v).plugin_methods]
PLUGIN = "team_tree_drafter"


def _evaluate(version: str, draft: dict[str, Any], *, draft_config: str | None = None, target: dict[str, Any] | None = None,
              **spec: Any) -> Evaluation:
    parsed = SpeculativeDeploymentSpec.model_validate({
        "image": f"registry.example/vllm:v{version}", "target": {"model": "org/t"}, "draft": draft,
        "resources": {"gpu": {"product": "H100-80GB"}}, **spec})
    return evaluate(parsed, ModelInputs(target or load_config(LLAMA8)), ModelInputs(load_config(draft_config)) if draft_config else None)


def _codes(evaluation: Evaluation) -> set[str]:
    return {f.code for f in evaluation.findings}


def test_both_kinds_of_release_are_supported() -> None:
    assert WITH_PLUGINS and WITHOUT_PLUGINS


@pytest.mark.parametrize("version", WITHOUT_PLUGINS)
def test_a_release_without_plugins_refuses_an_unknown_method_naming_what_it_accepts(version: str) -> None:
    evaluation = _evaluate(version, {"method": PLUGIN, "numSpeculativeTokens": 3})
    (finding,) = [f for f in evaluation.findings if f.code == "method-unsupported"]
    assert not evaluation.ok and finding.field == "spec.draft.method" and f"'{PLUGIN}'" in finding.message
    assert all(name in finding.message for name in ("eagle", "eagle3", "mtp", "draft_model")) and len(finding.message) <= 300
    assert "lets no plugin register one" in finding.message and not evaluation.needs_preflight


@pytest.mark.parametrize("version", WITH_PLUGINS)
def test_a_release_with_plugins_plans_an_unknown_method_but_only_a_preflight_judges_it(version: str) -> None:
    evaluation = _evaluate(version, {"method": PLUGIN, "model": "org/d", "numSpeculativeTokens": 3, "tensorParallelSize": 1},
                           draft_config=EAGLE3, parallelism={"tensorParallelSize": 2})
    (finding,) = [f for f in evaluation.findings if f.code == "method-needs-preflight"]
    assert evaluation.ok and evaluation.needs_preflight and finding.severity == "warning"
    assert f"vLLM {version}'s built-in methods do not include '{PLUGIN}'" in finding.message
    assert f"image registry.example/vllm:v{version}" in finding.message and "only a preflight" in finding.message
    # Conservatively: the draft split at the target's TP, with a KV cache of its own.
    plan = evaluation.plan
    assert plan.method == PLUGIN and plan.draft.attention_heads_per_gpu == 32 // 2
    assert any(layer.model == "draft" for layer in plan.memory.layers)
    assert evaluation.speculative_config["method"] == PLUGIN and evaluation.speculative_config["model"] == "org/d"


@pytest.mark.parametrize("version", WITH_PLUGINS)
def test_a_plugins_options_and_draft_are_left_to_its_image(version: str) -> None:
    """Options a built-in speculator would refuse, and a draft architecture vLLM has no class for:
    a plugin may take both."""
    evaluation = _evaluate(version, {"method": PLUGIN, "model": "org/d", "numSpeculativeTokens": 3,
                                     "speculativeConfig": {"speculator_options": {"depth": 2}}},
                           draft_config=EAGLE3)
    assert evaluation.ok and _codes(evaluation) & {"speculative-config-method", "draft-architecture-unsupported"} == set()
    without_k = _evaluate(version, {"method": PLUGIN})
    assert "k-required" in _codes(without_k) and "has no default" in str([f.message for f in without_k.findings])


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_a_built_in_method_needs_no_preflight(version: str) -> None:
    evaluation = _evaluate(version, {"method": "eagle3", "model": "org/d", "numSpeculativeTokens": 3}, draft_config=EAGLE3)
    assert evaluation.ok and not evaluation.needs_preflight and "method-needs-preflight" not in _codes(evaluation)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_custom_class_runs_a_class_of_the_image_where_the_release_has_it(version: str) -> None:
    draft = {"method": "custom_class", "model": "team_spec.proposer.TreeProposer", "numSpeculativeTokens": 3}
    spec = SpeculativeDeploymentSpec.model_validate({"image": f"registry.example/vllm:v{version}", "target": {"model": "org/t"}, "draft": draft})
    target, read = resolve_pair(spec, lambda source, where: ModelInputs(load_config(LLAMA8)) if where == "spec.target" else pytest.fail("read the class path as a checkpoint"))
    evaluation = evaluate(spec, target, read)
    if "custom_class" in rule_set(version).speculative_methods:
        (finding,) = [f for f in evaluation.findings if f.code == "method-needs-preflight"]
        assert "team_spec.proposer.TreeProposer" in finding.message and evaluation.needs_preflight
        assert evaluation.speculative_config["model"] == "team_spec.proposer.TreeProposer"
    else:
        assert "method-unsupported" in _codes(evaluation) and not evaluation.ok


def _with_aux_layers() -> dict[str, Any]:
    return {**load_config(LLAMA8), "eagle_aux_hidden_state_layer_ids": [1, 15, 29]}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_extract_hidden_states_as_its_speculator_requires(version: str) -> None:
    ok = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 1}, target=_with_aux_layers())
    assert ok.ok and not ok.needs_preflight and ok.speculative_config["method"] == "extract_hidden_states"
    # no draft KV cache, but the hidden-state cache: 3 layers x 4096 x 2 bytes per token, unsplit by TP
    assert [layer.to_dict() for layer in ok.plan.memory.layers if layer.model == "draft"] == [
        {"model": "draft", "kind": "full", "layers": 1, "bytesPerToken": 3 * 4096 * 2}]
    k3 = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 3}, target=_with_aux_layers())
    (fixed,) = [f for f in k3.findings if f.code == "k-fixed-by-method"]
    assert fixed.stage == "load" and "numSpeculativeTokens 1 only" in fixed.message
    assert _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": "auto"}, target=_with_aux_layers()).plan.num_speculative_tokens == 1
    no_layers = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 1})
    (missing,) = [f for f in no_layers.findings if f.code == "target-config-key-missing"]
    assert missing.field == "spec.target.config.eagle_aux_hidden_state_layer_ids"
    overridden = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 1},
                           vllm={"extraArgs": ["--hf-overrides", '{"eagle_aux_hidden_state_layer_ids": [1, 15, 29]}']})
    assert "target-config-key-missing" not in _codes(overridden)
    sampled = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 1,
                                  "speculativeConfig": {"draft_sample_method": "probabilistic"}}, target=_with_aux_layers())
    (greedy,) = [f for f in sampled.findings if f.field.endswith("draft_sample_method")]
    assert greedy.stage == "load" and "'greedy' only" in greedy.message
    with pytest.raises(ValueError, match="uses no draft model"):
        SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"}, "draft": {"method": "extract_hidden_states", "model": "org/d"}})


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if rule_set(v).logic.fly_rejection_sampler])
def test_fly_refuses_a_method_that_proposes_no_tokens(version: str) -> None:
    evaluation = _evaluate(version, {"method": "extract_hidden_states", "numSpeculativeTokens": 1,
                                     "speculativeConfig": {"rejection_sample_method": "fly"}}, target=_with_aux_layers())
    assert any(f.code == "speculative-config-combination" and "proposes no tokens" in f.message for f in evaluation.findings)


def test_extract_hidden_states_never_counts_as_an_effective_speculation() -> None:
    """Its speculator reports every 'draft' token accepted: the counters would promise 2x."""
    counters = Counters(drafts=10_000, draft_tokens=10_000, accepted_tokens=10_000, accepted_per_position=(10_000,))
    assert analyse(counters, method="eagle3", cost=0.1, k=1).verdict.reason == Reason.EFFECTIVE
    verdict = analyse(counters, method="extract_hidden_states", cost=0.0, k=1).verdict
    assert (verdict.status, verdict.reason) == ("False", Reason.NO_SPEEDUP) and "proposes no tokens" in verdict.message
