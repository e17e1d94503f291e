"""A fault-injecting HTTP proxy in front of the emulator (kmock has no injection of its own).

The operator's kubeconfig points at the proxy; the test's own requests go to the emulator
directly. A rule answers matching requests with an HTTP error, delays them (a timeout for a
client with a shorter deadline), for a number of times or until removed. `drop_watches()`
cuts every open watch stream, as a load balancer or an API server restart would."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@dataclass
class Rule:
    method: str
    path: re.Pattern[str]
    status: int | None = None
    delay: float = 0.0
    times: int | None = None  # None: until removed
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and bool(self.path.search(path)) and (self.times is None or self.hits < self.times)


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status answered)
    _streams: set[web.StreamResponse] = field(default_factory=set)

    def inject(self, method: str, path: str, status: int | None = None, *, delay: float = 0.0, times: int | None = None) -> Rule:
        rule = Rule(method, re.compile(path), status, delay, times)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def count(self, method: str, path: str, status: int | None = None) -> int:
        pattern = re.compile(path)
        return sum(1 for m, p, s in self.log if m == method and pattern.search(p) and (status is None or s == status))

    async def drop_watches(self) -> int:
        streams, self._streams = list(self._streams), set()
        for stream in streams:
            task = getattr(stream, "_sd_task", None)
            if task is not None:
                task.cancel()
        return len(streams)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path_qs
        body = await request.read()
        rule = next((r for r in self.rules if r.matches(method, path)), None)
        if rule is not None:
            rule.hits += 1
            if rule.delay:
                await asyncio.sleep(rule.delay)
            if rule.status is not None:
                self.log.append((method, path, rule.status))
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": rule.status,
                                          "message": f"injected HTTP {rule.status}"}, status=rule.status)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        session: aiohttp.ClientSession = request.app["session"]
        async with session.request(method, self.upstream + path, data=body or None, headers=headers) as upstream:
            self.log.append((method, path, upstream.status))
            if "watch=true" not in path:
                data = await upstream.read()
                return web.Response(body=data, status=upstream.status, content_type=upstream.content_type)
            stream = web.StreamResponse(status=upstream.status, headers={"Content-Type": upstream.content_type})
            await stream.prepare(request)
            stream._sd_task = asyncio.current_task()  # type: ignore[attr-defined]
            self._streams.add(stream)
            try:
                async for chunk in upstream.content.iter_any():
                    await stream.write(chunk)
            except asyncio.CancelledError:
                if request.transport is not None:
                    request.transport.close()
                raise
            except (aiohttp.ClientConnectionResetError, ConnectionResetError):
                pass  # the operator closed its end (stopping)
            finally:
                self._streams.discard(stream)
            return stream


async def start_proxy(upstream: str) -> tuple[FaultProxy, web.AppRunner, str]:
    proxy = FaultProxy(upstream.rstrip("/"))
    app = web.Application()
    app["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    app.router.add_route("*", "/{tail:.*}", proxy.handle)

    async def close_session(app: web.Application) -> None:
        await app["session"].close()

    app.on_cleanup.append(close_session)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return proxy, runner, f"http://127.0.0.1:{port}"
