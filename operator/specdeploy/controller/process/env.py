"""Numeric operator settings read from the environment, refused by name when malformed.

Each setting is declared once (`Number`), next to the code that uses it; `check()` reads every
declared one, and `controller.main.run` calls it first, so a bad chart value stops start-up
with a message naming the variable and what it allows, instead of a traceback in a retried
kopf startup handler, or a silent default.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

_DECLARED: list["Number"] = []


def env_number(name: str, default: float, *, minimum: float, exclusive: bool = False,
               maximum: float | None = None, integer: bool = False) -> float:
    """$name as a number (default when unset or empty); below `minimum` (or at it, when
    `exclusive`), above `maximum`, or not whole when `integer`, is an error naming the
    variable and the values allowed."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    allowed = _allowed(minimum, exclusive, maximum, integer)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be {allowed}, got {raw!r}") from None
    if not math.isfinite(value) or (integer and not value.is_integer()):
        raise ValueError(f"{name} must be {allowed}, got {raw!r}")
    if value < minimum or (exclusive and value == minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {allowed}, got {value:g}")
    return value


def _allowed(minimum: float, exclusive: bool, maximum: float | None, integer: bool) -> str:
    kind = "an integer" if integer else "a number"
    if maximum is not None:
        return f"{kind} from {minimum:g} to {maximum:g}"
    return f"{kind} {'>' if exclusive else '>='} {minimum:g}"


@dataclass(frozen=True)
class Number:
    """One numeric setting: its variable, default and bounds, read by `get()` (each call
    reads the environment again, so tests may set it after import)."""

    name: str
    default: float
    minimum: float
    exclusive: bool = False
    maximum: float | None = None
    integer: bool = False

    def __post_init__(self) -> None:
        _DECLARED.append(self)

    def get(self) -> float:
        return env_number(self.name, self.default, minimum=self.minimum, exclusive=self.exclusive,
                          maximum=self.maximum, integer=self.integer)

    def get_int(self) -> int:
        return int(self.get())


def check() -> None:
    """Read every declared setting: the first bad one raises ValueError naming it."""
    for setting in list(_DECLARED):
        setting.get()


def declared() -> list[Number]:
    return list(_DECLARED)
