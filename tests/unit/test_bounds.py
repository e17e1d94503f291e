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
])
def test_each_hostile_value_is_a_finding_naming_the_field(key: str, value: Any, field: str) -> None:
    raw = copy.deepcopy(QWEN3)
    raw[key] = value
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert geometry is None
    assert [f.field for f in findings] == [f"spec.target.config.{field}"]
    assert findings[0].code == "config-value-invalid"


def test_real_values_pass_including_gptq_per_channel_group_size() -> None:
    raw = copy.deepcopy(QWEN3)
    raw["quantization_config"] = {**QUANT, "group_size": -1}
    geometry, findings = read_geometry(raw, "spec.target.config", DEFAULT_FACTS)
    assert geometry is not None and not findings


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
