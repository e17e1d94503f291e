"""Memory plans a person can check by hand (the README walks through the same numbers)."""

from __future__ import annotations

import pytest

from specdeploy.planning.gpus import UnknownGpuError, lookup_gpu
from specdeploy.planning.kv_cache import attention_bytes_per_token, layer_caches
from specdeploy.planning.memory import GIB, estimate_parameters
from specdeploy.geometry import read_geometry
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import load_config
from tests.unit.test_validation import judge

DEFAULT_FACTS = rule_set(DEFAULT_VERSION)


def geometry(name: str):
    return read_geometry(load_config(name), "t", DEFAULT_FACTS)[0]


def test_llama_70b_parameter_estimate_matches_its_published_size() -> None:
    plain, routed = estimate_parameters(geometry("meta-llama__Llama-3.1-70B-Instruct"))
    assert routed == 0 and 70.0e9 < plain < 71.0e9


def _per_token(model, tp: int, kv_dtype: str = "auto") -> int:
    return attention_bytes_per_token(layer_caches("ngram", model, None, tp, None, 1, kv_dtype, 0))


def test_kv_bytes_per_token_match_vllm_kv_cache_interface_numbers() -> None:
    llama = geometry("meta-llama__Llama-3.1-70B-Instruct")
    assert _per_token(llama, 1) == 80 * 8 * 256 * 2  # 327,680
    assert _per_token(llama, 8) == 40_960  # one KV head per rank
    k3 = geometry("moonshotai__Kimi-K3")
    assert _per_token(k3, 8) == 24 * 1152 == _per_token(k3, 1)  # MLA latent replicated
    assert _per_token(k3, 8, "fp8") == 24 * 576
    draft = geometry("k3-dspark-block5")
    assert _per_token(draft, 8) == 5 * 1152


def test_llama_70b_bf16_on_h100_needs_four_gpus_and_says_why_two_do_not_fit() -> None:
    evaluation = judge("meta-llama__Llama-3.1-70B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3,
                       tp="auto", pp="auto", resources={"gpu": {"product": "H100-80GB"}}, serving={"maxModelLen": 32768})
    plan = evaluation.plan
    assert evaluation.ok and (plan.tensor_parallel_size, plan.pipeline_parallel_size, plan.nodes_per_replica) == (4, 1, 1)
    rejected = {(c.tensor_parallel_size, c.pipeline_parallel_size): c.reason for c in plan.candidates if not c.accepted}
    assert "GiB per GPU" in rejected[(2, 1)] and "GiB per GPU" in rejected[(1, 1)]
    memory = plan.memory
    weights_per_gpu = 70.55e9 * 2 / 4 / GIB
    assert abs(memory.target_weights_gib - weights_per_gpu) < 0.5
    assert memory.fits and memory.required_gib <= 0.9 * lookup_gpu("H100-80GB").memory_gib


def test_kimi_k3_on_8_h200_cannot_fit_one_node_and_plans_several_without_pipeline_parallel() -> None:
    evaluation = judge("moonshotai__Kimi-K3", "k3-dspark-block5", "dspark", k=5, tp="auto", pp="auto",
                       resources={"gpu": {"product": "H200"}}, serving={"maxModelLen": 262144})
    plan = evaluation.plan
    assert evaluation.ok and plan.nodes_per_replica >= 2 and plan.pipeline_parallel_size == 1
    tp8 = next(c for c in plan.candidates if c.tensor_parallel_size == 8)
    assert not tp8.accepted and "GiB per GPU" in tp8.reason
    total_weights_tb = plan.memory.target_weights_gib * plan.tensor_parallel_size * GIB / 1e12
    assert 1.4 < total_weights_tb < 1.6  # ~2.8T params, MXFP4 experts


def test_explicit_layout_that_does_not_fit_is_an_error_naming_the_numbers() -> None:
    evaluation = judge("meta-llama__Llama-3.1-70B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp=1,
                       resources={"gpu": {"product": "A100-40GB"}})
    finding = next(f for f in evaluation.findings if f.code == "memory-does-not-fit")
    assert finding.field == "spec.resources.gpu" and "GiB" in finding.message


@pytest.mark.parametrize(("version", "tokens"), [("0.33.0", 16), ("0.34.0", 64)])
def test_min_concurrent_sequences_grows_the_kv_cache_linearly(version: str, tokens: int) -> None:
    """Blocks of the release's default size (CacheConfig.DEFAULT_BLOCK_SIZE: 16, 64 from 0.34.0),
    which the plan states with the other defaults it assumed."""
    one = judge("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp=1, vllmVersion=version,
                resources={"gpu": {"product": "H100-80GB"}}, serving={"maxModelLen": 8192}).plan.memory
    four = judge("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp=1, vllmVersion=version,
                 resources={"gpu": {"product": "H100-80GB"}}, serving={"maxModelLen": 8192, "minConcurrentSequences": 4}).plan.memory
    # 4 requests of 8192 / tokens blocks each, but one null block in total (BlockPool holds it
    # back): 33 layers (32 + the EAGLE3 layer, at the target's TP) x tokens x 4,096 B.
    block = 33 * tokens * 8 * 256 * 2
    assert one.kv_cache_bytes == (8192 // tokens + 1) * block
    assert four.kv_cache_bytes == (4 * 8192 // tokens + 1) * block
    assert one.to_dict()["releaseDefaults"]["defaultBlockSize"] == one.block_size == tokens


def test_gpu_catalog_aliases_and_clear_errors() -> None:
    assert lookup_gpu("h200").key == "H200-141GB" and lookup_gpu("B200").key == "B200-180GB"
    with pytest.raises(UnknownGpuError, match="ambiguous: name one of A100-40GB, A100-80GB"):
        lookup_gpu("A100")
    with pytest.raises(UnknownGpuError, match="unknown GPU 'T4'.*or set memoryGiB"):
        lookup_gpu("T4")


def test_multi_node_layouts_keep_each_tensor_parallel_group_inside_a_node() -> None:
    """vLLM numbers ranks TP-first: 2 nodes x 5 GPUs with TP 2 would split a TP group across nodes."""
    plan = judge("meta-llama__Llama-3.1-70B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp="auto", pp="auto",
                 resources={"gpu": {"product": "L4-24GB"}}, serving={"maxModelLen": 131072}).plan
    assert plan.nodes_per_replica > 1
    assert plan.gpus_per_pod % plan.tensor_parallel_size == 0 or plan.tensor_parallel_size % plan.gpus_per_pod == 0
    rejected = [c for c in plan.candidates if (c.tensor_parallel_size, c.pipeline_parallel_size) == (2, 5)]
    assert rejected and not rejected[0].accepted and "tensor-parallel group" in rejected[0].reason


@pytest.mark.parametrize(("gpu", "resource"), [
    ({"product": "MI300X"}, "amd.com/gpu"),
    ({"product": "H200"}, "nvidia.com/gpu"),
    ({"memoryGiB": 100}, "nvidia.com/gpu"),
    ({"product": "MI300X", "resourceName": "example.com/gpu"}, "example.com/gpu"),
])
def test_gpu_vendor_decides_the_default_resource_name(gpu: dict, resource: str) -> None:
    plan = judge("meta-llama__Llama-3.1-8B-Instruct", None, "ngram", k=3, resources={"gpu": gpu}).plan
    assert plan.gpu_resource_name == resource


def test_an_unknown_gpu_product_is_a_plan_finding_even_with_memory_given() -> None:
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", None, "ngram", k=3,
                       resources={"gpu": {"product": "H1000", "memoryGiB": 80}})
    (finding,) = [f for f in evaluation.findings if f.code == "gpu-unknown"]
    assert finding.stage.value == "plan" and finding.field == "spec.resources.gpu.product"
    assert evaluation.validated and evaluation.plan is None and not evaluation.ok


def test_a_layout_that_does_not_fit_is_planned_false_not_validated_false() -> None:
    """Llama-3.1-70B in bf16 cannot fit one A100-40GB: vLLM would accept the config, we cannot plan it."""
    evaluation = judge("meta-llama__Llama-3.1-70B-Instruct", None, "ngram", k=3, tp=1, pp=1,
                       resources={"gpu": {"product": "A100-40GB"}})
    assert evaluation.validated and not evaluation.ok and evaluation.plan is None
    stages = {f.code: f.stage.value for f in evaluation.findings if f.severity.value == "error"}
    assert stages == {"memory-does-not-fit": "plan"}


def test_an_explicit_pipeline_size_no_layout_can_hold_is_a_finding_not_a_silent_refusal() -> None:
    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate
    from tests.conftest import load_config

    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": "Qwen/Qwen3-8B"}, "draft": {"method": "ngram", "numSpeculativeTokens": 3},
                                                     "parallelism": {"pipelineParallelSize": 2**63}})
    evaluation = evaluate(spec, ModelInputs(load_config("Qwen__Qwen3-8B")), None)
    errors = [f for f in evaluation.findings if f.severity.value == "error"]
    assert not evaluation.ok and [(f.code, f.field) for f in errors] == [("no-layout", "spec.parallelism.pipelineParallelSize")]
    assert "128 GPUs (8 per node x 16 nodes)" in errors[0].message
