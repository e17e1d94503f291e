"""Shared fixtures: the real model configs copied from ../shared/model-configs, and synthetic edge cases."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# pydantic's own wording: a finding that carries it has not been put in our words (api/errors.py).
RAW_PYDANTIC = ("Input should", "Field required", "Extra inputs are not permitted", "Value error,", "String should",
                "List should", "Dictionary should", "validation error for", "errors.pydantic.dev")
MAX_MESSAGE = 300


def not_in_our_words(messages: list[str]) -> list[str]:
    """The messages a user should not read: pydantic's raw text, or longer than a finding may be."""
    return [m for m in messages if len(m) > MAX_MESSAGE or any(raw in m for raw in RAW_PYDANTIC)]
MODEL_CONFIGS = FIXTURES / "model-configs"
SYNTHETIC = FIXTURES / "synthetic"
# vLLM caches what it learns of a model class under VLLM_CACHE_ROOT (registry.py modelinfos/,
# one file per class, not per release), shared by every vLLM on the machine: whether 0.32.0 could
# inspect Llama-4 then depended on which release's run wrote the file last (torchvision is not in
# the CPU stack). Each session gets its own, so a verdict depends on the installed vLLM alone.
os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="specdeploy-vllm-cache-")
atexit.register(shutil.rmtree, os.environ["VLLM_CACHE_ROOT"], ignore_errors=True)

# vLLM's CPU build venv, standing for an image's vLLM in the core venv's preflight tests.
VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
# `make test` sets it once the venv is built: a missing venv then fails those tests, never skips them.
REQUIRE_VLLM_VENV = "SPECDEPLOY_REQUIRE_VLLM_VENV"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `needs_vllm_venv` test skips without the venv, for a developer who has not built it
    (`make vllm-venv`), unless the run requires it."""
    if VLLM_PYTHON.exists() or os.environ.get(REQUIRE_VLLM_VENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"no vLLM venv at {VLLM_PYTHON} (make vllm-venv)")
    for item in items:
        if item.get_closest_marker("needs_vllm_venv"):
            item.add_marker(skip)


def load_config(name: str) -> dict[str, Any]:
    """A fixture by file stem, from model-configs/ (and its held-out/) or synthetic/."""
    for folder in (MODEL_CONFIGS, MODEL_CONFIGS / "held-out", SYNTHETIC):
        path = folder / f"{name}.json"
        if path.exists():
            return json.loads(path.read_text())
    raise FileNotFoundError(name)


@pytest.fixture
def config() -> Any:
    return load_config
