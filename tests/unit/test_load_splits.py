"""Sizes a model's own layers split over TP beyond its attention heads, as vLLM's build checks
them (validation/load.py, vllm/tp_splits.py, vllm/fp8_blocks.py): FP8 weight blocks, the
experts' width, the padded vocabulary and vision towers. Each TP here was built by vLLM's own
classes on the meta device (tests/parity LOAD_SPLIT_CASES) in 0.32.0, 0.33.0 and 0.34.0."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate
from tests.conftest import load_config
from tests.unit.test_validation import judge

TP_FIELD = "spec.parallelism.tensorParallelSize"


def _alone(config: dict[str, Any], tp: int) -> Evaluation:
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "draft": {"method": "ngram", "numSpeculativeTokens": 3},
        "parallelism": {"tensorParallelSize": tp}})
    return evaluate(spec, ModelInputs(config), None)


def _load_errors(evaluation: Evaluation, code: str = "target-load-fails") -> list[str]:
    return [f.message for f in evaluation.findings if f.code == code and f.severity.value == "error"]


def test_fp8_qwen3_32b_at_tp_16_leaves_down_proj_a_partial_weight_block() -> None:
    """25600 / 16 = 1600 is not whole 128-wide blocks (RowParallelLinear input, block_k); the
    same checkpoint in BF16 builds at TP 16, and the FP8 one at TP 8 (3200)."""
    fp8 = load_config("fp8-qwen3-32b")
    [message] = _load_errors(_alone(fp8, 16))
    assert "Qwen3ForCausalLM's mlp.down_proj" in message and "25600 / TP 16 = 1600" in message
    assert "block_k 128" in message and "validate_fp8_block_shape" in message
    assert next(f for f in _alone(fp8, 16).findings if f.code == "target-load-fails").field == TP_FIELD
    assert _alone(fp8, 8).ok
    assert _alone({k: v for k, v in fp8.items() if k != "quantization_config"}, 16).ok


def test_fp8_moe_experts_refine_to_32_wide_blocks_at_tp_8_and_cannot_at_tp_16() -> None:
    """768-wide experts: 96 per rank at TP 8 takes 32x32 blocks (refine_fp8_moe_block_shape);
    48 at TP 16 leaves gcd 16, below the 32 vLLM refines to."""
    fp8 = load_config("fp8-qwen3-30b-a3b")
    assert _alone(fp8, 8).ok
    [message] = _load_errors(_alone(fp8, 16))
    assert "mlp.experts" in message and "768 / TP 16 = 48" in message and "refine_fp8_moe_block_shape" in message


def test_deepseek_v3_in_fp8_builds_at_tp_16_and_not_at_tp_32() -> None:
    """TP 32 divides its 128 heads, but its dense layers' down_proj (18432 / 32 = 576) and its
    shared expert's (2048 / 32 = 64) are not whole 128-blocks; its 64-wide routed experts refine."""
    config = load_config("deepseek-ai__DeepSeek-V3")
    assert _alone(config, 16).ok
    messages = _load_errors(_alone(config, 32))
    assert [m.split("'s ")[1].split(" ")[0] for m in messages] == ["mlp.down_proj", "mlp.shared_experts.down_proj"]
    assert "= 576" in messages[0] and "= 64" in messages[1]


def test_fp8_layers_the_checkpoint_leaves_unquantized_are_not_block_checked() -> None:
    """Fp8Config.get_quant_method builds a layer named in modules_to_not_convert unquantized
    (exact names): every down_proj named builds at TP 16, one left quantized still fails."""
    fp8 = load_config("fp8-qwen3-32b")
    names = [f"model.layers.{i}.mlp.down_proj" for i in range(fp8["num_hidden_layers"])]
    fp8["quantization_config"] = {**fp8["quantization_config"], "modules_to_not_convert": names}
    assert _alone(fp8, 16).ok
    fp8["quantization_config"]["modules_to_not_convert"] = names[1:]
    assert "mlp.down_proj" in _load_errors(_alone(fp8, 16))[0]


def test_an_fp8_draft_splits_at_the_targets_tp_so_draft_tp_1_does_not_save_it() -> None:
    ok = judge("Qwen__Qwen3-235B-A22B", "fp8-qwen3-32b", "draft_model", tp=8, draft_tp=1, k=3)
    assert ok.ok
    refused = judge("Qwen__Qwen3-235B-A22B", "fp8-qwen3-32b", "draft_model", tp=16, draft_tp=1, k=3)
    [message] = _load_errors(refused, "draft-load-fails")
    assert "for the draft" in message and "mlp.down_proj" in message and "= 1600" in message
    assert not _load_errors(refused)  # the BF16 target builds at TP 16


@pytest.mark.parametrize("tp, builds", [(4, True), (8, False)])
def test_experts_whose_width_tp_does_not_split_fail_whatever_the_quantization(tp: int, builds: bool) -> None:
    evaluation = _alone(load_config("moe-width-1100"), tp)
    assert evaluation.ok == builds
    if not builds:
        [message] = _load_errors(evaluation)
        assert "1100 is not divisible by TP 8" in message and "FusedMoEConfig" in message


@pytest.mark.parametrize("name, tp, builds", [
    ("moe-4-experts", 4, True), ("moe-4-experts", 8, False),
    ("ernie-4.5-moe-8-experts", 8, True), ("ernie-4.5-moe-8-experts", 16, False)])
def test_moe_blocks_that_refuse_more_ranks_than_experts(name: str, tp: int, builds: bool) -> None:
    """Qwen3MoeSparseMoeBlock and Ernie4_5_MoeMoE raise "Tensor parallel size N is greater than
    the number of experts M" while vLLM builds them; the count is read under the config's own
    name (moe_num_experts) or transformers' (num_local_experts for Qwen3-MoE's num_experts)."""
    evaluation = _alone(load_config(name), tp)
    assert evaluation.ok == builds
    if not builds:
        [message] = _load_errors(evaluation)
        assert f"TP {tp} is greater than its {tp // 2} routed experts" in message and "MoE" in message


def test_expert_parallel_does_not_save_a_draft_with_fewer_experts_than_ranks() -> None:
    """The MoE block compares the TP size, not the experts' TP size: a 4-expert draft at the
    target's TP 8 fails with --enable-expert-parallel too, as the draft's own finding."""
    evaluation = judge("Qwen__Qwen3-32B", "moe-4-experts", "draft_model", tp=8, draft_tp=1, k=3,
                       vllm={"extraArgs": ["--enable-expert-parallel"]})
    [message] = _load_errors(evaluation, "draft-load-fails")
    assert "for the draft" in message and "TP 8 is greater than its 4 routed experts" in message
    assert not _load_errors(evaluation)


def test_a_list_of_expert_counts_is_judged_by_its_largest() -> None:
    """ERNIE-4.5-VL writes moe_num_experts per modality; Ernie4_5_VLMoeMoE compares the TP with
    max(moe_num_experts)."""
    from specdeploy.vllm.tp_splits import expert_count_failures

    arch = ("Ernie4_5_VLMoeForConditionalGeneration",)
    assert expert_count_failures(arch, {"moe_num_experts": [8, 16]}, 16) == []
    [message] = expert_count_failures(arch, {"moe_num_experts": [8, 16]}, 32)
    assert "TP 32 is greater than its 16 routed experts" in message
    assert expert_count_failures(("MixtralForCausalLM",), {"num_local_experts": 8}, 16) == []


@pytest.mark.parametrize("name, tp, builds", [
    ("dense-width-12300", 4, True), ("dense-width-12300", 8, False),
    ("deepseek-v2-lite-dense-width-10920", 8, True), ("deepseek-v2-lite-dense-width-10920", 16, False),
    ("moe-unused-dense-width-6150", 8, True)])
def test_a_dense_mlps_width_must_split_over_tp(name: str, tp: int, builds: bool) -> None:
    """gate_up_proj and down_proj split intermediate_size: a dense model's, and a MoE's leading
    dense layers (DeepSeek-V2-Lite's first_k_dense_replace 1); a MoE with every layer sparse
    builds no dense MLP, so its intermediate_size is not split."""
    evaluation = _alone(load_config(name), tp)
    assert evaluation.ok == builds
    if not builds:
        [message] = _load_errors(evaluation)
        assert "dense MLP's intermediate_size" in message and f"not divisible by TP {tp}" in message


def test_a_qwen_moes_dense_layers_split_their_width() -> None:
    """Qwen2/3-MoE build Qwen3MoeMLP(intermediate_size) for mlp_only_layers and for the layers
    decoder_sparse_step skips."""
    from specdeploy.vllm.tp_splits import dense_mlp_failures

    sparse = {**load_config("moe-unused-dense-width-6150")}
    assert dense_mlp_failures(sparse, 8) == []
    assert dense_mlp_failures({**sparse, "mlp_only_layers": [0]}, 8)
    assert dense_mlp_failures({**sparse, "decoder_sparse_step": 2}, 8)


def test_an_eagle3_heads_mlp_splits_at_the_targets_tp() -> None:
    ok = judge("meta-llama__Llama-3.1-8B-Instruct", "eagle3-llama3-8b-width-14340", "eagle3", tp=4, draft_tp=1, k=3)
    assert ok.ok
    refused = judge("meta-llama__Llama-3.1-8B-Instruct", "eagle3-llama3-8b-width-14340", "eagle3", tp=8, draft_tp=1, k=3)
    [message] = _load_errors(refused, "draft-load-fails")
    assert "for the draft" in message and "intermediate_size 14340 is not divisible by TP 8" in message


@pytest.mark.parametrize("heads, tp, builds", [(16, 16, True), (12, 4, True), (12, 8, False)])
def test_kimi_vls_moonvit_splits_its_heads_at_any_tp(heads: int, tp: int, builds: bool) -> None:
    """Kimi-VL builds moonvit.py's tower, which has no data-parallel fallback by heads (unlike
    Kimi-K2.5/K3's): a 12-head tower fails at TP 8 ("12 is not divisible by 8")."""
    config = load_config("vl-kimi-vl-a3b")
    config["vision_config"] = {**config["vision_config"], "num_attention_heads": heads}
    evaluation = _alone(config, tp)
    assert evaluation.ok == builds
    assert builds or "vision tower heads: 12 is not divisible by TP 8" in _load_errors(evaluation)[0]


def test_internvits_mlp_splits_even_where_its_attention_runs_data_parallel() -> None:
    config = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
              "llm_config": load_config("Qwen__Qwen3-32B"),
              "vision_config": {"hidden_size": 3200, "num_attention_heads": 25, "intermediate_size": 12800}}
    assert _alone(config, 8).ok  # 25 heads: attention data parallel; 12800 / 8 splits
    config["vision_config"]["intermediate_size"] = 12000  # TP 64 splits the LLM, not 12000
    [message] = _load_errors(_alone(config, 64))
    assert "vision tower MLP (InternViT): 12000 is not divisible by TP 64" in message and "InternMLP" in message


@pytest.mark.parametrize("extra_args, refused", [
    ([], True), (["--enable-expert-parallel"], False), (["-ep"], False),
    (["-ep", "--no-enable-expert-parallel"], True)])
def test_expert_parallel_keeps_experts_whole_so_their_width_is_not_split(extra_args: list[str], refused: bool) -> None:
    """With the user's --enable-expert-parallel the experts' TP size is 1: neither the width
    assert nor the FP8 expert blocks apply; the last flag wins, as argparse reads it."""
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "draft": {"method": "ngram", "numSpeculativeTokens": 3},
        "parallelism": {"tensorParallelSize": 16}, "vllm": {"extraArgs": extra_args}})
    for name in ("moe-width-1100", "fp8-qwen3-30b-a3b"):
        evaluation = evaluate(spec, ModelInputs(load_config(name)), None)
        assert bool([m for m in _load_errors(evaluation) if "mlp.experts" in m]) == refused


def test_the_padded_vocabulary_must_split_over_tp() -> None:
    """Qwen3.6-27B with a tower TP 12 splits: its 248320-token vocabulary still does not."""
    config = load_config("nvidia__Qwen3.6-27B-NVFP4")
    config["vision_config"] = {**config["vision_config"], "num_heads": 24, "intermediate_size": 4320}
    message = _load_errors(_alone(config, 12))[0]
    assert "embed_tokens" in message and "248320" in message and "VocabParallelEmbedding" in message


@pytest.mark.parametrize("name, tp, builds", [("q36", 12, False), ("q36", 8, True), ("q35", 32, True)])
def test_gated_delta_net_layers_split_their_key_width_and_value_heads(name: str, tp: int, builds: bool) -> None:
    """With the tower and the vocabulary made to split at TP 12, Qwen3.6-27B's 16 key heads of 128
    still do not (2048 / 12); Qwen3.5-122B's, at TP 32, do (2048 / 32 = 64)."""
    config = load_config("nvidia__Qwen3.6-27B-NVFP4" if name == "q36" else "Qwen__Qwen3.5-122B-A10B")
    config["vision_config"] = {**config["vision_config"], "num_heads": 96, "intermediate_size": 4608}
    config["text_config"] = {**config["text_config"], "vocab_size": 248832}
    evaluation = _alone(config, tp)
    assert evaluation.ok == builds, _load_errors(evaluation)
    assert builds or "key width 2048 is not divisible by TP 12" in _load_errors(evaluation)[0]


@pytest.mark.parametrize("name, tp, builds, size", [
    ("nvidia__Qwen3.6-27B-NVFP4", 8, True, None),
    ("nvidia__Qwen3.6-27B-NVFP4", 12, False, "vision tower heads: 16 is not divisible by TP 12"),
    ("vl-glm-4.5v", 4, True, None),
    ("vl-glm-4.5v", 8, False, "vision tower heads: 12 is not divisible by TP 8"),
    ("vl-qwen2.5-vl-3b", 4, True, None),
    ("vl-qwen2.5-vl-3b", 8, False, "vision tower MLP: 3420 is not divisible by TP 8"),
    ("vl-gemma-3-27b", 16, True, None),
    ("vl-gemma-3-27b", 32, False, "vision tower heads: 16 is not divisible by TP 32"),
    ("vl-qwen3-vl-235b-a22b", 16, True, None),
    ("vl-qwen3-vl-235b-a22b", 32, False, "vision tower heads: 16 is not divisible by TP 32"),
    ("vl-mistral-small-3.1-24b", 16, True, None),
    ("vl-mistral-small-3.1-24b", 32, False, "vision tower heads: 16 is not divisible by TP 32"),
    ("meta-llama__Llama-4-Scout-17B-16E-Instruct", 8, True, None),  # no vision_config: the class defaults
])
def test_vision_towers_split_over_the_llms_tp(name: str, tp: int, builds: bool, size: str | None) -> None:
    """These towers run tensor parallel whatever their heads (is_vit_use_data_parallel() without
    heads; specdeploy never sets mm_encoder_tp_mode), so a TP the LLM accepts can fail there."""
    evaluation = _alone(load_config(name), tp)
    assert evaluation.ok == builds
    if size:
        message = next(m for m in _load_errors(evaluation) if "vision tower" in m)
        assert size in message and "model_executor/models/" in message
