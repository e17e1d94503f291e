"""transformers' own refusals (the ones vLLM's loader raises too) name the key at fault and its value."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specdeploy.geometry import read_geometry
from specdeploy.geometry.rejected_keys import MAX_TRIES, keys_at_fault
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import load_config

FACTS = rule_set(DEFAULT_VERSION)


def _set(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    *parents, key = path.split(".")
    node = raw
    for parent in parents:
        node = node[parent]
    node[key] = value
    return raw


@pytest.mark.parametrize(("config", "path", "value", "reason"), [
    ("meta-llama__Llama-3.1-8B-Instruct", "initializer_range", 5.0, "smaller or equal to 1.0"),
    ("meta-llama__Llama-3.1-8B-Instruct", "num_attention_heads", 30, "not a multiple of the number of attention heads"),
    ("meta-llama__Llama-3.1-8B-Instruct", "rope_scaling", {"rope_type": "yarn"}, "Missing required keys"),
    # A sub-config's own class fails: the key inside it, in the user's words, not Python's.
    ("Qwen__Qwen3.5-122B-A10B", "vision_config.rope_scaling", {"rope_type": "yarn"}, "needs max_position_embeddings"),
    ("Qwen__Qwen3.5-122B-A10B", "text_config.rope_parameters", {"rope_type": "yarn"}, "Missing required keys"),
    # Wrapper formats: the path as the file writes it, not as vLLM unwraps it.
    ("eagle-format-llama3-8b", "model.num_attention_heads", 31, "not a multiple"),
    ("speculators-llama3.1-8b-eagle3", "transformer_layer_config.initializer_range", 5.0, "smaller or equal to 1.0"),
])
def test_a_transformers_refusal_names_the_key_and_its_value(config: str, path: str, value: Any, reason: str) -> None:
    geometry, findings = read_geometry(_set(load_config(config), path, value), "spec.draft.config", FACTS)
    assert geometry is None
    (finding,) = findings
    assert (finding.code, finding.field) == ("config-rejected", f"spec.draft.config.{path}")
    assert f"rejects {path} = " in finding.message and reason in finding.message
    assert "object has no attribute" not in finding.message and "KeyError" not in finding.message


def test_reading_a_config_leaves_the_callers_dict_as_it_was() -> None:
    raw = load_config("meta-llama__Llama-3.1-8B-Instruct")
    before = copy.deepcopy(raw)
    read_geometry(raw, "spec.target.config", FACTS)
    read_geometry(_set(raw, "rope_scaling", {"rope_type": "yarn"}), "spec.target.config", FACTS)
    assert raw == before  # transformers fills rope parameters in place; not in the user's config


def test_a_config_too_large_to_search_is_refused_as_a_whole() -> None:
    raw = _set(load_config("meta-llama__Llama-3.1-8B-Instruct"), "initializer_range", 5.0)
    raw.update({f"extra_{i}": i for i in range(MAX_TRIES)})
    _, (finding,) = read_geometry(raw, "spec.target.config", FACTS)
    assert (finding.code, finding.field) == ("config-rejected", "spec.target.config")
    assert "LlamaConfig rejects this config" in finding.message and "smaller or equal to 1.0" in finding.message


def test_every_key_whose_removal_alone_is_accepted_is_named() -> None:
    def accepts(config: dict[str, Any]) -> bool:
        return config.get("a", 0) + config.get("b", 0) < 2 and "c" not in config.get("sub_config", {})

    assert keys_at_fault(accepts, {"a": 1, "b": 1, "x": 0}) == (("a",), ("b",))
    assert keys_at_fault(accepts, {"a": 0, "sub_config": {"c": 1, "d": 2}}) == (("sub_config", "c"),)
    assert keys_at_fault(lambda config: False, {"a": 1}) == ()


def test_the_search_is_bounded_by_the_configs_size_not_the_clock() -> None:
    """The same refusal names the same key on an idle machine and a busy one: the search's
    bound counts tries and bytes, so only the config decides whether it runs."""
    from specdeploy.geometry.rejected_keys import MAX_SEARCH_BYTES

    raw = _set(load_config("meta-llama__Llama-3.1-8B-Instruct"), "initializer_range", 5.0)
    named = read_geometry(raw, "spec.target.config", FACTS)[1][0].field
    assert named == "spec.target.config.initializer_range"
    raw["padding"] = "x" * MAX_SEARCH_BYTES  # one key, but every try would copy 8 MiB
    _, (finding,) = read_geometry(raw, "spec.target.config", FACTS)
    assert finding.field == "spec.target.config"
