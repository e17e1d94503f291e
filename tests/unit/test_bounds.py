"""Hostile config.json values are refused by name before any rule uses them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specdeploy.geometry.model_geometry import read_geometry
from specdeploy.sources import SourceInvalid
from specdeploy.sources.local import MAX_CONFIG_DEPTH, check_config_shape, parse_config_text
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import load_config

DEFAULT_FACTS = rule_set(DEFAULT_VERSION)

QWEN3 = load_config("Qwen__Qwen3-8B")
QUANT = {"quant_method": "gptq", "bits": 4}


@pytest.mark.parametrize("key, value, field", [
    ("num_key_value_heads", 10**18 + 1, "num_key_value_heads"),
    ("num_hidden_layers", 10**7, "num_hidden_layers"),
    ("architectures", 5, "architectures"),
    ("num_attention_heads", "32", "num_attention_heads"),
    ("hidden_size", True, "hidden_size"),
    ("max_position_embeddings", 10**30, "max_position_embeddings"),
    ("rope_scaling", {"rope_type": "linear", "factor": 1e308}, "rope_scaling.factor"),
    ("quantization_config", {**QUANT, "group_size": 0}, "quantization_config.group_size"),
    ("quantization_config", {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 0}}}},
     "quantization_config.config_groups.g.weights.group_size"),
    ("text_config", [1], "text_config"),
    ("intermediate_size", [1, 2, 3], "intermediate_size"),
    # Read by planning/kv_cache.py (linear-attention state, sparse-MLA indexer, per-layer kinds).
    ("linear_attn_config", {"full_attn_layers": 7}, "linear_attn_config.full_attn_layers"),
    ("linear_attn_config", {"full_attn_layers": "1,2"}, "linear_attn_config.full_attn_layers"),
    ("linear_attn_config", {"full_attn_layers": [4], "short_conv_kernel_size": 0}, "linear_attn_config.short_conv_kernel_size"),
    ("linear_num_value_heads", 2**63, "linear_num_value_heads"),
    ("full_attention_interval", 0, "full_attention_interval"),
    ("index_topk_freq", 0, "index_topk_freq"),
    ("index_topk_pattern", 5, "index_topk_pattern"),
    ("layer_types", "full_attention", "layer_types"),
    ("layer_types", ["full_attention"] * 20_000, "layer_types"),
    ("no_rope_layers", [1, "x"], "no_rope_layers"),
    ("sliding_window", -4096, "sliding_window"),
    ("mamba_ssm_dtype", 16, "mamba_ssm_dtype"),
    # Mamba-1/Mamba-2 layouts and state (geometry/layer_layout.py).
    ("mamba_d_state", 10**18, "mamba_d_state"),
    ("attn_layer_period", 0, "attn_layer_period"),
    ("conv_kernel", 0, "conv_kernel"),
    ("mamba_expand", -1, "mamba_expand"),
    ("mamba_expand", float("inf"), "mamba_expand"),
    ("hybrid_override_pattern", ["M", "*"], "hybrid_override_pattern"),
    ("layers_block_type", {"mamba": 1}, "layers_block_type"),
    ("mamba_ssm_cache_dtype", "int3", "mamba_ssm_cache_dtype"),
    ("num_attention_heads", 10**400, "num_attention_heads"),
    ("architectures", ["x" * 100_000], "architectures"),
    # RoPE parameters transformers' rope validation reads (it raised TypeError/len() of None).
    ("rope_scaling", {"rope_type": "longrope", "factor": 2.0, "short_factor": "x", "long_factor": None}, "rope_scaling.short_factor"),
    ("rope_scaling", {"rope_type": 5, "factor": 2.0}, "rope_scaling.rope_type"),
    ("rope_scaling", {"rope_type": "yarn", "factor": 4.0, "beta_fast": "x"}, "rope_scaling.beta_fast"),
    ("rope_parameters", {"full_attention": {"rope_type": "linear", "factor": 1e308}}, "rope_parameters.full_attention.factor"),
])
def test_each_hostile_value_is_a_finding_naming_the_field(key: str, value: Any, field: str) -> None:
    raw = copy.deepcopy(QWEN3)
    raw[key] = value
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert geometry is None
    assert [f.field for f in findings] == [f"spec.target.config.{field}"]
    assert findings[0].code == "config-value-invalid"
    assert len(findings[0].message) < 300  # a 5000-digit integer or a 100 kB string is quoted short


def test_real_values_pass_including_gptq_per_channel_group_size() -> None:
    raw = copy.deepcopy(QWEN3)
    raw["quantization_config"] = {**QUANT, "group_size": -1}
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert geometry is not None and not findings
    assert geometry.weight_bits == 4.0  # per-channel: no per-group scales (it was 4 - 16 = -12 bits)
    raw["quantization_config"] = {**QUANT, "group_size": None}
    geometry, _ = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert geometry is not None and geometry.weight_bits == 4.0 + 16 / 128  # unset: GPTQ's default 128


def test_every_value_the_kv_cache_rules_read_is_bounded() -> None:
    """A key geometry/layer_layout.py (what planning/kv_cache.py and compressed_mla.py size) turns into a number, list or string
    must be in bounds.py, so a new memory rule cannot read an unchecked value (int("x"), a modulo by 0, a 1e30-layer list)."""
    import re
    from pathlib import Path

    from specdeploy.geometry.bounds import BOUNDED_KEYS

    source = (Path(__file__).resolve().parents[2] / "operator" / "specdeploy" / "geometry" / "layer_layout.py").read_text()
    read = (set(re.findall(r"(?:config_value|_int)\((?:text|config|model), \"(\w+)\"", source))
            | set(re.findall(r"linear(?:\.get\(|\[)\"(\w+)\"", source)) | set(re.findall(r"\bget\(\"(\w+)\"", source)))
    assert len(read) > 15, read
    assert read <= BOUNDED_KEYS, f"read by kv_cache.py but not bounded in geometry/bounds.py: {sorted(read - BOUNDED_KEYS)}"


@pytest.mark.parametrize("text, words", [
    ('{"num_hidden_layers": NaN}', "NaN"),
    ('{"rope_theta": Infinity}', "Infinity"),
    ('{"max_position_embeddings": 1e400}', "overflows"),
    ('{"num_attention_heads": ' + "9" * 5000 + "}", "5000 digits"),
    ("[1, 2]", "got array"),
    ("null", "got null"),
])
def test_config_json_that_python_reads_but_json_does_not_is_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(SourceInvalid, match=words) as caught:
        parse_config_text(text, "spec.target.configMapRef", "ConfigMap c key config.json")
    assert caught.value.field == "spec.target.configMapRef" and "ConfigMap c key config.json" in caught.value.message


def test_deep_nesting_and_size_are_refused_before_parsing_further() -> None:
    deep: Any = 1
    for _ in range(MAX_CONFIG_DEPTH + 5):
        deep = {"k": deep}
    with pytest.raises(SourceInvalid, match="nests deeper"):
        check_config_shape({"model_type": "llama", "x": deep}, "spec.target.config", "the inline config")
    with pytest.raises(SourceInvalid, match="nests deeper"):
        parse_config_text("[" * 100_000 + "]" * 100_000, "spec.target.configMapRef", "ConfigMap c key config.json")
    with pytest.raises(SourceInvalid, match="larger than"):
        parse_config_text(" " * (5 * 2**20), "spec.target.configMapRef", "ConfigMap c key config.json")


def test_deepseek_v4_and_sliding_window_switches_are_bounded() -> None:
    """Values the DeepSeek-V4 and sliding-window memory rules read are refused by name, not crashed on."""
    from specdeploy.geometry.bounds import config_bound_findings

    for key, value in (("compress_ratios", "4,128"), ("compress_ratios", [4, -1]), ("compress_rates", {"c4": "x"}),
                       ("compress_rates", [4]), ("use_sliding_window", "no")):
        (finding,) = config_bound_findings({key: value}, "spec.target.config")
        assert finding.field == f"spec.target.config.{key}" and finding.severity == "error", finding
    assert not config_bound_findings({"compress_ratios": [0, 4, 128], "compress_rates": {"c4": 4}, "use_sliding_window": False},
                                     "spec.target.config")


QWEN35 = load_config("Qwen__Qwen3.5-122B-A10B")  # a composite config: text_config and vision_config


@pytest.mark.parametrize("path, value, words", [
    # transformers' to_dict() split a non-string dtype on "." (IndexError) at any depth; a name that is not a
    # torch dtype fails `getattr(torch, dtype)` in the pod at every config level.
    (("text_config", "dtype"), "x", "torch dtype"),
    (("text_config", "torch_dtype"), "torch.bfloat16", "torch dtype"),
    (("vision_config", "dtype"), [], "torch dtype"),
    (("text_config", "rope_scaling", "dtype"), [], "torch dtype"),
    (("dtype",), 16, "torch dtype"),
    # PretrainedConfig's fine-tuning fields (int() of id2label's keys, range(num_labels), a Literal problem_type).
    (("text_config", "id2label"), 5, "label ids"),
    (("vision_config", "id2label"), {"a": "b"}, "label ids"),
    (("text_config", "label2id"), {"a": "b"}, "label names"),
    (("text_config", "num_labels"), 10**30, "label count"),
    (("vision_config", "num_labels"), "x", "label count"),
    (("num_labels",), None, "label count"),
    (("text_config", "problem_type"), "x", "regression"),
    (("text_config", "architectures"), 5, "architecture names"),
    (("text_config", "quantization_config"), 5, "object"),
    # A key naming a method or class table of the config class (`to_dict: 5` made to_dict() raise TypeError).
    (("text_config", "to_dict"), 5, "method"),
    (("vision_config", "attribute_map"), 5, "method"),
    (("sub_configs",), None, "method"),
    # RoPE: an object is expected, at every level and per layer type (transformers setdefault()s it).
    (("rope_scaling",), 5, "object of RoPE parameters"),
    (("text_config", "rope_scaling"), 5, "object of RoPE parameters"),
    (("text_config", "rope_parameters"), "yarn", "object of RoPE parameters"),
    (("text_config", "rope_parameters", "full_attention"), 5, "object of RoPE parameters for that layer type"),
    (("text_config", "rope_scaling", "original_max_position_embeddings"), None, "positive number"),
    (("rope_scaling", "original_max_position_embeddings"), 0, "positive number"),  # yarn: division by zero
    (("text_config", "rope_theta"), float("nan"), "finite"),
    (("text_config", 1), 2, "keys are strings"),
])
def test_sub_config_values_transformers_cannot_build_are_refused_by_name(path: tuple[Any, ...], value: Any, words: str) -> None:
    raw = copy.deepcopy(QWEN35)
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    geometry, findings = read_geometry(raw, "spec.draft.config", DEFAULT_FACTS)
    assert geometry is None
    field = "spec.draft.config." + ".".join(str(p) for p in path)
    assert [f.field for f in findings] == [field], findings
    assert findings[0].code == "config-value-invalid" and words in findings[0].message, findings[0].message


def test_real_dtype_and_label_values_still_pass() -> None:
    raw = copy.deepcopy(QWEN35)
    raw["text_config"].update(dtype="float16", id2label={"0": "LABEL_0", "1": "LABEL_1"}, label2id={"LABEL_0": 0, "LABEL_1": 1},
                              num_labels=2, problem_type="single_label_classification")
    raw["quantization_config"] = {"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp8_e4m3"}}}
    raw["vocabulary_map"] = {"dtype": 1234}  # Emu3: `dtype` is a token there (transformers keeps integers)
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert not findings and geometry is not None


def test_each_bounded_key_has_one_check() -> None:
    """bounds.py dispatches on the key: a key in two sets would silently get the first's check."""
    from specdeploy.geometry import bounds

    sets = [set(bounds._INTS), set(bounds._INT_LISTS), set(bounds._STRING_LISTS), set(bounds._PATTERNS), set(bounds._EXPAND_KEYS),
            set(bounds._NUMBERS), set(bounds._STRINGS), set(bounds._DICTS) - set(bounds._CONFIG_ATTRIBUTES),
            {"sliding_window", "use_sliding_window", "compress_rates", "group_size", "mamba_ssm_cache_dtype", "architectures"}]
    assert sum(len(s) for s in sets) == len(set().union(*sets))
