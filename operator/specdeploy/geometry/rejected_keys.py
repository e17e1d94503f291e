"""Which keys a config class's refusal is about.

transformers' validators (the same ones vLLM's loader runs) raise in their own words: a range
check that names no key, a KeyError about rope parameters, an AttributeError out of a sub-config.
To name the field, the config is tried without each key in turn: a key whose removal alone lets
the class accept the config is one at fault. Sub-configs (`text_config`, `vision_config`, ...) are
searched the same way, so the answer is `vision_config.rope_scaling`, not `vision_config`."""

from __future__ import annotations

import time
from typing import Any, Callable

Path = tuple[str, ...]

# One class construction costs ~0.5 ms for a real config; a config with more keys than this, or
# one so large that the search runs past the deadline (a 4 MiB config is copied per try), is not
# searched: the refusal stands, naming the whole config.
MAX_TRIES = 400
DEADLINE_S = 1.0


def keys_at_fault(accepts: Callable[[dict[str, Any]], bool], raw: dict[str, Any]) -> tuple[Path, ...]:
    """The paths whose removal alone makes `accepts` true; () when none does or the search is
    too large to run."""
    tries, deadline = [0], time.monotonic() + DEADLINE_S

    def search(node: dict[str, Any], rebuild: Callable[[dict[str, Any]], dict[str, Any]], prefix: Path) -> tuple[Path, ...]:
        if tries[0] + len(node) > MAX_TRIES:
            return ()
        tries[0] += len(node)
        found = []
        for key in node:
            if time.monotonic() > deadline:
                raise _OutOfTime
            if accepts(rebuild({k: v for k, v in node.items() if k != key})):
                found.append(key)
        if len(found) == 1 and _is_sub_config(found[0], node[found[0]]):
            key, sub = found[0], node[found[0]]
            try:
                deeper = search(sub, lambda changed: rebuild({**node, key: changed}), prefix + (key,))
            except _OutOfTime:
                deeper = ()
            if deeper:
                return deeper
        return tuple(prefix + (key,) for key in found)

    try:
        return search(raw, lambda changed: changed, ())
    except _OutOfTime:
        return ()


class _OutOfTime(Exception):
    pass


MISSING = object()


def value_at(raw: dict[str, Any], path: Path, default: Any = MISSING) -> Any:
    node: Any = raw
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _is_sub_config(key: str, value: Any) -> bool:
    """A nested config (searched key by key), as opposed to a parameter object such as
    rope_scaling, whose fault is usually a key it lacks."""
    return isinstance(value, dict) and (key.endswith("_config") or "model_type" in value)
