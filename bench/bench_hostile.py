"""The shipped operator (its own process, `python -m specdeploy.cli run`, the webhook on) against
hostile peers, its memory read from /proc after each phase:

1. reviews: N UPDATE AdmissionReviews over HTTPS, each with a new object uid (kopf's admission
   kept one entry per uid for good): 1 in 20 valid, 1 in 20 refused by the pair rules, the rest
   refused at parse;
2. telemetry: a CR whose pods answer /metrics with a 100 MiB body, a 1 GiB stream, a body that
   trickles for ever and NaN counters, plus an unowned pod with its labels, scraped every
   second next to a healthy CR; then the hostile pods are deleted and the operator left idle.

The emulator (bench/indexed_kmock.py) and the peers run in this process. Usage:

    python bench/bench_hostile.py [--reviews 20000] [--scrape-rounds 20] [--settle-s 30]

Prints one JSON line (MiB; `*_hwm` is the peak so far, VmHWM); bench/RESULTS.md records runs."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "bench"), str(ROOT)]

from bench_operator import _free_port, stop  # noqa: E402
from indexed_kmock import IndexedEmulator  # noqa: E402

import aiohttp  # noqa: E402
import kmock  # noqa: E402

from specdeploy.demo import SD_RESOURCE, register_resources, write_kubeconfig  # noqa: E402
from specdeploy.render.labels import labels  # noqa: E402
from tests.metrics_server import MiB, Peer, big_body, endless_body, nan_body, serve_hostile, serve_metrics, slow_body  # noqa: E402

NS = "bench"
EXAMPLE = ROOT / "examples" / "qwen3-8b-ngram.yaml"


def _memory_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss": fields["VmRSS"], "hwm": fields["VmHWM"]}


def _certificates(directory: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(directory / "tls.key"),
                    "-out", str(directory / "tls.crt")], check=True, capture_output=True)


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "UPDATE", "userInfo": {"username": "bench"},
        "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
        "name": obj["metadata"]["name"], "namespace": NS, "object": obj, "oldObject": obj}}


async def reviews(url: str, cafile: Path, count: int, concurrency: int = 4) -> int:
    """POST `count` UPDATE reviews, each object with a new uid: 1 in 20 valid, the others refused."""
    base = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    context = ssl.create_default_context(cafile=str(cafile))
    refused = 0
    queue = iter(range(count))
    async with aiohttp.ClientSession() as session:
        for _ in range(200):  # the server listens once kopf has scanned the resources
            try:
                async with session.post(url, json=_review({**base, "metadata": {"name": "x", "uid": "u"}}), ssl=context):
                    break
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.2)

        async def worker() -> None:
            nonlocal refused
            for i in queue:
                obj = copy.deepcopy(base)
                obj["metadata"] = {"name": f"sd-{i}", "namespace": NS, "uid": str(uuid.uuid4()), "generation": 2}
                if i % 20 == 1:  # judged in full and refused
                    obj["spec"]["parallelism"] = {"tensorParallelSize": 5}
                elif i % 20:  # refused at parse: cheap, so that tens of thousands of uids fit in minutes
                    obj["spec"]["replicas"] = "two"
                async with session.post(url, json=_review(obj), ssl=context) as response:
                    assert response.status == 200, await response.text()
                    refused += not (await response.json())["response"]["allowed"]

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return refused


async def _post(session: aiohttp.ClientSession, api: str, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    async with session.post(f"{api}{path}", json=obj) as response:
        assert response.status in (200, 201), await response.text()
        return dict(await response.json())


def _pod(cr: str, name: str, port: int, owner: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels(cr)}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{cr}-rs", "uid": owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "vllm", "image": "vllm", "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


async def serving(emulator: Any, session: aiohttp.ClientSession, api: str, name: str, ports: dict[str, int | None]) -> None:
    """A CR, once its Deployment exists, with a ReplicaSet and one pod per port (None: unowned)."""
    doc = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    doc["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "1", "generation": 1}
    await _post(session, api, f"/apis/specdeploy.io/v1alpha1/namespaces/{NS}/speculativedeployments", doc)
    while not (emulator.objects[SD_RESOURCE, NS, name].get("status") or {}).get("workload"):
        await asyncio.sleep(0.2)
    deployment = emulator.objects["apps/v1/deployments", NS, name].raw
    rs = await _post(session, api, f"/apis/apps/v1/namespaces/{NS}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-rs", "namespace": NS, "labels": labels(name), "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": deployment["metadata"]["uid"], "controller": True}]},
        "spec": {"selector": deployment["spec"]["selector"], "template": deployment["spec"]["template"]}})
    for pod, port in ports.items():
        owner = None if pod.endswith("intruder") else rs["metadata"]["uid"]
        await _post(session, api, f"/api/v1/namespaces/{NS}/pods", _pod(name, pod, port or 1, owner))


async def bench(review_count: int, rounds: int, settle_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"reviews": review_count, "scrape_rounds": rounds}
    port, webhook_port = _free_port(), _free_port()
    peers = {"big": Peer(big_body, length=100 * MiB), "stream": Peer(endless_body), "slow": Peer(slow_body),
             "nan": Peer(nan_body), "intruder": Peer(endless_body)}
    with tempfile.TemporaryDirectory(prefix="specdeploy-bench-") as tmp, ExitStack() as stack:
        _certificates(Path(tmp))
        async with IndexedEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", Path(tmp) / "kubeconfig")
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "operator"),
                   "SPECDEPLOY_WEBHOOK_PORT": str(webhook_port), "SPECDEPLOY_WEBHOOK_CERT_DIR": tmp,
                   "SPECDEPLOY_TELEMETRY_INTERVAL_S": "1", "HF_HUB_OFFLINE": "1"}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            operator = subprocess.Popen([sys.executable, "-m", "specdeploy.cli", "run", "--namespace", NS], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                start = time.monotonic()
                refused = await reviews(f"https://localhost:{webhook_port}/validate-speculativedeployment", Path(tmp) / "tls.crt", 1)
                out["idle"] = _memory_mib(operator.pid)
                refused = await reviews(f"https://localhost:{webhook_port}/validate-speculativedeployment", Path(tmp) / "tls.crt", review_count)
                out.update(reviews_refused=refused, reviews_s=round(time.monotonic() - start, 1), after_reviews=_memory_mib(operator.pid))
                ports = {mode: stack.enter_context(serve_hostile(peer)) for mode, peer in peers.items()}
                healthy = stack.enter_context(serve_metrics(lambda: b'vllm:spec_decode_num_drafts_total{engine="0"} 1\n'))
                api = f"http://127.0.0.1:{port}"
                async with aiohttp.ClientSession() as session:
                    await serving(emulator, session, api, "hostile", {f"hostile-{m}": p for m, p in ports.items()})
                    await serving(emulator, session, api, "healthy", {"healthy-0": healthy})
                    while peers["stream"].requests < rounds:
                        await asyncio.sleep(0.5)
                    out["during_scrapes"] = _memory_mib(operator.pid)
                    for mode in peers:
                        async with session.delete(f"{api}/api/v1/namespaces/{NS}/pods/hostile-{mode}"):
                            pass
                    await asyncio.sleep(settle_s)
                out["after_settle"] = _memory_mib(operator.pid)
                out["settle_s"] = settle_s
                out["peer_requests"] = {m: p.requests for m, p in peers.items()}
                out["stream_mib_sent_per_scrape"] = round(peers["stream"].sent / MiB / max(1, peers["stream"].requests), 1)
                out.update(cpus=os.cpu_count(), load_avg_1m=round(os.getloadavg()[0], 1))
                return out
            finally:
                stop(operator)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=20000)
    parser.add_argument("--scrape-rounds", type=int, default=20)
    parser.add_argument("--settle-s", type=float, default=30.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.reviews, args.scrape_rounds, args.settle_s))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
