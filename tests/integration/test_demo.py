"""`make demo` works without a cluster: emulator + operator + real kubectl, exit 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("example", "workload"),
    [("examples/llama-3.1-8b-eagle3.yaml", "Deployment/llama-8b-eagle3"), ("examples/kimi-k3-dspark-h200.yaml", "LeaderWorkerSet/kimi-k3-dspark")],
)
def test_demo_applies_an_example_and_reports_ready(example: str, workload: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specdeploy.demo", "-f", str(ROOT / example)],
        capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "created" in out  # kubectl apply's own output
    assert f"workload={workload}" in out
    assert "Validated    True" in out and "Planned      True" in out
    assert "Ready=True" in out.splitlines()[-1]
