"""Draft-vs-target verdicts over the real configs; exact expectations only for the known traps.

The full grid is judged against vLLM itself in tests/parity; here the checks are the
invariants every verdict must satisfy and the cases the issue names."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate
from specdeploy.vllm import SUPPORTED_VERSIONS
from specdeploy.vllm.methods import built_draft_tp, method_named
from tests.conftest import load_config

TPS = (1, 2, 3, 4, 6, 8, 16)

# (target, draft, method, k): real pairs from tests/fixtures/model-configs.
REAL_PAIRS = [
    ("meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model", 4),
    ("meta-llama__Llama-3.1-70B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model", 4),
    ("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", 3),
    ("meta-llama__Llama-3.1-8B-Instruct", "SafeAILab__EAGLE-LLaMA3-Instruct-8B", "eagle", 3),
    ("Qwen__Qwen3-32B", "specforge__qwen3-32b-eagle3", "eagle3", 3),
    ("Qwen__Qwen3-32B", "Qwen__Qwen3-0.6B", "draft_model", 4),
    ("Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "dflash", 4),
    ("Qwen__Qwen3-235B-A22B", "Qwen__Qwen3-0.6B", "draft_model", 4),
    ("Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-0.5B", "draft_model", 4),
    ("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", "eagle3", 3),
    ("moonshotai__Kimi-K3", "k3-dspark-released", "dspark", 7),
    ("moonshotai__Kimi-K3", "k3-dspark-block5", "dspark", 5),
    ("moonshotai__Kimi-K3", "specforge__kimi-k3-dspark", "dspark", 7),
    ("deepseek-ai__DeepSeek-V3", None, "mtp", 1),
    ("zai-org__GLM-5", None, "mtp", 1),
    ("mistralai__Mixtral-8x22B-Instruct-v0.1", None, "ngram", 4),
]


def judge(target: str, draft: str | None, method: str, *, tp: Any = "auto", draft_tp: Any = "auto",
          k: int | None = None, pp: Any = 1, **extra: Any) -> Evaluation:
    draft_spec: dict[str, Any] = {"method": method, "tensorParallelSize": draft_tp}
    if draft is not None:
        draft_spec["model"] = f"org/{draft}"
    if k is not None:
        draft_spec["numSpeculativeTokens"] = k
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": f"org/{target}"}, "draft": draft_spec,
        "parallelism": {"tensorParallelSize": tp, "pipelineParallelSize": pp}, **extra})
    return evaluate(spec, ModelInputs(load_config(target)), ModelInputs(load_config(draft)) if draft else None)


# The oldest supported release still has medusa and mlp_speculator (later ones dropped them).
MEDUSA_RELEASE = SUPPORTED_VERSIONS[0]


def codes(evaluation: Evaluation) -> set[str]:
    return {f.code for f in evaluation.findings if f.severity.value == "error"}


GRID = [(t, d, m, k, tp, dtp) for (t, d, m, k), tp in itertools.product(REAL_PAIRS, TPS) for dtp in ("one", "equal")]
# Pairs vLLM refuses at every layout (checked against vLLM itself in tests/parity).
INVALID_PAIRS = {("Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-0.5B"),  # different vocabularies
                 ("moonshotai__Kimi-K3", "specforge__kimi-k3-dspark")}  # fails at load: no top-level markov_rank


def _divides_heads(config: dict[str, Any], tp: int) -> bool:
    """An independent statement of vLLM's head split: Q heads divide by TP; without MLA the KV
    heads divide TP or TP divides them (QKVParallelLinear)."""
    text = config.get("text_config") or config
    heads, kv = text["num_attention_heads"], text.get("num_key_value_heads") or text["num_attention_heads"]
    if heads % tp:
        return False
    return "kv_lora_rank" in text or (tp % kv == 0 if tp >= kv else kv % tp == 0)


def _builds(config: dict[str, Any], tp: int) -> bool:
    """An independent statement of what model classes split beyond the heads (meta-device builds,
    vllm/tp_splits.py): gpt-oss gives each rank num_key_value_heads // tp KV heads with no
    replication; MoonViT (Kimi-K3) splits its MLP when its heads divide TP."""
    text, vision = config.get("text_config") or config, config.get("vision_config") or {}
    if config.get("model_type") == "gpt_oss" and text["num_key_value_heads"] % tp:
        return False
    heads, mlp = vision.get("vt_num_attention_heads"), vision.get("vt_intermediate_size")
    return not (heads and mlp and heads % tp == 0 and mlp % tp)


@pytest.mark.parametrize("target, draft, method, k, tp, draft_tp", GRID)
def test_grid_verdicts_follow_the_head_rules_both_ways(target, draft, method, k, tp, draft_tp) -> None:
    """Accepted exactly where the heads divide (a false rejection fails here as surely as a
    false acceptance), and every rejection explained on a spec field."""
    dtp = 1 if draft_tp == "one" else tp
    evaluation = judge(target, draft, method, tp=tp, draft_tp=dtp, k=k)
    draft_config = load_config(draft) if draft else None
    expected = (target, draft) not in INVALID_PAIRS and _divides_heads(load_config(target), tp) and _builds(load_config(target), tp) and (
        draft_config is None or _divides_heads(draft_config, built_draft_tp(method_named(method), tp, dtp)))
    assert evaluation.ok == expected, [f.message for f in evaluation.findings if f.severity.value == "error"]
    if evaluation.ok:
        plan = evaluation.plan
        t_heads = (load_config(target).get("text_config") or load_config(target))["num_attention_heads"]
        assert plan.tensor_parallel_size == tp and plan.target.attention_heads_per_gpu * tp == t_heads
        if plan.draft is not None and draft is not None:
            # every draft's layers split at the target's TP whatever draft TP says (validation/load.py)
            built = built_draft_tp(method_named(method), plan.tensor_parallel_size, plan.draft_tensor_parallel_size)
            assert plan.draft.attention_heads_per_gpu * built == draft_config["num_attention_heads"]
    else:
        errors = [f for f in evaluation.findings if f.severity.value == "error"]
        assert errors and all(f.field.startswith("spec.") and f.message for f in errors)


def test_seed_block5_and_released_drafts_are_valid_at_tp8_with_12_and_8_heads_per_gpu() -> None:
    for draft, heads_per_gpu in (("k3-dspark-block5", 12), ("k3-dspark-released", 8)):
        evaluation = judge("moonshotai__Kimi-K3", draft, "dspark", tp=8, k=5)
        assert evaluation.ok, evaluation.findings
        layout = evaluation.plan.draft
        assert (layout.attention_heads_per_gpu, layout.kv_heads_per_gpu, layout.head_size, layout.num_experts) == (heads_per_gpu, 1, 576, 0)
        assert evaluation.plan.target.attention_heads_per_gpu == 12


@pytest.mark.parametrize("tp", [5, 64])
def test_seed_tp_that_does_not_divide_96_heads_is_invalid(tp: int) -> None:
    assert "target-heads-tp" in codes(judge("moonshotai__Kimi-K3", "k3-dspark-block5", "dspark", tp=tp, k=5))


def test_64_head_draft_under_96_head_target_cannot_run_at_tp12_whatever_the_draft_tp() -> None:
    """vLLM builds the DSpark draft's layers at the target's TP (load_dspark_model's draft TP is
    read by no layer): 64 heads do not split over 12, so draft TP 1 is no way out."""
    one = judge("moonshotai__Kimi-K3", "k3-dspark-released", "dspark", tp=12, draft_tp=1, k=7)
    assert not one.ok and "draft-load-fails" in codes(one)
    forced = judge("moonshotai__Kimi-K3", "k3-dspark-released", "dspark", tp=12, draft_tp=12, k=7)
    assert "draft-heads-tp" in codes(forced)


def test_qwen25_7b_has_no_tp8_and_its_small_draft_has_another_vocab() -> None:
    evaluation = judge("Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-0.5B", "draft_model", tp=8, k=4)
    assert {"target-heads-tp", "vocab-mismatch"} <= codes(evaluation)
    assert any("152064" in f.message and "151936" in f.message for f in evaluation.findings)


def test_qwen25_half_b_14_heads_cannot_run_at_draft_tp4() -> None:
    evaluation = judge("Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-0.5B", "draft_model", tp=4, draft_tp=4, k=4)
    assert "draft-heads-tp" in codes(evaluation)


def test_gpt_oss_heads_times_head_dim_differs_from_hidden_and_is_still_valid() -> None:
    assert judge("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", "eagle3", tp=8, k=3).ok


def test_draft_architecture_vllm_cannot_load_is_rejected() -> None:
    evaluation = judge("moonshotai__Kimi-K3", "specforge__kimi-k3-dspark-5mla", "dspark", tp=8, k=7)
    assert "draft-architecture-unsupported" in codes(evaluation)


def _load_refusal(evaluation, field: str):
    return next((f for f in evaluation.findings if f.code == "draft-load-fails" and f.stage.value == "load"
                 and f.field == field), None)


@pytest.mark.parametrize("draft", ["Qwen__Qwen3-0.6B", "meta-llama__Llama-3.2-1B-Instruct"])
def test_dspark_with_a_dense_draft_is_refused_at_load_as_vllm_fails_there(draft: str) -> None:
    """vLLM's config check accepts it and names it DSparkDraftModel; DeepSeek-V4's DSpark head
    then reads config.hc_mult in __init__ (the meta-device build raises AttributeError)."""
    evaluation = judge("Qwen__Qwen3-8B", draft, "dspark", tp=1, k=3)
    refusal = _load_refusal(evaluation, "spec.draft.config.hc_mult")
    assert not evaluation.ok and refusal and "AttributeError" in refusal.message
    assert any(f.code == "dspark-not-a-dspark-draft" for f in evaluation.findings)


def test_dspark_without_a_draft_model_drafts_from_the_target_and_needs_k() -> None:
    # A DeepSeek-V3 target has no DeepSeek-V4 DSpark head: vLLM fails at load on hc_mult.
    assert _load_refusal(judge("deepseek-ai__DeepSeek-V3", None, "dspark", tp=8, k=3), "spec.target.config.hc_mult")
    assert "k-required" in codes(judge("deepseek-ai__DeepSeek-V3", None, "dspark", tp=8))
    # DeepSeek-V4-Flash as published carries hc_mult but no DSpark head fields.
    assert _load_refusal(judge("deepseek-ai__DeepSeek-V4-Flash", None, "dspark", tp=8, k=3),
                         "spec.target.config.dspark_target_layer_ids")


def test_a_dspark_draft_with_deepseek_v4_head_fields_builds() -> None:
    """Every field DSparkDeepseekV4Model reads is present: no load finding."""
    target = load_config("deepseek-ai__DeepSeek-V4-Flash")
    head = {**target, "architectures": ["DSparkDraftModel"], "num_hidden_layers": 2,
            "dspark_target_layer_ids": [1, 20, 40], "dspark_markov_rank": 256}
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/v4"}, "draft": {"model": "org/v4-dspark", "method": "dspark", "numSpeculativeTokens": 3},
        "parallelism": {"tensorParallelSize": 8}})
    evaluation = evaluate(spec, ModelInputs(target), ModelInputs(head))
    assert not [f for f in evaluation.findings if f.stage.value == "load"]


def test_draft_tp_other_than_one_or_target_tp_is_rejected() -> None:
    evaluation = judge("meta-llama__Llama-3.1-70B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model", tp=8, draft_tp=4, k=4)
    assert "draft-tp-choice" in codes(evaluation)


def test_pipeline_parallel_is_refused_for_dspark_and_mtp_but_planned_for_eagle3() -> None:
    assert "pipeline-parallel-method" in codes(judge("moonshotai__Kimi-K3", "k3-dspark-block5", "dspark", tp=8, pp=2, k=5))
    assert "pipeline-parallel-method" in codes(judge("deepseek-ai__DeepSeek-V3", None, "mtp", tp=8, pp=2, k=1))
    assert judge("meta-llama__Llama-3.1-70B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", tp=4, pp=2, k=3).ok


def test_k_defaults_from_dspark_block_size_and_is_required_where_nothing_provides_it() -> None:
    assert judge("moonshotai__Kimi-K3", "k3-dspark-released", "dspark", tp=8).plan.num_speculative_tokens == 7
    assert "k-required" in codes(judge("meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model", tp=1))


def test_mtp_without_a_draft_model_needs_k_because_vllm_needs_it() -> None:
    assert "k-required" in codes(judge("deepseek-ai__DeepSeek-V3", None, "mtp", tp=8))


def test_mtp_needs_a_target_with_mtp_layers_until_0_34() -> None:
    """0.32.0/0.33.0 refuse mtp on a target without MTP layers; 0.34.0's MTPSpeculatorConfig
    checks nothing for an explicit method, but the target drafting itself fails to build."""
    assert judge("deepseek-ai__DeepSeek-V3", None, "mtp", tp=8, k=1).ok
    for release in ("0.32.0", "0.33.0"):
        assert "mtp-no-layers" in codes(judge("moonshotai__Kimi-K3", None, "mtp", tp=8, k=1, vllmVersion=release))
        assert "mtp-unsupported-target" in codes(judge("meta-llama__Llama-3.1-8B-Instruct", None, "mtp", tp=1, k=1,
                                                       vllmVersion=release))
    newest = judge("meta-llama__Llama-3.1-8B-Instruct", None, "mtp", tp=1, k=1, vllmVersion="0.34.0")
    assert "mtp-target-without-mtp-layers" in codes(newest)  # the config passes; the build fails


def test_speculative_config_passthrough_refuses_owned_and_unknown_keys() -> None:
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "t"},
        "draft": {"method": "eagle3", "model": "d", "numSpeculativeTokens": 3,
                  "speculativeConfig": {"num_speculative_tokens": 9, "no_such_key": 1, "draft_sample_method": "greedy"}}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(load_config("specforge__llama3-8B-eagle3")))
    fields = {f.field for f in evaluation.findings if f.severity.value == "error"}
    assert fields == {"spec.draft.speculativeConfig.num_speculative_tokens", "spec.draft.speculativeConfig.no_such_key"}


def test_plan_speculative_config_is_what_vllm_gets() -> None:
    from specdeploy.vllm import DEFAULT_VERSION

    evaluation = judge("moonshotai__Kimi-K3", "k3-dspark-block5", "dspark", tp=8, k=5)
    expected = {"method": "dspark", "model": "org/k3-dspark-block5", "num_speculative_tokens": 5, "draft_tensor_parallel_size": 8}
    assert evaluation.speculative_config == expected == evaluation.to_dict()["plan"]["speculativeConfig"]
    assert evaluation.to_dict()["vllmVersion"] == evaluation.plan.vllm_version == DEFAULT_VERSION


def test_speculators_eagle3_draft_is_valid_and_needs_k_set() -> None:
    assert judge("meta-llama__Llama-3.1-8B-Instruct", "speculators-llama3.1-8b-eagle3", "eagle3", tp=8, k=3).ok
    assert "k-required" in codes(judge("meta-llama__Llama-3.1-8B-Instruct", "speculators-llama3.1-8b-eagle3", "eagle3", tp=8))


def test_old_format_medusa_is_read_the_way_vllm_rewrites_it() -> None:
    """No model_type, no vocab_size, medusa_num_* keys: vLLM forces model_type medusa."""
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", "medusa-old-format-vicuna", "medusa", tp=2, k=3,
                       vllmVersion=MEDUSA_RELEASE)
    assert evaluation.ok and evaluation.plan.draft.attention_heads_per_gpu == 0


def test_mlp_speculator_is_refused_for_its_architecture_not_a_missing_head_count() -> None:
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", "mlp-speculator-llama3-8b", "mlp_speculator", tp=1, k=3,
                       vllmVersion=MEDUSA_RELEASE)
    assert codes(evaluation) == {"draft-architecture-unsupported"}


@pytest.mark.parametrize("length, ok", [(2048, True), (4096, False)])
def test_speculative_max_model_len_is_bounded_by_the_draft(length: int, ok: bool) -> None:
    """vLLM: speculative max_model_len <= min(draft's, target's) (checked against vLLM 0.32)."""
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "t"}, "parallelism": {"tensorParallelSize": 1},
        "draft": {"method": "eagle3", "model": "d", "numSpeculativeTokens": 3, "speculativeConfig": {"max_model_len": length}}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(load_config("specforge__llama3-8B-eagle3")))
    assert evaluation.ok is ok
    if not ok:
        assert {f.field for f in evaluation.findings if f.severity.value == "error"} == {"spec.draft.speculativeConfig.max_model_len"}


def test_max_model_len_beyond_what_vllm_derives_is_refused_with_the_limit() -> None:
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", None, "ngram", tp=1, k=3, serving={"maxModelLen": 200000})
    finding = next(f for f in evaluation.findings if f.code == "max-model-len-too-long")
    assert finding.field == "spec.serving.maxModelLen" and "131072" in finding.message


@pytest.mark.parametrize("extra, field", [
    ({"draft_sample_method": "nucleus"}, "draft_sample_method"),
    ({"parallel_drafting": "maybe"}, "parallel_drafting"),
    ({"prompt_lookup_max": 0}, "prompt_lookup_max"),
    ({"dspark_draft_topk": 4}, "dspark_draft_topk"),
    ({"synthetic_acceptance_length": 2.5}, "synthetic_acceptance_length"),
    ({"rejection_sample_method": "synthetic"}, "rejection_sample_method"),
    ({"use_heterogeneous_vocab": True}, "use_heterogeneous_vocab"),
])
def test_speculative_config_values_vllm_refuses_are_findings_on_that_key(extra: dict, field: str) -> None:
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "t"}, "parallelism": {"tensorParallelSize": 1},
        "draft": {"method": "eagle3", "model": "d", "numSpeculativeTokens": 3, "speculativeConfig": extra}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(load_config("specforge__llama3-8B-eagle3")))
    assert not evaluation.ok
    assert {f.field for f in evaluation.findings if f.severity.value == "error"} == {f"spec.draft.speculativeConfig.{field}"}


def test_speculative_config_values_are_coerced_as_vllm_coerces_them() -> None:
    """vLLM's SpeculativeConfig is a lax pydantic dataclass: "yes" is a valid boolean there."""
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "t"}, "parallelism": {"tensorParallelSize": 1},
        "draft": {"method": "eagle3", "model": "d", "numSpeculativeTokens": 3, "speculativeConfig": {"parallel_drafting": "yes", "prompt_lookup_max": "4"}}})
    assert evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(load_config("specforge__llama3-8B-eagle3"))).ok


def test_recipe_speculative_config_keys_pass() -> None:
    """The Kimi-K3 recipe's pass-through keys are accepted as they are."""
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "t"}, "parallelism": {"tensorParallelSize": 8},
        "draft": {"method": "dspark", "model": "d", "numSpeculativeTokens": 7, "speculativeConfig": {
            "attention_backend": "FLASHINFER_MLA", "draft_sample_method": "probabilistic", "rejection_sample_method": "block"}}})
    assert evaluate(spec, ModelInputs(load_config("moonshotai__Kimi-K3")), ModelInputs(load_config("k3-dspark-released"))).ok


def test_suffix_decoding_bounds_apply_only_to_suffix() -> None:
    def verdict(method: str) -> Evaluation:
        spec = SpeculativeDeploymentSpec.model_validate({
            "target": {"model": "t"}, "parallelism": {"tensorParallelSize": 1},
            "draft": {"method": method, "numSpeculativeTokens": 3, "speculativeConfig": {"suffix_decoding_min_token_prob": 1.5}}})
        return evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), None)
    assert "speculative-config-range" in codes(verdict("suffix"))
    assert verdict("ngram").ok
