"""config.json -> Geometry over every real config, and the MLA rules of the seed (vLLM PR #54005)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig, DeepseekV2Config

from specdeploy.findings import MAX_MESSAGE
from specdeploy.geometry import read_geometry
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from specdeploy.geometry.mla_configs import K3DSparkConfig
from tests.conftest import MODEL_CONFIGS, SYNTHETIC, load_config

DEFAULT_FACTS = rule_set(DEFAULT_VERSION)

ALL_REAL = sorted(p.stem for p in MODEL_CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", ALL_REAL)
def test_every_real_config_reads_into_a_consistent_geometry(name: str) -> None:
    raw = load_config(name)
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert findings == [] and geometry is not None
    text = raw.get("text_config", raw)
    assert geometry.num_attention_heads == text["num_attention_heads"]
    assert geometry.vocab_size == text["vocab_size"]
    if geometry.uses_mla:
        assert geometry.head_size == text["kv_lora_rank"] + text["qk_rope_head_dim"]
    else:
        assert geometry.num_kv_heads == text.get("num_key_value_heads", text["num_attention_heads"])
        assert geometry.head_size == (text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])


def test_kimi_k3_reads_its_nested_text_config_as_mla_with_latent_moe() -> None:
    geometry, _ = read_geometry(load_config("moonshotai__Kimi-K3"), "t", DEFAULT_FACTS)
    assert (geometry.num_attention_heads, geometry.head_size, geometry.uses_mla) == (96, 576, True)
    assert geometry.num_kv_cache_layers == 24 and geometry.num_state_layers == 69
    assert geometry.num_experts == 896 and geometry.expert_hidden_size == 3584


def test_gpt_oss_head_dim_is_taken_from_the_config_not_hidden_over_heads() -> None:
    geometry, _ = read_geometry(load_config("openai__gpt-oss-120b"), "t", DEFAULT_FACTS)
    assert geometry.head_size == 64 and geometry.hidden_size // geometry.num_attention_heads == 45


def test_a_qwen3_config_with_mla_fields_is_not_mla_because_vllm_decides_by_model_type() -> None:
    geometry, _ = read_geometry(load_config("specforge__kimi-k3-dspark-5mla"), "t", DEFAULT_FACTS)
    assert geometry.uses_mla is False and geometry.num_kv_heads == 1 and geometry.head_size == 192


@pytest.mark.parametrize("layout, heads", [("k3-dspark-released", 64), ("k3-dspark-block5", 96)])
def test_k3_dspark_drafts_parse_as_dense_mla_whatever_hidden_over_heads(layout: str, heads: int) -> None:
    raw = load_config(layout)
    config = AutoConfig.for_model(**raw)
    assert isinstance(config, K3DSparkConfig)
    assert (config.qk_head_dim, config.head_dim, config.n_routed_experts) == (192, 64, 0)
    assert config.rope_parameters["rope_type"] == "default"
    geometry, findings = read_geometry(raw, "spec.draft.config", DEFAULT_FACTS)
    assert findings == []
    assert (geometry.num_attention_heads, geometry.head_size, geometry.num_experts, geometry.uses_mla) == (heads, 576, 0, True)


def test_the_mha_rule_that_caused_the_seed_bug_still_exists_in_deepseek_v2() -> None:
    """Guards the premise: V2's validator rejects 7168/96, so K3DSparkConfig must not use it."""
    with pytest.raises(Exception, match="not a multiple of the number of attention heads"):
        DeepseekV2Config(hidden_size=7168, num_attention_heads=96)


@pytest.mark.parametrize("bad", sorted(p.stem for p in SYNTHETIC.glob("k3-dspark-bad-*.json")))
def test_each_mla_dspark_rejection_is_a_finding_naming_mla_dspark(bad: str) -> None:
    geometry, findings = read_geometry(load_config(bad), "spec.draft.config", DEFAULT_FACTS)
    assert geometry is None
    assert [f.code for f in findings] == ["config-rejected"]
    # The finding names the key the bad fixture changed from the released config, not the whole config.
    released, raw = load_config("k3-dspark-released"), load_config(bad)
    changed = {key for key in raw if raw[key] != released.get(key)}
    assert "MLA DSpark" in findings[0].message
    if findings[0].field == "spec.draft.config":  # no one key alone is at fault: the message names them
        assert any(key in findings[0].message for key in changed), findings[0].message
    else:
        assert findings[0].field.removeprefix("spec.draft.config.") in changed, (findings[0].field, changed)


def test_missing_head_count_is_a_clear_finding() -> None:
    raw = json.loads(json.dumps(load_config("Qwen__Qwen3-8B")))
    del raw["num_attention_heads"]
    raw["model_type"] = "unknown_family"
    geometry, findings = read_geometry(raw, "spec.draft.config", DEFAULT_FACTS)
    assert geometry is None
    assert findings[0].field == "spec.draft.config.num_attention_heads" and "positive integer" in findings[0].message


def test_speculators_format_draft_reads_its_transformer_layer_and_vllm_architecture() -> None:
    geometry, findings = read_geometry(load_config("speculators-llama3.1-8b-eagle3"), "spec.draft.config", DEFAULT_FACTS)
    assert findings == []
    assert geometry.model_type == "speculators" and geometry.architectures == ("Eagle3LlamaForCausalLM",)
    assert (geometry.num_attention_heads, geometry.num_kv_heads, geometry.num_layers, geometry.draft_vocab_size) == (32, 8, 1, 32000)
    assert geometry.n_predict is None  # vLLM does not default k from speculators' proposal count


def test_speculators_algorithm_vllm_does_not_know_is_rejected_by_name() -> None:
    raw = json.loads(json.dumps(load_config("speculators-llama3.1-8b-eagle3")))
    raw["speculators_model_type"] = "medusa2"
    geometry, findings = read_geometry(raw, "spec.draft.config", DEFAULT_FACTS)
    assert geometry is None and "medusa2" in findings[0].message and "eagle3" in findings[0].message


def test_medusa_heads_are_mlp_heads_not_attention_heads() -> None:
    """vLLM reports 0 attention/KV heads and head size 0 for Medusa; its num_heads counts MLPs."""
    geometry, findings = read_geometry(load_config("medusa-llama3-8b"), "spec.draft.config", DEFAULT_FACTS)
    assert findings == [] and (geometry.num_attention_heads, geometry.num_kv_heads, geometry.head_size) == (0, 0, 0)


@pytest.mark.parametrize("extra, kv", [({"multi_query": True}, 1), ({"multi_query": True, "new_decoder_architecture": True, "num_kv_heads": 8}, 8)])
def test_falcon_multi_query_counts_one_kv_head_unless_new_decoder_architecture(extra: dict, kv: int) -> None:
    raw = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": 4544, "num_attention_heads": 71,
           "num_hidden_layers": 32, "vocab_size": 65024, **extra}
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert findings == [] and geometry.num_kv_heads == kv


def test_zero_kv_heads_on_an_attention_model_is_a_finding_not_a_pass() -> None:
    raw = dict(load_config("Qwen__Qwen3-0.6B"), num_key_value_heads=0)
    geometry, findings = read_geometry(raw, "spec.draft.config", DEFAULT_FACTS)
    assert geometry is None and findings[0].field == "spec.draft.config.num_key_value_heads"


def test_vllm_eagle_format_reads_the_inner_model_with_eagle_architectures() -> None:
    geometry, findings = read_geometry(load_config("eagle-format-llama3-8b"), "spec.draft.config", DEFAULT_FACTS)
    assert findings == [] and geometry.model_type == "eagle"
    assert geometry.architectures == ("EagleLlamaForCausalLM",) and geometry.num_attention_heads == 32


def test_dspark_block_size_is_read_only_where_vllm_reads_it() -> None:
    assert read_geometry(load_config("specforge__kimi-k3-dspark"), "d", DEFAULT_FACTS)[0].block_size == 7
    assert read_geometry(load_config("dspark-qwen3-block-size-in-dflash-config"), "d", DEFAULT_FACTS)[0].block_size is None


def test_a_long_value_transformers_quotes_whole_is_cut_in_the_refusal() -> None:
    """transformers' strict config classes quote the value they refuse in full: a 5000-character
    string must not make a 5000-character finding (a condition, an Event, a terminal line)."""
    config = load_config("deepseek-ai__DeepSeek-V3")
    config["tie_word_embeddings"] = "x" * 5000
    _, findings = read_geometry(config, "spec.target.config", rule_set("0.34.0"))
    (finding,) = [f for f in findings if f.code == "config-rejected"]
    assert finding.field == "spec.target.config.tie_word_embeddings"
    assert len(finding.message) <= MAX_MESSAGE and "expected bool" in finding.message
