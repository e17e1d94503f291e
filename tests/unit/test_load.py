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


K3_NAME = "moonshotai__Kimi-K3"
LLAMA_3B = {**load_config("meta-llama__Llama-3.2-1B-Instruct"), "num_attention_heads": 24, "hidden_size": 3072,
            "intermediate_size": 8192, "num_hidden_layers": 28, "head_dim": 128}


def _pair(target: str, draft: dict | None, method: str, tp: object, draft_tp: object = "auto", **extra: object):
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "parallelism": extra.pop("parallelism", {"tensorParallelSize": tp}),
        "draft": {"method": method, "numSpeculativeTokens": 3, "tensorParallelSize": draft_tp,
                  **({"model": "org/d"} if draft is not None else {})}, **extra})
    return evaluate(spec, ModelInputs(load_config(target)), ModelInputs(draft) if draft is not None else None)


@pytest.mark.parametrize("method", ["draft_model", "dspark"])
def test_a_draft_at_draft_tp_1_still_splits_at_the_targets_tp_so_24_heads_fail_at_tp_16(method: str) -> None:
    """load_dspark_model and StandaloneARSpeculator pass the draft TP in a parallel_config no layer
    reads (meta-device build: AssertionError in the draft's attention at TP 16)."""
    draft = LLAMA_3B if method == "draft_model" else {**LLAMA_3B, "architectures": ["Qwen3DSparkModel"],
                                                      "model_type": "qwen3", "markov_rank": 64, "block_size": 3}
    evaluation = _pair("meta-llama__Llama-3.1-70B-Instruct", draft, method, 16, 1)
    failure = next(f for f in evaluation.findings if f.code == "draft-load-fails")
    assert not evaluation.ok and failure.stage.value == "load" and failure.field == "spec.draft.tensorParallelSize"
    assert "24 attention heads" in failure.message and "TP 16" in failure.message
    assert _pair("meta-llama__Llama-3.1-70B-Instruct", draft, method, 8, 1).ok  # 24 heads split at 8


def test_auto_layout_never_falls_back_to_draft_tp_1_and_counts_the_draft_at_the_targets_tp() -> None:
    """Auto TP skips the TPs the draft's 24 heads do not split at; the memory plan divides the
    draft's weights by the TP its layers split at."""
    evaluation = _pair("meta-llama__Llama-3.1-70B-Instruct", LLAMA_3B, "draft_model", "auto",
                       resources={"gpu": {"product": "H100-80GB"}})
    plan = evaluation.plan
    assert evaluation.ok and plan.tensor_parallel_size == plan.draft_tensor_parallel_size == 4
    assert not any(f.code == "draft-tp-fallback" for f in evaluation.findings)
    explicit = _pair("meta-llama__Llama-3.1-70B-Instruct", LLAMA_3B, "draft_model", 4, 1,
                     resources={"gpu": {"product": "H100-80GB"}})
    assert explicit.ok and explicit.plan.memory.draft_weights_gib == pytest.approx(plan.memory.draft_weights_gib)
    assert explicit.plan.draft.attention_heads_per_gpu == 24 // 4
    assert any(f.code == "draft-tp-not-honoured" for f in explicit.findings)


@pytest.mark.parametrize("tp, builds", [(3, False), (4, True), (6, False), (8, True), (12, False), (16, True)])
def test_kimi_k3s_vision_mlp_splits_only_where_its_heads_do_not_send_it_data_parallel(tp: int, builds: bool) -> None:
    """MoonViT's 12 heads: where TP divides them the tower is split and its 4096-wide MLP must
    divide TP too (meta-device build: "4096 is not divisible by 3"); elsewhere it runs unsplit."""
    evaluation = _pair(K3_NAME, None, "ngram", tp)
    refusals = [f for f in evaluation.findings if f.code == "target-load-fails"]
    assert bool(refusals) != builds
    if refusals:
        assert refusals[0].field == "spec.parallelism.tensorParallelSize" and "4096" in refusals[0].message


def test_gpt_oss_at_tp_16_has_no_kv_head_per_rank_and_auto_mode_plans_around_it() -> None:
    """gpt-oss splits its 8 KV heads without replication: TP 16 leaves 0 per rank (meta-device
    build: ZeroDivisionError); the planner, free to choose, takes a TP that builds."""
    refused = _pair("openai__gpt-oss-20b", None, "ngram", 16)
    assert not refused.ok and "target-load-fails" in {f.code for f in refused.findings if f.severity.value == "error"}
    assert _pair("openai__gpt-oss-20b", None, "ngram", 8).ok
    # 6 GiB GPUs: TP 8 needs more, TP 16 would fit but cannot build, so no layout is left.
    small = _pair("openai__gpt-oss-20b", None, "ngram", "auto", parallelism={"tensorParallelSize": "auto", "pipelineParallelSize": 1},
                  resources={"gpu": {"memoryGiB": 6, "perNode": 16}}, serving={"maxModelLen": 4096})
    no_layout = next(f for f in small.findings if f.code == "no-layout")
    assert not small.ok and "16x1, 32x1, 64x1: vLLM accepts TP 16 for the target but cannot build it" in no_layout.message
    assert len(no_layout.message) <= 300


def test_the_planner_passes_over_kimi_k3_tps_its_vision_tower_refuses() -> None:
    evaluation = _pair(K3_NAME, None, "ngram", "auto", resources={"gpu": {"product": "B200-180GB", "perNode": 6}},
                       serving={"maxModelLen": 32768})
    assert evaluation.ok and evaluation.plan.tensor_parallel_size not in (3, 6, 12)
    rejected = {c.tensor_parallel_size: c.reason for c in evaluation.plan.candidates if not c.accepted}
    assert all("4096" in rejected[tp] for tp in (3, 6, 12) if tp in rejected)
