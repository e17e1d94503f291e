"""Fuzzed specs: whatever the CRD (schema + CEL, as the API server enforces it) refuses, the
parser behind `specdeploy plan` and the webhook refuses too. Deterministic (seeded), and each
mutation is one a person could type: a quoted number, a word for a boolean, a stray space,
an unknown key, a wrong shape."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any, Iterator

import yaml

from specdeploy.api.parse import parse_spec
from tests.conftest import not_in_our_words
from tests.unit.test_crd import _schema_accepts

ROOT = Path(__file__).resolve().parents[2]
SPECS = [d["spec"] for p in sorted((ROOT / "examples").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
         if d and d.get("kind") == "SpeculativeDeployment"]
VALUES: list[Any] = ["2", 2, 2.5, -1, 0, True, False, "off", "yes", "", " ", "8 ", " x", "a b", "auto", "Auto", "25%", "25",
                     [], {}, ["x"], {"a": 1}, "nvidia.com/gpu", "gpu", "200Gi", "lots", 1e9, 65, "ngram", "eagle3", "H100-80GB"]
FREE_FORM = {"config", "speculativeConfig", "affinity", "valueFrom", "tolerations"}
CASES = 600


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every position a user writes (not inside free-form objects such as inline configs)."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in FREE_FORM:
                yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*path, index))


def _mutate(spec: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for _ in range(rng.choice((1, 1, 2))):
        path = rng.choice([p for p in _paths(spec) if p])
        parent = spec
        for part in path[:-1]:
            parent = parent[part]
        if rng.random() < 0.15 and isinstance(parent, dict):
            parent[rng.choice(["replica", "Replicas", "tp", "model_name", "extra"])] = 1  # an unknown key
        elif rng.random() < 0.1 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(VALUES))
    return spec


def test_what_the_crd_refuses_the_parser_refuses() -> None:
    rng = random.Random(11)
    refused_by_crd = 0
    escapes = []
    for _ in range(CASES):
        spec = _mutate(rng.choice(SPECS), rng)
        if _schema_accepts(spec, with_cel=True):
            continue
        refused_by_crd += 1
        parsed, findings = parse_spec(spec)
        if parsed is not None:
            escapes.append(spec)
        else:
            assert all(f.field.startswith("spec") and f.message for f in findings)
            assert not not_in_our_words([f.message for f in findings]), spec
    assert refused_by_crd > CASES // 3  # the fuzzing does reach the schema's refusals
    assert not escapes, f"{len(escapes)} specs the API server refuses are accepted, e.g. {escapes[:2]}"
