"""The shipped operator at scale on the emulator: N SpeculativeDeployments created in a burst,
time from each create to its Planned=True, the operator's peak RSS, and API requests per create.

The operator runs as its own process (`python -m specdeploy.cli run`, exactly as shipped) so
its RSS is its own; the emulator (bench/indexed_kmock.py: kmock with indexed lookups, since
kmock 0.8 does not scale) runs in this process. Usage:

    python bench/bench_operator.py [--count 500] [--rate 0 (burst) | N creates/s]

Prints one JSON line; bench/RESULTS.md records runs on the project's 2-core machine."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "bench"))

from indexed_kmock import IndexedEmulator  # noqa: E402

import kmock  # noqa: E402

from specdeploy.demo import SD_RESOURCE, register_resources, write_kubeconfig  # noqa: E402

NS = "bench"
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-eagle3.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, as the kubelet stops a pod; SIGKILL after 20 s."""
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _planned(emulator: Any, name: str) -> bool:
    try:
        status = emulator.objects[SD_RESOURCE, NS, name].get("status") or {}
    except KeyError:
        return False
    return any(c.get("type") == "Planned" and c.get("status") == "True" for c in status.get("conditions") or [])


async def bench(count: int, rate: float, timeout: float, trace: str | None = None) -> dict[str, Any]:
    base = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="specdeploy-bench-") as tmp:
        async with IndexedEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", Path(tmp) / "kubeconfig")
            # No kubelet runs a preflight Job on the emulator: the operator runs none.
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "operator"), "SPECDEPLOY_PREFLIGHT": "false"}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            command = [sys.executable, "-m", "specdeploy.cli"]
            if trace:  # tracemalloc snapshots on SIGUSR1 (bench/traced_operator.py)
                env["BENCH_TRACE_DIR"] = trace
                command = [sys.executable, str(ROOT / "bench" / "traced_operator.py")]
            if os.environ.get("BENCH_LAUNCHER"):  # experiments: another launcher of the same module
                command = [sys.executable, os.environ["BENCH_LAUNCHER"]]
            operator = subprocess.Popen([*command, "run", "--namespace", NS], env=env,
                                        stdout=subprocess.DEVNULL, stderr=open(os.environ.get("BENCH_OPERATOR_LOG", os.devnull), "w"))
            try:
                # Started: its watch on the CRs is open.
                deadline = time.monotonic() + 60
                while emulator.request_counts[("operator", "GET")] < 4 and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)
                rss_idle = _peak_rss_mib(operator.pid)
                if trace:  # snapshot 0: idle
                    operator.send_signal(signal.SIGUSR1)
                    await asyncio.sleep(5.0)
                before = sum(v for (who, _), v in emulator.request_counts.items() if who == "operator")
                created: dict[str, float] = {}
                planned: dict[str, float] = {}
                import aiohttp

                async def watch_planned() -> None:
                    """Polls the emulator's store while the creates go on."""
                    deadline = time.monotonic() + timeout
                    halfway = False
                    while len(planned) < count and time.monotonic() < deadline:
                        now = time.monotonic()
                        if trace and not halfway and len(planned) >= count // 2:
                            halfway = True
                            operator.send_signal(signal.SIGUSR1)
                        for name in created.keys() - planned.keys():
                            if _planned(emulator, name):
                                planned[name] = now
                        await asyncio.sleep(0.05)

                poller = asyncio.create_task(watch_planned())
                async with aiohttp.ClientSession() as session:
                    url = f"http://127.0.0.1:{port}/apis/specdeploy.io/v1alpha1/namespaces/{NS}/speculativedeployments"
                    start = time.monotonic()
                    for i in range(count):
                        doc = copy.deepcopy(base)
                        name = f"bench-{i:04d}"
                        doc["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{i}", "resourceVersion": "1", "generation": 1}
                        posted = time.monotonic()
                        async with session.post(url, json=doc) as response:
                            assert response.status in (200, 201), await response.text()
                        created[name] = posted
                        if rate > 0:
                            await asyncio.sleep(max(0.0, start + (i + 1) / rate - time.monotonic()))
                await poller
                await asyncio.sleep(2.0)  # let the last writes land before counting
                if trace:  # snapshots 2 and 3: all planned, and once kopf's idle workers are gone
                    for _ in range(2):
                        operator.send_signal(signal.SIGUSR1)
                        await asyncio.sleep(float(os.environ.get("BENCH_TRACE_SETTLE_S", "10")))
                after = sum(v for (who, _), v in emulator.request_counts.items() if who == "operator")
                writes = sum(v for (who, m), v in emulator.request_counts.items() if who == "operator" and m in ("POST", "PATCH", "DELETE"))
                latencies = sorted(planned[n] - created[n] for n in planned)
                quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
                return {
                    "count": count, "rate_per_s": rate or "burst", "planned": len(planned),
                    "p50_s": round(quantile(0.50), 2), "p95_s": round(quantile(0.95), 2), "p99_s": round(quantile(0.99), 2),
                    "max_s": round(latencies[-1], 2) if latencies else None,
                    "all_planned_after_s": round(max(planned.values()) - min(created.values()), 1) if planned else None,
                    "rss_idle_mib": round(rss_idle, 1), "rss_peak_mib": round(_peak_rss_mib(operator.pid), 1),
                    "requests_per_create": round((after - before) / count, 1),
                    "writes_per_create_incl_events": round(writes / count, 2),
                    "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1), "median_s": round(statistics.median(latencies), 2) if latencies else None,
                }
            finally:
                stop(operator)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--rate", type=float, default=0.0, help="creates per second; 0 = as fast as possible")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--trace", metavar="DIR", help="run the operator under tracemalloc; snapshots at half and all planned")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.count, args.rate, args.timeout, args.trace))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
