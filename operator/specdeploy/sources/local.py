"""config.json from a file, or from a directory holding one (and its safetensors index)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdeploy.findings import json_type
from specdeploy.sources.errors import SourceInvalid

# A real config.json is a few KiB, 4 levels deep; a safetensors index can reach ~10 MiB.
MAX_CONFIG_BYTES = 4 * 2**20
MAX_INDEX_BYTES = 64 * 2**20
MAX_CONFIG_DEPTH = 32


def nesting_depth(value: Any, limit: int = MAX_CONFIG_DEPTH) -> int:
    """How deep dicts and lists nest (iterative: a hostile document cannot overflow the
    stack); stops counting past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_config_shape(data: Any, field: str, origin: str) -> dict[str, Any]:
    """A JSON object no deeper than MAX_CONFIG_DEPTH (inline configs are checked the same way)."""
    if not isinstance(data, dict):
        raise SourceInvalid(field, f"{origin} must hold a JSON object, got {json_type(data)}")
    if nesting_depth(data) > MAX_CONFIG_DEPTH:
        raise SourceInvalid(field, f"{origin} nests deeper than {MAX_CONFIG_DEPTH} levels; a model config is a few levels deep")
    return data


def parse_config_text(text: str, field: str, origin: str) -> dict[str, Any]:
    if len(text) > MAX_CONFIG_BYTES:
        raise SourceInvalid(field, f"{origin} is larger than {MAX_CONFIG_BYTES // 2**20} MiB")
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise SourceInvalid(field, f"{origin} is not valid JSON: {exc}") from exc
    except _NotJson as exc:
        raise SourceInvalid(field, f"{origin} {exc}") from exc
    except RecursionError as exc:
        raise SourceInvalid(field, f"{origin} nests deeper than {MAX_CONFIG_DEPTH} levels") from exc
    return check_config_shape(data, field, origin)


class _NotJson(ValueError):
    """A value Python's json module takes but JSON (and so the API server) does not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"holds {name}, which is not JSON (and no model config value)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"holds the number {text[:40]}, which overflows a double")
    return value


def _bounded_int(text: str) -> int:
    # Python refuses to parse integers over 4300 digits (a ValueError that names nothing);
    # no config value needs more than a few dozen.
    if len(text) > 100:
        raise _NotJson(f"holds an integer of {len(text)} digits; a model config's integers are far smaller")
    return int(text)


def weight_bytes_from_index(index: dict[str, Any]) -> int | None:
    """`metadata.total_size` of a model.safetensors.index.json: the checkpoint's bytes."""
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    ok = isinstance(total, (int, float)) and not isinstance(total, bool) and 0 < total < 2**60
    return int(total) if ok else None


def read_local(path: Path, field: str) -> tuple[dict[str, Any], int | None]:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise SourceInvalid(field, f"{path} has no config.json")
    try:
        if config_path.stat().st_size > MAX_CONFIG_BYTES:
            raise SourceInvalid(field, f"{config_path} is larger than {MAX_CONFIG_BYTES // 2**20} MiB")
        with config_path.open("rb") as handle:  # bounded: /proc files report size 0
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise SourceInvalid(field, f"cannot read {config_path}: {exc.strerror or exc}") from exc
    config = parse_config_text(data.decode("utf-8", errors="replace"), field, str(config_path))
    index_path = config_path.parent / "model.safetensors.index.json"
    weights = None
    if index_path.is_file():
        try:
            weights = weight_bytes_from_index(json.loads(index_path.read_text(errors="replace")))
        except (ValueError, RecursionError, AttributeError):
            weights = None  # an unreadable index only loses the exact weight size
    else:
        single = config_path.parent / "model.safetensors"
        weights = single.stat().st_size if single.is_file() else None
    return config, weights
