"""`specdeploy run --log-format json`, as shipped (its own process) against the emulator: every
line it writes is a JSON object, at INFO by default, and the lines about a CR name it. The
flag wins over $SPECDEPLOY_LOG_FORMAT (the chart's logFormat)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from . import operator_process
from .conftest import DEPLOYMENT, HANG_GUARD_S, NS, Cluster, created, eventually, example


def _operator(log: Path, *flags: str, env_format: str) -> operator_process.OperatorProcess:
    env = operator_process.shipped_env(SPECDEPLOY_LOG_FORMAT=env_format)
    return operator_process.start(["run", "--namespace", NS, *flags], env=env, log=log)


async def _stop(process: operator_process.OperatorProcess) -> None:
    """SIGTERM, as the kubelet stops it: the log ends as the shipped process ends it."""
    process.terminate()
    assert await asyncio.to_thread(process.wait, HANG_GUARD_S) == 0


async def test_log_format_json_writes_one_json_object_per_line(emulator: Any, cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    process = _operator(log, "--log-format", "json", env_format="text")  # the flag wins over the env
    try:
        name = await created(cluster, example("llama-3.1-8b-eagle3.yaml"), "uid-json-log")
        assert cluster.exists(DEPLOYMENT, name)
        await eventually(lambda: f'"{name}"' in log.read_text(), what="a log line naming the CR")
    finally:
        await _stop(process)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line[:200]}") from None
    assert all(isinstance(r, dict) and "message" in r and "severity" in r for r in records)
    about_it = [r for r in records if (r.get("object") or {}).get("name") == name]
    assert about_it and {r["object"]["namespace"] for r in about_it} == {NS}
    # INFO by default: what was created is said, not only warnings.
    assert any(r["severity"] == "info" and "Deployment" in r["message"] for r in about_it), [r["message"] for r in about_it]
