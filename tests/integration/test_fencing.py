"""Fencing: a leader cut off from the API server stops acting before the standby may start.

Two operator processes as the chart runs them (`chart_process.py`), each behind its own fault
proxy, so that every write the API server receives is attributed to a process, with the instants
it was sent and answered. The leader's network is cut in each of three ways (the API reset,
only the Lease calls hanging, a blackhole whose held requests go through after the heal). It
must exit (leader.FENCED_EXIT) at its renew deadline, the standby take over, and the request
log show every write of the old leader answered before the first write of the new one, and the
Deployment's k never going back."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from specdeploy.controller.process.leader import FENCED_EXIT
from specdeploy.demo import write_kubeconfig

from .chart_process import NO_KUBELET, ChartPod, deployment_container, lease_holder, render
from .conftest import HANG_GUARD_S, Cluster, eventually, example, with_identity
from .fault_proxy import PARTITIONS, FaultProxy, Write, start_proxy

LLAMA = example("llama-3.1-8b-eagle3.yaml")
NAME = LLAMA["metadata"]["name"]
VALUES = ("replicas=2", "watchNamespaces={ns1}", NO_KUBELET)
K_ARG = re.compile(r'"num_speculative_tokens":\s*(\d+)')


@pytest.fixture
async def behind_proxies(emulator: Any, tmp_path: Path) -> Any:
    """start(name) -> (pod, its proxy); every pod is killed and every proxy closed after."""
    container = deployment_container(render(*VALUES))
    started: list[tuple[ChartPod, FaultProxy, Any]] = []

    async def start(name: str) -> tuple[ChartPod, FaultProxy]:
        proxy, runner, url = await start_proxy(str(emulator.url))
        pod = ChartPod(name, container, write_kubeconfig(url, tmp_path / f"kubeconfig-{name}"), log_dir=tmp_path).start()
        started.append((pod, proxy, runner))
        return pod, proxy

    yield start
    for pod, proxy, runner in started:
        proxy.heal()
        await asyncio.to_thread(pod.kill)
        await runner.cleanup()


def _succeeded(proxy: FaultProxy) -> list[Write]:
    return [w for w in proxy.writes if 200 <= w.status < 300]


def _ks(writes: list[Write]) -> list[int]:
    """k in each Deployment write, in the order the API server answered them."""
    ks = []
    for write in sorted(writes, key=lambda w: w.answered):
        if "/deployments" in write.path and write.body:
            ks += [int(k) for k in K_ARG.findall(" ".join(_strings(json.loads(write.body))))]
    return ks


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


@pytest.mark.parametrize("mode", PARTITIONS)
async def test_a_cut_off_leader_stops_writing_before_the_standby_starts(emulator: Any, cluster: Cluster,
                                                                       behind_proxies: Any, mode: str) -> None:
    a, proxy_a = await behind_proxies("a")
    await eventually(lambda: lease_holder(cluster).startswith("a-"), what="a holds the Lease")
    b, proxy_b = await behind_proxies("b")
    await b.until_probe("readinessProbe")
    await cluster.create(with_identity(LLAMA, f"uid-{mode}"))
    await eventually(lambda: cluster.condition(NAME, "Planned").get("status") == "True", what="Planned by a")

    await proxy_a.partition(mode)
    assert a.proc is not None
    assert await asyncio.to_thread(a.proc.wait, HANG_GUARD_S) == FENCED_EXIT
    await eventually(lambda: lease_holder(cluster).startswith("b-"), what="b takes the Lease")
    await cluster.patch_spec(NAME, {"draft": {"numSpeculativeTokens": 5}}, generation=2)
    await eventually(lambda: cluster.sd(NAME)["status"].get("observedGeneration") == 2, what="b reconciles")
    proxy_a.heal()  # a blackhole's held requests would go through now
    await eventually(lambda: proxy_a.held == 0, what="a's held requests delivered or dropped")

    old, new = _succeeded(proxy_a), _succeeded(proxy_b)
    assert old and new
    assert max(w.answered for w in old) < min(w.sent for w in new), "two processes wrote at once"
    ks = _ks(old + new)
    assert ks and ks == sorted(ks) and set(ks) <= {3, 5}, f"k flapped: {ks}"
    args = cluster.get("apps/v1/deployments", NAME)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert K_ARG.findall(" ".join(args)) == ["5"]
