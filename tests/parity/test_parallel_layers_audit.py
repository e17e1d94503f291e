"""The committed audit of vLLM's parallel layers (operator/specdeploy/vllm/data/
parallel_layers-<version>.json) is the installed release's own: scripts/audit_tp_layers.py rerun
here must give the same sites, builds and lines. A release whose model files moved a layer, or
added one, fails here until the audit is regenerated and tests/unit/test_parallel_layers.py
finds a rule (or a reason) for every new entry. Runs once per vLLM venv of the matrix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "audit_tp_layers.py"

vllm = pytest.importorskip("vllm")


def test_the_committed_audit_is_the_installed_releases(tmp_path: Path) -> None:
    from specdeploy.vllm.parallel_layers import audit_path

    fresh = tmp_path / "fresh.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--output", str(fresh)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    committed = audit_path(vllm.__version__)
    assert committed.is_file(), f"no audit for vLLM {vllm.__version__}: run {SCRIPT.name}"
    assert fresh.read_text() == committed.read_text(), f"the audit is stale for vLLM {vllm.__version__}: rerun {SCRIPT.name}"
