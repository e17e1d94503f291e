"""Which keys a config class's refusal is about.

transformers' validators (the same ones vLLM's loader runs) raise in their own words: a range
check that names no key, a KeyError about rope parameters, an AttributeError out of a sub-config.
To name the field, the config is tried without each key in turn: a key whose removal alone lets
the class accept the config is one at fault. Sub-configs (`text_config`, `vision_config`, ...) are
searched the same way, so the answer is `vision_config.rope_scaling`, not `vision_config`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

Path = tuple[str, ...]

# The search is bounded by size, never by time, so its answer is the same on a busy machine: at
# most MAX_TRIES class constructions (~0.5 ms each for a real config), and at most
# MAX_SEARCH_BYTES of config copied over all of them (each try builds the config again). A config
# whose search would exceed either is not searched: the refusal stands, naming the whole config.
MAX_TRIES = 400
MAX_SEARCH_BYTES = 8 * 1024 * 1024


@dataclass
class _Budget:
    """Tries left for the whole search, sub-configs included."""

    tries: int

    def take(self, n: int) -> bool:
        if n > self.tries:
            return False
        self.tries -= n
        return True


def keys_at_fault(accepts: Callable[[dict[str, Any]], bool], raw: dict[str, Any]) -> tuple[Path, ...]:
    """The paths whose removal alone makes `accepts` true; () when none does or the search is
    too large to run."""
    size = len(json.dumps(raw, default=str))
    return _search(accepts, raw, lambda changed: changed, (), _Budget(min(MAX_TRIES, MAX_SEARCH_BYTES // max(size, 1))))


def _search(accepts: Callable[[dict[str, Any]], bool], node: dict[str, Any],
            rebuild: Callable[[dict[str, Any]], dict[str, Any]], prefix: Path, budget: _Budget) -> tuple[Path, ...]:
    """The keys of `node` at fault; one sub-config at fault is searched in turn for the key inside it."""
    if not budget.take(len(node)):
        return ()
    found = [key for key in node if accepts(rebuild({k: v for k, v in node.items() if k != key}))]
    if len(found) == 1 and _is_sub_config(found[0], node[found[0]]):
        key, sub = found[0], node[found[0]]
        deeper = _search(accepts, sub, lambda changed: rebuild({**node, key: changed}), prefix + (key,), budget)
        if deeper:
            return deeper
    return tuple(prefix + (key,) for key in found)


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
