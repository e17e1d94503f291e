"""Malformed CRs through `specdeploy plan -f`, in process: no traceback, no run over 10 s of CPU, and
every refusal names what is wrong (a finding's field, or a message on stderr), and every
accepted document's children pass the Kubernetes schemas. The corpus is
seeded (tests/fuzz/hostile.py); SPECDEPLOY_FUZZ_COUNT runs a bigger one."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fuzz.hostile import children_problems, corpus, names_what_is_wrong, run_plan

COUNT = int(os.environ.get("SPECDEPLOY_FUZZ_COUNT", "300"))
# Shapes the CLI's own reading of the stream handles (issue 11: metadata types, YAML depth).
CLI_SHAPES = ("metadata", "deep-yaml")


def _run(tmp_path: Path, *, cli_shapes: bool, limit: int | None = None) -> list[str]:
    problems = []
    path = tmp_path / "sd.yaml"
    runs = 0
    for what, text in corpus(COUNT, seed=11):
        if (what.split()[0] in CLI_SHAPES) != cli_shapes:
            continue
        runs += 1
        if limit is not None and runs > limit:
            break
        outcome = run_plan(text, path, what)
        if outcome.traceback:
            problems.append(f"{what}: traceback {outcome.traceback.strip().splitlines()[-1]}")
        elif outcome.seconds > 10:
            problems.append(f"{what}: {outcome.seconds:.1f} s of CPU")
        elif outcome.code not in (0, 1, 2):
            problems.append(f"{what}: exit {outcome.code}")
        elif not names_what_is_wrong(outcome):
            problems.append(f"{what}: exit {outcome.code} without naming what is wrong: {outcome.stderr[:200]}")
        elif children_problems(outcome):
            problems.append(f"{what}: accepted, but a child fails the Kubernetes schemas: {children_problems(outcome)[0]}")
    return problems


def test_malformed_configs_and_specs_are_refused_by_name(tmp_path: Path) -> None:
    problems = _run(tmp_path, cli_shapes=False)
    assert not problems, "\n".join(problems[:20])


def test_malformed_metadata_and_deep_yaml_are_refused_by_name(tmp_path: Path) -> None:
    problems = _run(tmp_path, cli_shapes=True, limit=12)  # a sample: deep YAML is slow to reject
    assert not problems, "\n".join(problems[:20])
