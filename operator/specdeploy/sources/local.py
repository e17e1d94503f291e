"""config.json from a file, or from a directory holding one (and its safetensors index)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdeploy.sources.errors import SourceInvalid


def parse_config_text(text: str, field: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceInvalid(field, f"{origin} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SourceInvalid(field, f"{origin} must hold a JSON object, got {type(data).__name__}")
    return data


def weight_bytes_from_index(index: dict[str, Any]) -> int | None:
    """`metadata.total_size` of a model.safetensors.index.json: the checkpoint's bytes."""
    total = (index.get("metadata") or {}).get("total_size")
    return int(total) if isinstance(total, (int, float)) and total > 0 else None


def read_local(path: Path, field: str) -> tuple[dict[str, Any], int | None]:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise SourceInvalid(field, f"{path} has no config.json")
    config = parse_config_text(config_path.read_text(), field, str(config_path))
    index_path = config_path.parent / "model.safetensors.index.json"
    weights = None
    if index_path.is_file():
        weights = weight_bytes_from_index(parse_config_text(index_path.read_text(), field, str(index_path)))
    else:
        single = config_path.parent / "model.safetensors"
        weights = single.stat().st_size if single.is_file() else None
    return config, weights
