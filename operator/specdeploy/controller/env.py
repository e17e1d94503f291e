"""Numeric operator settings read from the environment, refused by name when malformed."""

from __future__ import annotations

import os


def env_number(name: str, default: float, *, minimum: float, exclusive: bool = False) -> float:
    """$name as a number (default when unset or empty); below `minimum` (or at it, when
    `exclusive`) is an error naming the variable, so a bad chart value stops start-up."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value < minimum or exclusive and value == minimum:
        raise ValueError(f"{name} must be {'>' if exclusive else '>='} {minimum:g}, got {value:g}")
    return value
