"""A fleet of N vLLM pods and the few API calls the telemetry makes about them, in a process of
its own (so the operator side's CPU is measured alone), for bench/bench_telemetry_scale.py.

- Each pod is a port on 127.0.0.1 serving /metrics: the page vLLM 0.32.0's CPU build served
  (tests/fixtures/metrics/vllm-0.32.0-ngram-k3.txt, 62 KB, k = 3), its spec-decode counters and
  running-requests gauge moved on at every scrape (400 drafts, 60 % / 40 % / 25 % accepted per
  position), so every scrape counts and the status moves as on a busy cluster.
- One more port answers the Kubernetes API calls of the telemetry from memory, indexed: GET a
  Deployment, a SpeculativeDeployment; LIST ReplicaSets and Pods by label selector (one namespace,
  every pod a realistic ~6 KB object with managedFields); PATCH a status; POST an Event. It
  counts requests by method, and GET /stats returns them with each pod's scrape times.

Started by the bench: `python bench/vllm_fleet.py --template FILE --count N`; it prints one JSON
line (the ports) when it serves. FILE holds one CR, Deployment, ReplicaSet and pod (`objects`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import time
from pathlib import Path
from typing import Any
from aiohttp import web

from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, selector_string

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-ngram-k3.txt"
_MOVING = re.compile(r"^(vllm:spec_decode_num_(?:drafts|draft_tokens|accepted_tokens|accepted_tokens_per_pos)_total"
                     r"|vllm:num_requests_running|process_start_time_seconds)(\{[^}]*\})? \S+$", re.M)
DRAFTS_PER_SCRAPE = 400
ACCEPTED_PER_POSITION = (240, 160, 100)  # of the 400 drafts, those whose first 1, 2, 3 tokens were accepted


class Page:
    """The recorded page with its moving samples as slots."""

    def __init__(self, text: str) -> None:
        self.parts: list[str] = []
        self.slots: list[tuple[str, str]] = []  # (sample name, position label or "")
        last = 0
        for match in _MOVING.finditer(text):
            self.parts.append(text[last:match.start()] + match.group(1) + (match.group(2) or "") + " ")
            position = re.search(r'position="(\d+)"', match.group(2) or "")
            self.slots.append((match.group(1), position.group(1) if position else ""))
            last = match.end()
        self.parts.append(text[last:])

    def render(self, scrapes: int, started: float, running: int) -> bytes:
        """The page after `scrapes` scrapes' worth of drafts."""
        drafts = scrapes * DRAFTS_PER_SCRAPE
        per_pos = [scrapes * a for a in ACCEPTED_PER_POSITION]
        values = {"vllm:spec_decode_num_drafts_total": drafts, "vllm:spec_decode_num_draft_tokens_total": 3 * drafts,
                  "vllm:spec_decode_num_accepted_tokens_total": sum(per_pos), "vllm:num_requests_running": running,
                  "process_start_time_seconds": started}
        out = []
        for part, (name, position) in zip(self.parts, self.slots):
            value = per_pos[int(position)] if position else values[name]
            out.append(f"{part}{float(value)!r}")
        out.append(self.parts[-1])
        return "".join(out).encode()


def objects(template: dict[str, Any], index: int, port: int = 0) -> dict[str, Any]:
    """The CR, Deployment, ReplicaSet and pod of CR number `index`: the template's with its name
    and uids made distinct (the bench's CRs are `bench-0000`, ...), the pod's port `port`."""
    name = f"bench-{index:04d}"
    text = json.dumps(template).replace(template["name"], name).replace("UID-", f"uid-{index:04d}-")
    made = json.loads(text)
    for container in made["pod"]["spec"]["containers"]:
        for declared in container.get("ports") or []:
            if declared.get("name") == "http":
                declared["containerPort"] = port
    made["name"] = name
    return made


class Fleet:
    def __init__(self, template: dict[str, Any], count: int) -> None:
        self.template, self.count = template, count
        self.page = Page(PAGE.read_text())
        self.scrapes: dict[int, list[float]] = collections.defaultdict(list)
        self.requests: collections.Counter[str] = collections.Counter()
        self.objects: dict[tuple[str, str], Any] = {}  # (kind plural, name) -> body
        self.lists: dict[tuple[str, str], bytes] = {}  # (kind plural, label selector) -> JSON list
        self.pod_ports: dict[int, int] = {}  # port -> pod index

    def fill(self, ports: list[int]) -> None:
        """Every object, with each pod's port; lists indexed by the selectors the telemetry sends."""
        every_pod = []
        for index, port in enumerate(ports):
            made = objects(self.template, index, port)
            self.pod_ports[port] = index
            selector = selector_string(made["name"])
            self.objects["speculativedeployments", made["name"]] = made["cr"]
            self.objects["deployments", made["deployment"]["metadata"]["name"]] = made["deployment"]
            self.lists["replicasets", selector] = _list([made["replicaset"]])
            self.lists["pods", selector] = _list([made["pod"]])
            every_pod.append(made["pod"])
        self.lists["pods", f"{MANAGED_BY_LABEL}={MANAGED_BY}"] = _list(every_pod)

    async def metrics(self, request: web.Request) -> web.Response:
        port = request.transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
        pod = self.pod_ports[port]
        self.scrapes[pod].append(time.time())
        body = self.page.render(len(self.scrapes[pod]), 1.796e9 + pod, running=8 + pod % 24)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def api(self, request: web.Request) -> web.Response:
        """/api(s)/.../namespaces/NS/PLURAL[/NAME[/status]]: only what the telemetry asks."""
        self.requests[request.method] += 1
        parts = [p for p in request.path.split("/") if p]
        if request.method == "POST":  # an Event
            return web.json_response({"metadata": {"name": "e"}}, status=201)
        if parts[-1] == "status":
            parts = parts[:-1]
        if request.method == "PATCH":
            key = (parts[-2], parts[-1])
            self.objects[key] = merge(self.objects[key], await request.json())
        if "labelSelector" in request.query:
            body = self.lists.get((parts[-1], request.query["labelSelector"]), _list([]))
            return web.Response(body=body, content_type="application/json")
        obj = self.objects.get((parts[-2], parts[-1]))
        if obj is None:
            return web.json_response({"message": "not found"}, status=404)
        return web.json_response(obj)

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"scrapes": self.scrapes, "requests": self.requests})


def merge(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386), as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _list(items: list[Any]) -> bytes:
    return json.dumps({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}).encode()


async def serve(template: dict[str, Any], count: int) -> None:
    fleet = Fleet(template, count)
    pods = web.Application()
    pods.router.add_get("/metrics", fleet.metrics)
    pod_runner = web.AppRunner(pods, access_log=None)
    await pod_runner.setup()
    ports = []
    for _ in range(count):
        pod_site = web.TCPSite(pod_runner, "127.0.0.1", 0, backlog=16)
        await pod_site.start()
        ports.append(pod_site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    fleet.fill(ports)
    api = web.Application()
    api.router.add_get("/stats", fleet.stats)
    api.router.add_route("*", "/{tail:.*}", fleet.api)
    runner = web.AppRunner(api, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"api": site._server.sockets[0].getsockname()[1], "ports": ports}), flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    options = parser.parse_args()
    asyncio.run(serve(json.loads(options.template.read_text()), options.count))
