"""A fault-injecting HTTP proxy in front of the emulator (kmock has no injection of its own).

The operator's kubeconfig points at the proxy; the test's own requests go to the emulator
directly. A rule answers matching requests with an HTTP error, delays them (a timeout for a
client with a shorter deadline), for a number of times or until removed. `drop_watches()`
cuts every open watch stream, as a load balancer or an API server restart would.

`partition(mode)` until `heal()` cuts this proxy's client off the API server, as a network
would: "reset" closes every connection (watches too) and each new one; "lease" leaves every
call alone but the Lease's, which hang (answered 504 after the heal, never forwarded); "blackhole"
holds every request and every watch, and forwards the held requests after the heal if the
client is still connected (TCP would retransmit them). `writes` records each write that reached
the API server, with the monotonic instants it was sent and answered, and its body: with one
proxy per operator process, each write is attributed to a process."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
PARTITIONS = ("reset", "lease", "blackhole")


@dataclass(frozen=True)
class Write:
    method: str
    path: str
    status: int
    sent: float  # time.monotonic() when forwarded
    answered: float  # ... when the API server's answer came back
    body: bytes


@dataclass
class Rule:
    method: str
    path: re.Pattern[str]
    status: int | None = None
    delay: float = 0.0
    times: int | None = None  # None: until removed
    hits: int = 0
    hit_at: list[float] = field(default_factory=list)  # time.monotonic() of each hit

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and bool(self.path.search(path)) and (self.times is None or self.hits < self.times)


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status answered)
    _streams: set[web.StreamResponse] = field(default_factory=set)
    writes: list[Write] = field(default_factory=list)
    partitioned: str | None = None
    held: int = 0  # requests a partition holds now
    _healed: asyncio.Event = field(default_factory=asyncio.Event)

    async def partition(self, mode: str) -> None:
        assert mode in PARTITIONS, mode
        self._healed.clear()
        self.partitioned = mode
        if mode == "reset":
            await self.drop_watches()

    def heal(self) -> None:
        self.partitioned = None
        self._healed.set()

    async def _cut(self, request: web.Request, path: str) -> web.StreamResponse | None:
        """What a partition does to this request: an answer, or None to forward it."""
        if self.partitioned == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if self.partitioned == "lease" and "/leases" in path:
            await self._hold()
            return web.Response(status=504, text="the Lease call hung")
        if self.partitioned == "blackhole":
            await self._hold()
            if request.transport is None or request.transport.is_closing():
                raise asyncio.CancelledError  # the client is gone: nothing is delivered
        return None

    async def _hold(self) -> None:
        self.held += 1
        try:
            await self._healed.wait()
        finally:
            self.held -= 1

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
        cut = await self._cut(request, path)
        if cut is not None:
            return cut
        rule = next((r for r in self.rules if r.matches(method, path)), None)
        if rule is not None:
            rule.hits += 1
            rule.hit_at.append(time.monotonic())
            if rule.delay:
                await asyncio.sleep(rule.delay)
            if rule.status is not None:
                self.log.append((method, path, rule.status))
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": rule.status,
                                          "message": f"injected HTTP {rule.status}"}, status=rule.status)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        session: aiohttp.ClientSession = request.app["session"]
        sent = time.monotonic()
        async with session.request(method, self.upstream + path, data=body or None, headers=headers) as upstream:
            self.log.append((method, path, upstream.status))
            if method != "GET":
                self.writes.append(Write(method, path, upstream.status, sent, time.monotonic(), body))
            if "watch=true" not in path:
                data = await upstream.read()
                return web.Response(body=data, status=upstream.status, content_type=upstream.content_type)
            stream = web.StreamResponse(status=upstream.status, headers={"Content-Type": upstream.content_type})
            await stream.prepare(request)
            stream._sd_task = asyncio.current_task()  # type: ignore[attr-defined]
            self._streams.add(stream)
            try:
                async for chunk in upstream.content.iter_any():
                    if self.partitioned == "blackhole":
                        await self._healed.wait()
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
