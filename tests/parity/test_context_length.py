"""The context length we plan for equals the max_model_len vLLM derives from the config.

vLLM's side: `ModelConfig(model=<dir>).max_model_len` with no --max-model-len given, which is
`_get_and_verify_max_len`'s derived value. Ours: `Geometry.derived_max_model_len`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cases import REAL, configs

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


def _variant(**changes: Any) -> dict[str, Any]:
    base = {k: v for k, v in configs()[LLAMA].items() if k != "rope_scaling"}
    return {**base, **changes}


# RoPE scalings and length keys that change the derived length (or must not).
VARIANTS = {
    "rope-linear-x4": _variant(rope_scaling={"rope_type": "linear", "factor": 4.0}, max_position_embeddings=8192),
    "rope-dynamic-x2": _variant(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8192),
    "rope-yarn-x4": _variant(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}, max_position_embeddings=32768),
    "two-length-keys": _variant(max_position_embeddings=8192, max_sequence_length=4096),
    "model-max-length-wins": _variant(max_position_embeddings=8192, model_max_length=16384),
}
TARGETS = sorted(p.stem for p in REAL.glob("*.json"))


@pytest.mark.parametrize("name", TARGETS + sorted(VARIANTS))
def test_derived_context_length_matches_vllm(name: str, tmp_path: Path) -> None:
    vllm = pytest.importorskip("vllm")
    from vllm.config import ModelConfig

    from specdeploy.geometry import read_geometry
    from specdeploy.vllm import rule_set

    config = VARIANTS.get(name) or configs()[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    try:
        vllm_len = ModelConfig(model=str(tmp_path), skip_tokenizer_init=True).max_model_len
    except Exception as exc:  # noqa: BLE001 - a config vLLM cannot load has no length to compare
        pytest.skip(f"vLLM does not load {name}: {type(exc).__name__}")
    geometry, findings = read_geometry(config, "spec.target.config", rule_set(vllm.__version__))
    assert findings == []
    assert geometry.derived_max_model_len == vllm_len
