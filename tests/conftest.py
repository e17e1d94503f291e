"""Shared fixtures: the real model configs copied from ../shared/model-configs, and synthetic edge cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODEL_CONFIGS = FIXTURES / "model-configs"
SYNTHETIC = FIXTURES / "synthetic"


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
