"""The shipped operator against a slow API server: every request it makes answered LATENCY
seconds late (a delaying proxy, tests/integration/fault_proxy.py, in front of the indexed
emulator, bench/indexed_kmock.py). N SpeculativeDeployments created in a burst; measured: how
many reach Planned=True within the timeout, when the last did, the operator's requests and
writes per CR (counted by the emulator, by user agent: kopf's own requests included), and the
ReconcileTimeout Events.

    python bench/bench_slow_api.py [--count 200] [--latency 3] [--timeout 900]

Run it with --latency 0 for the fast-API figure to compare with. Prints one JSON line;
bench/RESULTS.md records runs on the project's 2-core machine."""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "bench"), str(ROOT / "tests" / "integration")]

from bench_operator import EXAMPLE, NS, _free_port, _planned, stop  # noqa: E402
from fault_proxy import start_proxy  # noqa: E402
from indexed_kmock import IndexedEmulator  # noqa: E402

import kmock  # noqa: E402

from specdeploy.demo import write_kubeconfig  # noqa: E402
from specdeploy.demo import register_resources  # noqa: E402

METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")


def _operator_requests(emulator: Any, methods: tuple[str, ...] = METHODS) -> int:
    return sum(v for (who, method), v in emulator.request_counts.items() if who == "operator" and method in methods)


async def _create(port: int, count: int) -> dict[str, float]:
    """The CRs, straight to the emulator (not through the proxy): name -> when created."""
    base = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    created = {}
    url = f"http://127.0.0.1:{port}/apis/specdeploy.io/v1alpha1/namespaces/{NS}/speculativedeployments"
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            doc = copy.deepcopy(base)
            doc["metadata"] = {"name": f"slow-{i:04d}", "namespace": NS, "uid": f"uid-{i}", "resourceVersion": "1", "generation": 1}
            async with session.post(url, json=doc) as response:
                assert response.status in (200, 201), await response.text()
            created[doc["metadata"]["name"]] = time.monotonic()
    return created


async def _wait_planned(emulator: Any, created: dict[str, float], timeout: float) -> dict[str, float]:
    planned: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(planned) < len(created) and time.monotonic() < deadline:
        for name in created.keys() - planned.keys():
            if _planned(emulator, name):
                planned[name] = time.monotonic()
        await asyncio.sleep(0.5)
    return planned


def _by_request(log: list[tuple[str, str, int]]) -> dict[str, int]:
    """The operator's requests (as the proxy forwarded them) by method and resource."""
    def kind(method: str, path: str) -> str:
        parts = path.split("?")[0].strip("/").split("/")
        plural = parts[parts.index("namespaces") + 2] if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2 else parts[-1]
        verb = "WATCH" if "watch=true" in path else method
        return f"{verb} {plural}" + ("/status" if parts[-1] == "status" else "")

    return dict(collections.Counter(kind(method, path) for method, path, _ in log).most_common())


def _timeouts(emulator: Any) -> int:
    events = kmock.resource("v1/events")
    return sum(1 for (resource, _, _), obj in list(emulator.objects.items())
               if resource == events and (obj.raw or {}).get("reason") == "ReconcileTimeout")


async def bench(count: int, latency: float, timeout: float) -> dict[str, Any]:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="specdeploy-slow-api-") as tmp:
        async with IndexedEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            proxy, runner, url = await start_proxy(f"http://127.0.0.1:{port}")
            for method in METHODS:
                proxy.inject(method, ".", delay=latency)
            env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(url, Path(tmp) / "kubeconfig")),
                   "PYTHONPATH": str(ROOT / "operator"), "SPECDEPLOY_PREFLIGHT": "false"}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            operator = subprocess.Popen([sys.executable, "-m", "specdeploy.cli", "run", "--namespace", NS], env=env,
                                        stdout=subprocess.DEVNULL, stderr=open(os.environ.get("BENCH_OPERATOR_LOG", os.devnull), "w"))
            try:
                while emulator.request_counts[("operator", "GET")] < 4:  # its watches are open
                    await asyncio.sleep(0.5)
                await asyncio.sleep(2 * latency + 1)
                before, writes_before = _operator_requests(emulator), _operator_requests(emulator, ("POST", "PATCH", "PUT", "DELETE"))
                logged = len(proxy.log)
                start = time.monotonic()
                created = await _create(port, count)
                planned = await _wait_planned(emulator, created, timeout)
                await asyncio.sleep(2 * latency + 2)  # the last writes (kopf's annotation) land
                requests = _operator_requests(emulator) - before
                writes = _operator_requests(emulator, ("POST", "PATCH", "PUT", "DELETE")) - writes_before
                return {"count": count, "latency_s": latency, "planned": len(planned),
                        "all_planned_after_s": round(max(planned.values()) - start, 1) if len(planned) == count else None,
                        "requests_per_cr": round(requests / count, 2), "writes_per_cr": round(writes / count, 2),
                        "reconcile_timeout_events": _timeouts(emulator), "load_avg_1m": round(os.getloadavg()[0], 1),
                        "requests": _by_request(proxy.log[logged:])}
            finally:
                stop(operator)
                await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--latency", type=float, default=3.0, help="seconds added to every request the operator makes")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every CR to be planned")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.count, args.latency, args.timeout))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
