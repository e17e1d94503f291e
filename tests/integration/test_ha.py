"""Two operator processes with leader election on a Lease: one acts, the standby takes over
within the lease duration after the leader is SIGKILLed. The leader serves /metrics and
/readyz. Lease duration shortened to 4 s (SPECDEPLOY_LEASE_DURATION_S)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from .conftest import DEPLOYMENT, Cluster, eventually, example, with_identity

ROOT = Path(__file__).resolve().parents[2]
LLAMA = example("llama-3.1-8b-eagle3.yaml")
NAME = LLAMA["metadata"]["name"]
LEASE = "coordination.k8s.io/v1/leases"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(pod: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "SPECDEPLOY_LEADER_ELECTION": "true", "SPECDEPLOY_LEASE_NAMESPACE": "ns1",
           "POD_NAME": pod, "SPECDEPLOY_LEASE_DURATION_S": "4", "SPECDEPLOY_METRICS_PORT": str(port)}
    logs = os.environ.get("SPECDEPLOY_TEST_LOG_DIR")  # set it to keep each operator's log
    log = open(Path(logs) / f"{pod}.log" if logs else os.devnull, "w")
    return subprocess.Popen([sys.executable, "-m", "specdeploy.cli", "run", "--namespace", "ns1"], env=env,
                            stdout=log, stderr=log)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def _holder(cluster: Cluster) -> str:
    return (cluster.get(LEASE, "specdeploy-operator").get("spec") or {}).get("holderIdentity") or ""


async def test_the_standby_takes_over_within_the_lease_and_the_leader_reports_metrics(emulator: Any, cluster: Cluster) -> None:
    ports = {"a": _port(), "b": _port()}
    procs = {"a": _start("a", ports["a"])}
    try:
        await eventually(lambda: _holder(cluster).startswith("a-"), timeout=30, what="a holds the Lease")
        procs["b"] = _start("b", ports["b"])
        await eventually(lambda: _get(ports["b"], "/readyz")[0] == 200, timeout=30, what="the standby ready")
        await cluster.create(with_identity(LLAMA, "uid-ha"))
        await eventually(lambda: cluster.condition(NAME, "Planned").get("status") == "True", timeout=30, what="Planned by the leader")
        code, text = _get(ports["a"], "/metrics")
        assert code == 200
        assert 'specdeploy_reconciles_total{result="ok"}' in text
        assert 'specdeploy_resources{ready="False"} 1.0' in text
        assert "specdeploy_reconcile_duration_seconds_count" in text
        assert _holder(cluster).startswith("a-")  # the standby did not act
        procs["a"].send_signal(signal.SIGKILL)
        procs["a"].wait(10)
        killed = time.monotonic()
        await eventually(lambda: _holder(cluster).startswith("b-"), timeout=20, what="b takes the Lease")
        await cluster.patch_spec(NAME, {"draft": {"numSpeculativeTokens": 5}}, generation=2)
        await eventually(lambda: cluster.sd(NAME)["status"].get("observedGeneration") == 2, timeout=20, what="b reconciles")
        assert time.monotonic() - killed < 15
        assert '"num_speculative_tokens":5' in " ".join(cluster.get(DEPLOYMENT, NAME)["spec"]["template"]["spec"]["containers"][0]["args"])
    finally:
        for proc in procs.values():
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)
