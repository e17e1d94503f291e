"""The webhook's memory under review load, and after it: the shipped operator (its own process,
`python -m specdeploy.cli run`, the webhook on) gets UPDATE reviews of a large CR (object and
oldObject, each `--cr-kib`) from `--clients` clients at once, `--reviews` in all, while `--slow`
clients trickle one byte and stall; then nothing for `--settle-s`. Its memory is read from
/proc (RSS now; VmHWM, the peak so far) when idle, at the end of the load and after the settle.

`--source` runs another tree's operator package (e.g. main's, for the numbers before a change).
The emulator (bench/indexed_kmock.py) and the clients run in this process. Usage:

    python bench/bench_webhook_memory.py [--reviews 400] [--clients 32] [--cr-kib 900] [--settle-s 5]

Prints one JSON line (MiB); bench/RESULTS.md records runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "bench"), str(ROOT)]

from bench_hostile import _certificates, _memory_mib  # noqa: E402
from bench_operator import _free_port, stop  # noqa: E402
from indexed_kmock import IndexedEmulator  # noqa: E402

import aiohttp  # noqa: E402
import kmock  # noqa: E402

from specdeploy.demo import register_resources, write_kubeconfig  # noqa: E402

NS = "bench"
EXAMPLE = ROOT / "examples" / "qwen3-8b-ngram.yaml"


def _large_review(cr_kib: int) -> bytes:
    obj = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    obj["metadata"] = {"name": "large", "namespace": NS, "uid": "uid-large", "generation": 2}
    obj["spec"]["target"]["config"]["padding"] = ["x" * 1000] * cr_kib  # an inline config key vLLM ignores
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "UPDATE", "name": "large", "namespace": NS, "object": obj, "oldObject": obj}}).encode()


async def _slow(port: int, context: ssl.SSLContext, stop_at: asyncio.Event) -> int:
    """Connections that send one byte and stall, opened again each time the server cuts one."""
    cut = 0
    while not stop_at.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        writer.write(b"P")
        try:
            await reader.read()
            cut += 1
        except (ConnectionError, ssl.SSLError):
            cut += 1
        writer.close()
    return cut


async def load(url: str, cafile: Path, body: bytes, count: int, clients: int) -> dict[str, int]:
    """`count` POSTs of `body` from `clients` at once; the statuses counted."""
    context = ssl.create_default_context(cafile=str(cafile))
    statuses: dict[str, int] = {}
    queue = iter(range(count))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

        async def client() -> None:
            for _ in queue:
                async with session.post(url, data=body, ssl=context, headers={"Content-Type": "application/json"}) as response:
                    await response.read()
                    statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1

        await asyncio.gather(*(client() for _ in range(clients)))
    return statuses


async def _ready(url: str, cafile: Path) -> None:
    context = ssl.create_default_context(cafile=str(cafile))
    async with aiohttp.ClientSession() as session:
        for _ in range(600):  # the server listens once kopf has scanned the resources
            try:
                async with session.post(url, data=_large_review(1), ssl=context):
                    return
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.2)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"reviews": args.reviews, "clients": args.clients, "cr_kib": args.cr_kib, "slow": args.slow,
                           "source": str(args.source)}
    port, webhook_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="specdeploy-bench-") as tmp:
        _certificates(Path(tmp))
        cafile, url = Path(tmp) / "tls.crt", f"https://localhost:{webhook_port}/validate-speculativedeployment"
        async with IndexedEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", Path(tmp) / "kubeconfig")
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(args.source),
                   "SPECDEPLOY_WEBHOOK_PORT": str(webhook_port), "SPECDEPLOY_WEBHOOK_CERT_DIR": tmp, "HF_HUB_OFFLINE": "1"}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            operator = subprocess.Popen([sys.executable, "-m", "specdeploy.cli", "run", "--namespace", NS], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                await _ready(url, cafile)
                out["idle"] = _memory_mib(operator.pid)
                body = _large_review(args.cr_kib)
                out["review_mib"] = round(len(body) / 2**20, 2)
                stop_slow = asyncio.Event()
                context = ssl.create_default_context(cafile=str(cafile))
                slow = [asyncio.create_task(_slow(webhook_port, context, stop_slow)) for _ in range(args.slow)]
                start = time.monotonic()
                out["statuses"] = await load(url, cafile, body, args.reviews, args.clients)
                out["load_s"] = round(time.monotonic() - start, 1)
                out["end_of_load"] = _memory_mib(operator.pid)
                stop_slow.set()
                await asyncio.sleep(args.settle_s)
                out["after_settle"] = _memory_mib(operator.pid)
                out["slow_cut"] = sum(t.result() for t in slow if t.done() and not t.exception())
                out.update(settle_s=args.settle_s, cpus=os.cpu_count(), load_avg_1m=round(os.getloadavg()[0], 1))
                return out
            finally:
                stop(operator)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=400)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--cr-kib", type=int, default=900)
    parser.add_argument("--slow", type=int, default=0, help="clients that trickle one byte and stall, during the load")
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--source", type=Path, default=ROOT / "operator", help="the operator package's parent folder")
    print(json.dumps(asyncio.run(bench(parser.parse_args()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
