"""The load stage (what vLLM fails on while building the models), shared weights and the model
cache volume, as a user sees them: `specdeploy validate` and the plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.geometry import read_geometry
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.planning.cache_volume import quantity_bytes
from specdeploy.planning.memory import estimate_draft_weight_bytes, estimate_weight_bytes
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import MODEL_CONFIGS, load_config
from tests.unit.test_cli import K3, run
from tests.unit.test_validation import judge

DEFAULT_FACTS = rule_set(DEFAULT_VERSION)
ROOT = Path(__file__).resolve().parents[2]


def test_specforge_kimi_k3_dspark_exits_1_with_a_load_finding_naming_markov_rank() -> None:
    result = run("validate", "--target", K3, "--draft", str(MODEL_CONFIGS / "specforge__kimi-k3-dspark.json"),
                 "--method", "dspark", "--tp", "8", "--num-speculative-tokens", "7", "-o", "json")
    assert result.returncode == 1, result.stdout
    out = json.loads(result.stdout)
    load = [f for f in out["findings"] if f["stage"] == "load"]
    assert out["ok"] is False and [f["code"] for f in load] == ["draft-load-fails"]
    assert load[0]["field"] == "spec.draft.config.markov_rank"
    assert "Qwen3DSparkModel" in load[0]["message"] and "AttributeError" in load[0]["message"]
    assert "dflash_config (256)" in load[0]["message"]


def test_the_same_draft_with_markov_rank_at_the_top_level_builds() -> None:
    config = load_config("specforge__kimi-k3-dspark")
    config["markov_rank"] = config["dflash_config"]["markov_rank"]
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "moonshotai/Kimi-K3"}, "draft": {"model": "org/d", "method": "dspark", "numSpeculativeTokens": 7},
        "parallelism": {"tensorParallelSize": 8}})
    evaluation = evaluate(spec, ModelInputs(load_config("moonshotai__Kimi-K3")), ModelInputs(config))
    assert evaluation.ok and not [f for f in evaluation.findings if f.stage.value == "load"]


def test_eagle3_draft_tp_1_is_accepted_but_runs_at_the_targets_tp() -> None:
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", tp=8, draft_tp=1, k=3)
    assert evaluation.ok
    note = next(f for f in evaluation.findings if f.code == "draft-tp-not-honoured")
    assert note.severity.value == "warning" and note.stage.value == "load" and "runs at TP 8" in note.message
    assert evaluation.plan.draft.attention_heads_per_gpu == 32 // 8  # built at TP 8, not 1


def test_eagle_draft_whose_heads_do_not_split_at_the_targets_tp_fails_at_load() -> None:
    head = load_config("specforge__llama3-8B-eagle3") | {"num_attention_heads": 4, "num_key_value_heads": 4}
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "draft": {"model": "org/d", "method": "eagle3", "numSpeculativeTokens": 3,
                                                "tensorParallelSize": 1},
        "parallelism": {"tensorParallelSize": 8}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(head))
    failure = next(f for f in evaluation.findings if f.code == "draft-load-fails")
    assert not evaluation.ok and failure.stage.value == "load" and "4 attention heads" in failure.message
    # In auto mode the planner no longer falls back to draft TP 1 for eagle3: vLLM never builds that.
    auto = evaluate(spec.model_copy(update={"draft": spec.draft.model_copy(update={"tensor_parallel_size": "auto"})}),
                    ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(head))
    assert not auto.ok and not any(f.code == "draft-tp-fallback" for f in auto.findings)


def test_eagle3_head_shares_the_targets_embedding_and_keeps_its_own_small_lm_head() -> None:
    head = read_geometry(load_config("specforge__llama3-8B-eagle3"), "d", DEFAULT_FACTS)[0]
    alone, shared = estimate_weight_bytes(head), estimate_draft_weight_bytes("eagle3", head, 128256)
    assert alone - shared == (2 * 128256 - 32000) * 4096 * 2  # embed + lm_head borrowed, 32k-row head kept
    assert estimate_draft_weight_bytes("draft_model", head, 128256) == alone


@pytest.mark.parametrize("quantity, expected", [("200Gi", 200 * 2**30), ("1.5T", 1.5e12), ("512Mi", 2**29), ("1000", 1000)])
def test_kubernetes_quantities(quantity: str, expected: float) -> None:
    assert quantity_bytes(quantity) == int(expected)


def test_a_200gi_emptydir_cannot_hold_kimi_k3_and_the_b300_example_now_can() -> None:
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "kimi-k3-dspark-b300.yaml").read_text())
    spec = SpeculativeDeploymentSpec.model_validate(doc["spec"])
    inputs = (ModelInputs(spec.target.config), ModelInputs(spec.draft.config))
    assert evaluate(spec, *inputs).ok
    explicit = SpeculativeDeploymentSpec.model_validate({**doc["spec"], "modelCache": {"sizeLimit": "200Gi"}})
    evaluation = evaluate(explicit, *inputs)
    finding = next(f for f in evaluation.findings if f.code == "model-cache-too-small")
    assert not evaluation.ok and finding.field == "spec.modelCache.sizeLimit" and "200Gi" in finding.message
    assert finding.stage.value == "plan"
    # The default 200Gi, which nobody chose for these weights, is a warning.
    default = SpeculativeDeploymentSpec.model_validate({k: v for k, v in doc["spec"].items() if k != "modelCache"})
    evaluation = evaluate(default, *inputs)
    assert evaluation.ok and any(f.code == "model-cache-too-small" and f.severity.value == "warning" for f in evaluation.findings)
