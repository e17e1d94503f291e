"""Two operator replicas as the chart runs them (tests/integration/chart_process.py: the
Deployment's rendered args and env, the chart's default 12 s lease) on the emulator:

- handover: the leader is stopped (SIGTERM as the kubelet does, or SIGKILL as a crash) and a
  spec change is made at that instant; measured: the leader's exit, the standby holding the
  Lease, and the standby's reconcile of the change (observedGeneration);
- soak (`--soak-s`, 300 for the issue's five minutes): the standby's liveness probe at the
  chart's livenessProbe.periodSeconds for that long; every probe must answer 200.

Usage: python bench/bench_ha.py [--runs 3] [--soak-s 0] (--runs 0: the soak alone). Prints one JSON line;
bench/RESULTS.md records runs on the project's 2-core machine."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kmock
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from specdeploy.controller.process.leader import LEASE_DURATION  # noqa: E402
from specdeploy.demo import SD_RESOURCE, register_resources, write_kubeconfig  # noqa: E402
from specdeploy.emulator import ApiServerEmulator  # noqa: E402
from tests.integration.chart_process import NO_KUBELET, ChartPod, deployment_container, free_port, render  # noqa: E402

LEASE = ("coordination.k8s.io/v1/leases", "ns1", "specdeploy-operator")
SD_PATH = "/apis/specdeploy.io/v1alpha1/namespaces/ns1/speculativedeployments"
CHART_LEASE = {"SPECDEPLOY_LEASE_DURATION_S": str(LEASE_DURATION.default)}  # not the tests' shortened one


def _holder(emulator: Any) -> str:
    try:
        return (emulator.objects[LEASE].raw.get("spec") or {}).get("holderIdentity") or ""
    except KeyError:
        return ""


async def _until(check: Any, limit: float = 120) -> float:
    """Monotonic instant at which check() first held (polled every 20 ms)."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(str(check))
        await asyncio.sleep(0.02)
    return time.monotonic()


def _generation(emulator: Any, name: str) -> int:
    return int((emulator.objects[SD_RESOURCE, "ns1", name].raw.get("status") or {}).get("observedGeneration") or 0)


async def _handover(emulator: Any, kubeconfig: Path, logs: Path, sig: signal.Signals, run: int) -> dict[str, float]:
    container = deployment_container(render("replicas=2", "watchNamespaces={ns1}", NO_KUBELET))
    pods = [ChartPod(f"{n}{run}", container, kubeconfig, log_dir=logs, extra_env=CHART_LEASE) for n in "ab"]
    doc = copy.deepcopy(next(d for d in yaml.safe_load_all((ROOT / "examples" / "qwen3-8b-ngram.yaml").read_text()) if d))
    name = doc["metadata"]["name"] = f"ha-{run}"
    doc["metadata"].update(namespace="ns1", uid=f"uid-{run}", generation=1)
    try:
        pods[0].start()
        await _until(lambda: _holder(emulator).startswith(pods[0].name + "-"))
        pods[1].start()
        await pods[1].until_probe("readinessProbe", timeout=300)
        await emulator.post(SD_PATH, json=doc)
        await _until(lambda: _generation(emulator, name) == 1)
        stopped = time.monotonic()
        pods[0].signal(sig)
        await emulator.patch(f"{SD_PATH}/{name}", json={"metadata": {"generation": 2}, "spec": {"draft": {"numSpeculativeTokens": 4}}})
        exited = await _until(lambda: pods[0].proc.poll() is not None)  # type: ignore[union-attr]
        held = await _until(lambda: _holder(emulator).startswith(pods[1].name + "-"))
        acted = await _until(lambda: _generation(emulator, name) == 2)
        return {"exit_s": exited - stopped, "lease_s": held - stopped, "reconciled_s": acted - stopped}
    finally:
        for pod in pods:
            pod.kill()


async def _soak(emulator: Any, kubeconfig: Path, logs: Path, seconds: float) -> dict[str, Any]:
    container = deployment_container(render("replicas=2", "watchNamespaces={ns1}", NO_KUBELET))
    pods = [ChartPod(f"soak-{n}", container, kubeconfig, log_dir=logs, extra_env=CHART_LEASE) for n in "ab"]
    period = container["livenessProbe"]["periodSeconds"]
    answers: list[int] = []
    try:
        pods[0].start()
        await _until(lambda: _holder(emulator).startswith("soak-a-"))
        pods[1].start()
        await pods[1].until_probe("readinessProbe", timeout=300)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            answers.append(await asyncio.to_thread(pods[1].probe, "livenessProbe"))
            await asyncio.sleep(period)
        return {"soak_s": seconds, "period_s": period, "probes": len(answers), "not_200": sum(a != 200 for a in answers),
                "standby_still_standby": _holder(emulator).startswith("soak-a-")}
    finally:
        for pod in pods:
            pod.kill()


async def _on_fresh_emulator(step: Any, *args: Any) -> Any:
    """`step(emulator, kubeconfig, logs, *args)` on its own emulator: kmock logs every request
    and answers slower the more it holds (0.2-1 s per request after thousands), which starved
    later runs' Lease renewals when the runs shared one."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        async with ApiServerEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", Path(tmp) / "kubeconfig")
            return await step(emulator, kubeconfig, Path(tmp), *args)


async def main(runs: int, soak_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"lease_duration_s": LEASE_DURATION.default}
    for sig in (signal.SIGTERM, signal.SIGKILL) if runs else ():
        results, failed = [], 0
        for i in range(runs):
            try:
                results.append(await _on_fresh_emulator(_handover, sig, i))
            except TimeoutError:  # a step did not happen within 120 s: counted, not waited for
                failed += 1
        out[sig.name] = {k: {"median": round(statistics.median(r[k] for r in results), 2),
                             "max": round(max(r[k] for r in results), 2)} for k in (results[0] if results else ())}
        out[sig.name]["runs_failed"] = failed
    if soak_s:
        out["soak"] = await _on_fresh_emulator(_soak, soak_s)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--soak-s", type=float, default=0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.runs, args.soak_s))))
