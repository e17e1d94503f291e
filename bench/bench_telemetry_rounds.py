"""How often a good object's pods are scraped while other objects' pods are slow (issue 30).

The operator's own telemetry loop (`controller.telemetry._loop`, default 5 s read timeout) at
`--interval` over one good object and `--slow` objects whose single pod trickles a body that
never ends, on loopback, with the API calls answered in memory. Prints the good object's mean
and worst time between scrapes, and their ratio to the interval.

    .venv/bin/python bench/bench_telemetry_rounds.py --interval 2 --slow 3 --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from typing import Any

from aiohttp import web

from specdeploy.controller.scraping import telemetry as module
from specdeploy.render.labels import labels

TEXT = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 6\n'
        "process_start_time_seconds 1000\n")


class Cluster:
    """Each object's Deployment and ReplicaSet; its one ready pod at `ports[name]` (`pod`) goes to
    the telemetry's pod index, as the operator's pod watch delivers it."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"kind": kind, "metadata": {"name": name, "uid": f"deploy-{name}"}} if kind == "Deployment" else None

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        if kind == "Pod":
            return [self.pod(name) for name in self.ports]
        name = next(n for n in self.ports if f"instance={n}," in selector)
        return [{"metadata": {"uid": f"rs-{name}", "ownerReferences": [{"kind": "Deployment", "uid": f"deploy-{name}", "controller": True}]}}]

    def pod(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": f"{name}-0", "namespace": "ns", "labels": labels(name),
                             "ownerReferences": [{"kind": "ReplicaSet", "uid": f"rs-{name}", "controller": True}]},
                "spec": {"containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": self.ports[name]}]}]},
                "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


async def _site(handler: Any) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def main(interval: float, slow: int, seconds: float) -> None:
    scrapes: list[float] = []

    async def good(request: web.Request) -> web.Response:
        scrapes.append(time.monotonic())
        return web.Response(text=TEXT)

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            while True:
                await response.write(b"#")
                await asyncio.sleep(0.05)
        except ConnectionError:  # the scraper hung up at its deadline
            return response

    runners, ports = [], {}
    for name, handler in [("good", good)] + [(f"slow{i}", trickle) for i in range(slow)]:
        runner, ports[name] = await _site(handler)
        runners.append(runner)
    cluster = Cluster(ports)
    telemetry = module.Telemetry(cluster, logging.getLogger("bench"), interval_s=interval)  # type: ignore[arg-type]
    for name in ports:
        telemetry.pods.observe(cluster.pod(name), "ADDED")
        telemetry.track({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": {"draft": {"numSpeculativeTokens": 1}},
                         "status": {"plan": {"method": "eagle3", "numSpeculativeTokens": 1}, "workload": f"Deployment/{name}"}}, deleted=False)
    loop = asyncio.create_task(module._loop(telemetry))
    await asyncio.sleep(seconds)
    loop.cancel()
    gaps = [b - a for a, b in zip(scrapes, scrapes[1:])]
    print(f"interval {interval:g} s, {slow} slow objects, {seconds:g} s: {len(scrapes)} scrapes of the good object; "
          f"mean gap {statistics.mean(gaps):.2f} s ({statistics.mean(gaps) / interval:.2f}x), worst {max(gaps):.2f} s")
    for runner in runners:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--slow", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0)
    options = parser.parse_args()
    asyncio.run(main(options.interval, options.slow, options.seconds))
