"""Drafts saved in vLLM's own EAGLE format (model_type "eagle", the layer config under `model`).

vLLM parses them with EAGLEConfig (vllm/transformers_utils/configs/eagle.py): the inner config
is built with AutoConfig, its attributes become the draft's, and the architectures are the
inner ones with an "Eagle" prefix (EAGLEConfig's default method). SpeculativeConfig does not
wrap them again."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.drafts import EAGLE_FORMAT_MODEL_TYPE, eagle_format_architectures


def is_eagle_format(raw: dict[str, Any]) -> bool:
    return raw.get("model_type") == EAGLE_FORMAT_MODEL_TYPE and isinstance(raw.get("model"), dict)


def eagle_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    inner = dict(raw["model"])
    for key, value in raw.items():
        if key not in ("model", "architectures", "model_type") and key in inner:
            inner[key] = value  # EAGLEConfig sets its own kwargs on the inner config
    inner["architectures"] = eagle_format_architectures(inner.get("architectures") or [])
    return inner


def eagle_source_path(raw: dict[str, Any], path: tuple[str, ...]) -> tuple[str, ...]:
    """Where a key of `eagle_text_config(raw)` is written in `raw`: its top-level override, or `model`."""
    key = path[0]
    if key not in ("model", "architectures", "model_type") and key in raw:
        return path
    return ("model",) + path
