"""The webhook server's limits, met by clients that are not the API server: the port takes
unauthenticated connections, so a client must not hold it or its memory.

No assertion here is about time. The read deadline is set short (`DEADLINE_S`) so that its effect
comes soon, and each test waits for that effect (a connection closed by the server, a 429, an
answer); HANG_GUARD_S only turns a hang into a failure."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specdeploy.controller.admission import webhook
from tests.integration.chart_process import self_signed
from tests.integration.conftest import HANG_GUARD_S, NS, Operator, eventually, example, with_identity

pytestmark = pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0, reason="needs openssl")

DEADLINE_S = 3  # the read deadline under test
# How long a cut may take to come: 10x the deadline, for a loaded machine. Still well under what
# kopf's server gave (asyncio's 60 s for a TLS handshake, aiohttp's hour for headers, no limit
# for a body), so a server without the deadline fails here rather than at the hang guard.
CUT_WITHIN_S = min(HANG_GUARD_S, 10 * DEADLINE_S)
SLOTS = 2  # reviews read or judged at once


class Server:
    def __init__(self, port: int, tls: Path) -> None:
        self.port, self.tls = port, tls
        self.url = f"https://localhost:{port}/{webhook.HANDLER_ID}"
        self.context = ssl.create_default_context(cafile=str(tls / "tls.crt"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _review_bytes(uid: str = "uid-good") -> bytes:
    obj = with_identity(example("qwen3-8b-ngram.yaml"), uid)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "CREATE", "name": obj["metadata"]["name"], "namespace": NS, "object": obj}}).encode()


async def post(server: Server, body: bytes | None = None) -> tuple[int, dict[str, str], str]:
    """One review over a new connection: status, headers, body."""
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url, data=body or _review_bytes(), ssl=server.context,
                                headers={"Content-Type": "application/json"}) as response:
            return response.status, dict(response.headers), await response.text()


@pytest.fixture
async def server(emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    made = Server(_free_port(), self_signed(tmp_path / "tls"))
    monkeypatch.setenv(webhook.PORT_ENV, str(made.port))
    monkeypatch.setenv(webhook.CERT_DIR_ENV, str(made.tls))
    monkeypatch.setenv(webhook.READ_DEADLINE_S.name, str(DEADLINE_S))
    monkeypatch.setenv(webhook.MAX_REVIEWS.name, str(SLOTS))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    op = Operator(emulator)
    await op.start()

    async def answers() -> bool:
        try:
            return (await post(made))[0] == 200
        except aiohttp.ClientConnectorError:
            return False

    for _ in range(int(HANG_GUARD_S * 10)):  # the server starts once kopf has scanned the resources
        if await answers():
            break
        await asyncio.sleep(0.1)
    yield made
    await op.stop()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection (EOF, reset or a TLS end) within CUT_WITHIN_S; it
    sends nothing else to a request that never arrived whole."""
    try:
        data = await asyncio.wait_for(reader.read(), CUT_WITHIN_S)
    except (ConnectionError, ssl.SSLError):
        return True
    except asyncio.TimeoutError:
        return False
    return data == b""


async def tls_connection(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port, ssl=server.context, server_hostname="localhost")


def _headers(length: int, keep_alive: bool = True) -> bytes:
    return (f"POST /{webhook.HANDLER_ID} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode()


async def slow_body(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Whole headers, then 10 bytes of a 1000-byte body, then nothing: this review holds a slot.
    (The caller keeps the writer: a StreamWriter closes its connection when collected.)"""
    reader, writer = await tls_connection(server)
    writer.write(_headers(1000) + b"{" * 10)
    await writer.drain()
    return reader, writer


async def test_slow_clients_are_cut_off_while_a_good_review_is_answered(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    silent, silent_writer = await asyncio.open_connection("127.0.0.1", server.port)  # TCP only: the TLS handshake never starts
    headers, writer = await tls_connection(server)
    writer.write(b"P")  # one byte of the request line, then nothing
    await writer.drain()
    body, body_writer = await slow_body(server)
    # A kept-alive connection: one whole review answered, then one byte of the next request.
    kept, kept_writer = await tls_connection(server)
    review = _review_bytes("uid-kept")
    kept_writer.write(_headers(len(review)) + review)
    await kept_writer.drain()
    status_line = await asyncio.wait_for(kept.readuntil(b"\r\n\r\n"), HANG_GUARD_S)
    assert status_line.startswith(b"HTTP/1.1 200") and b"Connection: close" not in status_line, status_line
    length = int(next(line.split(b":")[1] for line in status_line.split(b"\r\n") if line.lower().startswith(b"content-length")))
    assert json.loads(await kept.readexactly(length))["response"]["allowed"] is True
    kept_writer.write(b"P")
    await kept_writer.drain()

    status, _, text = await post(server)  # the server answers meanwhile
    assert status == 200 and json.loads(text)["response"]["allowed"] is True

    for what, reader in {"handshake": silent, "headers": headers, "body": body, "kept-alive": kept}.items():
        assert await closed_by_server(reader), what
    for writer in (silent_writer, writer, body_writer, kept_writer):  # held open by the client until here
        writer.close()
    status, _, _ = await post(server)  # and after
    assert status == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


async def test_reviews_beyond_the_bound_get_429_and_the_slots_come_back(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """SLOTS reviews whose bodies never end hold every slot until the deadline cuts them: a
    review meanwhile is refused at once with 429 (failurePolicy applies), logged once at INFO;
    then the slots are free again."""
    caplog.set_level(logging.INFO)
    held = [await slow_body(server) for _ in range(SLOTS)]
    refusals = []

    async def refused() -> bool:
        status, headers, text = await post(server)
        if status == 429:
            refusals.append((headers.get("Retry-After"), text, headers.get("Connection")))
        return status == 429

    for _ in range(int(HANG_GUARD_S * 10)):  # until both slow reviews hold their slot
        if await refused():
            break
        await asyncio.sleep(0.05)
    assert await refused() and await refused()  # still full: their bodies never end
    assert refusals[0] == ("1", f"more than {SLOTS} reviews at once", "close")
    logged = [r for r in caplog.records if r.name == "specdeploy.webhook" and "Refused reviews beyond" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.INFO, logged

    for reader, writer in held:
        assert await closed_by_server(reader)
        writer.close()

    async def answered() -> bool:
        return (await post(server))[0] == 200

    assert await eventually_async(answered), "the slots never came back"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


async def eventually_async(check: Any) -> bool:
    """`eventually` for a coroutine check."""
    for _ in range(int(HANG_GUARD_S * 20)):
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_the_heap_is_trimmed_once_the_reviews_stop() -> None:
    """One trim when the last review of a busy period ends and no other starts for quiet_s, not
    one per review; a review that starts during the quiet time puts it off."""
    trimmed: list[int] = []
    slots = webhook.ReviewSlots(2, trim=lambda: trimmed.append(1), quiet_s=0.0)
    assert slots.take() and slots.take() and not slots.take()
    assert slots.refused == 1
    slots.give()
    slots.give()
    assert slots.take()  # within the quiet time: no trim yet
    slots.give()
    await eventually(lambda: trimmed == [1], what="one trim")
    await asyncio.sleep(0)
    assert trimmed == [1] and slots.busy == 0
    webhook.trim_heap()  # glibc's malloc_trim here; nothing where the C library has none
