"""The audit of every parallel layer vLLM builds for the supported architectures
(scripts/audit_tp_layers.py -> vllm/data/parallel_layers-<version>.json): each audited layer has a
rule that checks its width, or a stated reason it needs none, and each rule keyed from the audit
names a layer its architectures really build in the releases it claims."""

from __future__ import annotations

import importlib
from fnmatch import fnmatchcase
from typing import Any, Iterator

import pytest

from specdeploy.vllm import SUPPORTED_VERSIONS
from specdeploy.vllm.layer_splits import LAYER_SPLITS, layer_split_failures
from specdeploy.vllm.parallel_layers import (AUDITED_ARCHITECTURES, COVERAGE, audit, audit_key, audited, cite,
                                             coverage)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _entries(version: str) -> Iterator[tuple[str, dict[str, Any]]]:
    data = audit(version)
    yield from data["sites"].items()
    yield from data["builds"].items()


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_audited_layer_has_a_rule_or_a_reason(version: str) -> None:
    """A release whose model files bring a layer nothing accounts for fails here until a rule
    (or a reason) is added: the audit, not a reviewer's memory, lists what vLLM splits."""
    uncovered = [key for key, record in _entries(version) if coverage(key, record) is None]
    assert uncovered == []


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_the_audit_reaches_every_supported_architecture_vllm_registers(version: str) -> None:
    """A walk that stops early (a layer table it did not follow) would leave a model's layers out:
    every registered architecture reaches at least one split layer."""
    data = audit(version)
    empty = [arch for arch, reached in data["architectures"].items() if not reached["sites"]]
    assert empty == [] and data["vllm_version"] == version
    assert set(data["architectures"]) <= AUDITED_ARCHITECTURES


def test_every_supported_architecture_is_one_some_release_registers() -> None:
    """A name no release registers would be audited nowhere: its rules could never fire."""
    assert [a for a in sorted(AUDITED_ARCHITECTURES) if not any(audited(v, a) for v in SUPPORTED_VERSIONS)] == []


def test_every_coverage_glob_matches_a_layer_some_release_builds() -> None:
    """No dead entries: each glob is the first match of some audited layer."""
    first = {next((glob for glob, _ in COVERAGE if fnmatchcase(key, glob)), None)
             for version in SUPPORTED_VERSIONS for key, _ in _entries(version)}
    assert [glob for glob, _ in COVERAGE if glob not in first] == []


def test_every_rule_coverage_names_exists() -> None:
    rules = {rule for _, rule in COVERAGE} | {coverage(key, record) for version in SUPPORTED_VERSIONS
                                               for key, record in _entries(version)}
    for rule in sorted(r for r in rules if r and not r.startswith("none:")):
        module, _, attr = rule.rpartition(".")
        assert hasattr(importlib.import_module(f"specdeploy.{module}"), attr), rule


@pytest.mark.parametrize("rule", LAYER_SPLITS, ids=lambda r: f"{r.what}-{min(r.architectures)}")
def test_each_layer_rule_names_a_layer_its_architectures_build(rule: Any) -> None:
    """In every release since `rule.since` that registers the architecture, the audit reaches
    the layer the rule cites from that architecture's class (else the rule would silently stop
    firing when vLLM moves the layer)."""
    for arch in rule.architectures:
        assert arch in AUDITED_ARCHITECTURES
        releases = [v for v in SUPPORTED_VERSIONS if audited(v, arch) and _release(v) >= _release(rule.since)]
        assert releases, arch
        missing = [v for v in releases if not any(audit_key(v, arch, site) for site in rule.sites)]
        assert missing == [], f"{arch}: {rule.sites} not reached in {missing}"


def test_a_rule_fires_only_where_the_release_builds_the_layer() -> None:
    """DeepSeek-V4's output groups are divided by TP from 0.34.0 (common/grouped_wo_a.py); before,
    only o_groups × o_lora_rank is split (8 × 1024 divides TP 16)."""
    config = {"o_groups": 8, "o_lora_rank": 1024}
    [reason] = layer_split_failures("DeepseekV4ForCausalLM", config, 16, "0.34.0")
    assert "o_groups" in reason and "grouped_wo_a.py:" in reason and "vLLM 0.34.0" in reason
    assert layer_split_failures("DeepseekV4ForCausalLM", config, 16, "0.33.0") == []
    assert layer_split_failures("NoSuchForCausalLM", config, 16, "0.34.0") == []


def test_cite_gives_the_releases_file_and_line() -> None:
    key = "vllm/model_executor/models/qwen3_next.py::Qwen3NextSparseMoeBlock.shared_expert->Qwen2MoeMLP"
    line = audit("0.32.0")["builds"][key]["line"]
    assert cite("0.32.0", key) == f"vllm/model_executor/models/qwen3_next.py:{line} Qwen3NextSparseMoeBlock.shared_expert, vLLM 0.32.0"
