"""The one-place rules the code is built around: every condition reason is written somewhere,
configs read null as unset, and a spec's pair is read target first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdeploy.api.conditions import REASONS, Reason
from specdeploy.api.parse import parse_spec
from specdeploy.sources import resolve_pair
from specdeploy.vllm.hf_config import config_value

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "specdeploy"


def test_every_reason_is_written_by_the_operator() -> None:
    """A reason no code writes is a dead name a health check could wait on for ever."""
    code = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "conditions.py" or p.parent.name != "api")
    used = {getattr(Reason, name) for name in re.findall(r"\bReason\.([A-Z_]+)\b", code)}
    assert REASONS - used == set()


def test_reasons_are_camel_case_and_distinct() -> None:
    names = [v for k, v in vars(Reason).items() if k.isupper()]
    assert len(names) == len(set(names)) == len(REASONS)
    assert all(re.fullmatch(r"[A-Z][A-Za-z]+", n) for n in names)


class _Config:
    rope_theta = None
    head_dim = 128


@pytest.mark.parametrize("config", [{"rope_theta": None, "head_dim": 128}, _Config()], ids=["dict", "object"])
def test_config_value_reads_null_as_unset(config: object) -> None:
    """config.json writes null for "unset": the default applies, as for an absent key."""
    assert config_value(config, "rope_theta", 10000.0) == 10000.0
    assert config_value(config, "missing", 7) == 7
    assert config_value(config, "head_dim", 64) == 128
    assert config_value(config, "rope_theta") is None


def _spec(method: str, draft: str | None) -> object:
    document = {"target": {"model": "org/target"}, "draft": {"method": method, **({"model": draft} if draft else {})}}
    spec, findings = parse_spec(document)
    assert spec is not None, findings
    return spec


def test_resolve_pair_reads_the_target_then_the_draft_with_its_own_checkpoint() -> None:
    reads: list[tuple[str, str | None]] = []

    def read(source: object, where: str) -> str:
        reads.append((where, getattr(source, "model")))
        return where

    assert resolve_pair(_spec("draft_model", "org/draft"), read) == ("spec.target", "spec.draft")
    assert reads == [("spec.target", "org/target"), ("spec.draft", "org/draft")]
    reads.clear()
    assert resolve_pair(_spec("ngram", None), read) == ("spec.target", None)
    assert reads == [("spec.target", "org/target")]


def test_no_function_in_the_package_is_over_60_lines() -> None:
    """The reconcile reads as its named steps, and every other function reads at once: one that
    grows past a screen is split."""
    import ast

    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{path.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


def test_every_package_install_in_the_makefile_is_pinned() -> None:
    """What CI installs comes from constraints/*.txt (`make constraints` refreshes them): an
    upstream release cannot change it between two runs."""
    makefile = (PACKAGE.parents[1] / "Makefile").read_text()
    installs = [line.strip() for line in makefile.splitlines() if "pip install $(PIP_FLAGS)" in line and " -r " not in line]
    assert installs and all(" -c $(CONSTRAINTS_" in line for line in installs), installs
    for name in ("core", "vllm"):
        pins = (PACKAGE.parents[1] / "constraints" / f"{name}.txt").read_text().split()
        assert pins and all("==" in pin for pin in pins), name


def test_the_license_file_is_the_apache_2_license_the_package_and_chart_declare() -> None:
    root = PACKAGE.parents[1]
    text = (root / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    assert 'license = "Apache-2.0"' in (root / "pyproject.toml").read_text()
    assert "artifacthub.io/license: Apache-2.0" in (root / "charts" / "specdeploy" / "Chart.yaml").read_text()
    assert "## Unreleased" in (root / "CHANGELOG.md").read_text()


def test_every_reason_is_reached_by_a_test() -> None:
    """Each reason the operator writes is asserted somewhere in the suites, by name or value."""
    tests = "\n".join(p.read_text() for p in (PACKAGE.parents[1] / "tests").rglob("test_*.py") if p.name != "test_structure.py")
    unreached = [k for k, v in vars(Reason).items() if k.isupper() and f'"{v}"' not in tests and f"Reason.{k}" not in tests]
    assert unreached == []


def test_following_spec_from_the_cli_into_planning_stays_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/architecture.md's walk (scripts/callgraph_walk.py): a reader following `spec` from
    `validate` into planning opens at most 40 files' worth of stays and goes back at most 8 times."""
    monkeypatch.syspath_prepend(str(PACKAGE.parents[1] / "scripts"))
    import callgraph_walk as walk

    steps = walk.walk(walk.Graph(PACKAGE), ("specdeploy.cli.validate", "_validate"), "planning/", walk.VOCABULARY)
    stays, files, climbs = walk.figures(steps)
    assert files >= 5  # the walk reached planning at all
    assert stays <= 40 and climbs <= 8, (stays, climbs)
