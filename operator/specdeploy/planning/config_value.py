"""One config value, from a transformers config object or its dict form alike."""

from __future__ import annotations

from typing import Any


def config_value(obj: Any, key: str, default: Any = None) -> Any:
    """`obj.key` or `obj[key]`; `default` when absent or null (configs write null for "unset")."""
    value = obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)
    return default if value is None else value
