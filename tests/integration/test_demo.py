"""`make demo` works without a cluster: emulator + operator + real kubectl, exit 0, and tells
the story in a screenful: the apply, the conditions, the plan, the workloads, the endpoint;
the operator's full log goes to a file."""

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
def test_demo_applies_an_example_and_reports_ready(example: str, workload: str, tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    done = subprocess.run(
        [sys.executable, "-m", "specdeploy.demo", "-f", str(ROOT / example), "--log", str(log)],
        capture_output=True, text=True, timeout=600,  # a hang guard: the demo waits on events
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout.splitlines()
    story = "\n".join(out)
    assert "created" in story  # kubectl apply's own output
    assert f"workload={workload}" in story
    assert "Validated    True" in story and "Planned      True" in story and "plan: method=" in story
    assert "Ready=True" in out[-2] and "endpoint http://" in out[-2]
    assert out[-1] == f"==> the operator's full log: {log}"
    assert len(out) < 40, story
    # Once each, in the file: no operator line on the console, no emulator access-log line anywhere.
    assert done.stderr == ""
    full = log.read_text()
    assert f"Created {workload.split('/')[0]} default/{workload.split('/')[1]}" in full
    assert "Creation is processed" in full and "HTTP/1.1" not in full
