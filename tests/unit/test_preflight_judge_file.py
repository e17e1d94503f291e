"""The in-image judge as the preflight Job runs it: `python vllm_judge.py REQUEST.json
--verdict-file PATH`, here under a Python without vLLM (the judge's own failures: exit 2).
Its verdicts under real vLLM releases are tested by tests/parity."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.preflight import vllm_judge

JUDGE = Path(vllm_judge.__file__)


def _run(tmp_path: Path, request: object) -> tuple[int, dict, str]:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    verdict_file = tmp_path / "termination-log"
    done = subprocess.run([sys.executable, str(JUDGE), str(path), "--verdict-file", str(verdict_file)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout  # one JSON line on stdout, whatever else happened
    assert verdict_file.read_text() == lines[0]
    return done.returncode, json.loads(lines[0]), done.stderr


def test_the_file_imports_only_the_standard_library_and_vllm() -> None:
    """It is copied into images that have no specdeploy."""
    tree = ast.parse(JUDGE.read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    allowed = set(sys.stdlib_module_names) | {"vllm", "torch", "__future__"}
    assert roots <= allowed, roots - allowed


@pytest.mark.parametrize(("request_body", "field"), [
    ({"models": {}}, "request.args"),
    ({"args": ["m", 3]}, "request.args"),
    ({"args": ["m"], "models": {"m": "/nonexistent"}}, "request.models['m']"),
    ({"args": ["m"], "models": {}, "gpu": {"memoryBytes": "80Gi"}}, "request.gpu"),
    ({"args": ["m"], "models": {}, "gpu": {"memoryBytes": 1, "deviceName": 7}}, "request.gpu"),
])
def test_a_bad_request_is_the_judges_failure_naming_the_field(tmp_path: Path, request_body: dict, field: str) -> None:
    code, verdict, _ = _run(tmp_path, request_body)
    assert code == 2
    assert verdict["ok"] is False and verdict["stage"] is None and field in verdict["error"]


def test_without_vllm_the_judge_says_it_could_not_run(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    code, verdict, _ = _run(tmp_path, {"args": ["m"], "models": {"m": str(model)}, "gpu": None})
    assert code == 2
    assert verdict == {"ok": False, "stage": None, "error": verdict["error"], "vllmVersion": "unknown", "memory": None}
    assert "ModuleNotFoundError" in verdict["error"]


def test_the_verdict_fits_a_termination_message() -> None:
    """Kubernetes keeps 4096 bytes of /dev/termination-log: a long vLLM error is cut, not the JSON."""
    memory = {"kvCacheBytes": 1, "specs": {f"Spec{i}": i for i in range(300)}}
    verdict = vllm_judge.Verdict(False, "config", "ValueError: " + "x" * 20000, "0.34.0", memory)
    line = verdict.to_json()
    assert len(line.encode()) <= vllm_judge.MAX_VERDICT_BYTES
    data = json.loads(line)
    assert data["stage"] == "config" and data["error"].startswith("ValueError: x") and data["vllmVersion"] == "0.34.0"


def test_launch_flags_of_a_multi_node_pod_are_not_judged() -> None:
    """One process stands for rank 0; the rendered worker args (render/pod.py) carry these."""
    argv = ["m", "--tensor-parallel-size", "16", "--distributed-executor-backend", "mp", "--nnodes", "2",
            "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr=x", "--master-port", "29500", "--headless"]
    assert vllm_judge._single_rank(argv) == ["m", "--tensor-parallel-size", "16"]
