"""The supported-architectures data the validator reads must match the installed vLLM.

Regenerates the JSON in memory from vLLM's registry (the same code path as the refresh
script) and compares it with the committed file, so a vLLM bump without a refresh fails."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "refresh_vllm_architectures.py"

pytest.importorskip("vllm")


def _load_script():
    spec = importlib.util.spec_from_file_location("refresh_vllm_architectures", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vllm_architectures_json_is_fresh() -> None:
    script = _load_script()
    fresh = script.collect()
    committed = json.loads(script.OUTPUT.read_text())
    assert committed["vllm_version"] == fresh["vllm_version"], "vLLM version changed: rerun the script"
    for key in ("mla_model_types", "mtp_model_types", "speculative_methods"):
        assert committed[key] == fresh[key], f"{key} is stale: rerun {SCRIPT.name}"
    missing = sorted(set(fresh["architectures"]) - set(committed["architectures"]))
    extra = sorted(set(committed["architectures"]) - set(fresh["architectures"]))
    assert not missing and not extra, f"registry changed (+{missing} -{extra}): rerun {SCRIPT.name}"
    changed = {a for a in fresh["architectures"] if fresh["architectures"][a] != committed["architectures"][a]}
    assert not changed, f"architecture facts changed for {sorted(changed)}: rerun {SCRIPT.name}"
    assert script.render(fresh) == script.OUTPUT.read_text()


def test_accessor_agrees_with_vllm_registry() -> None:
    """vllm_support answers from the JSON exactly what vLLM's registry answers live."""
    from vllm.model_executor.models.registry import ModelRegistry

    from specdeploy.validation import vllm_support

    import vllm

    assert vllm_support.VLLM_VERSION == vllm.__version__
    assert vllm_support.supported_architectures() == frozenset(ModelRegistry.get_supported_archs())
    assert not vllm_support.is_supported_architecture("KimiK3DSpark5MLADraftModel")
