"""A draft canary with real vLLM on CPU: the operator (kopf on the kmock API) renders the stable
and canary Deployments, and this test runs each one's vLLM container with its exact args
(test_speculative_serving.py's Server), plays the Deployment, ReplicaSet and endpoints
controllers (kmock runs none), and keeps a client sending completions to the Service's Ready
endpoints the whole time.

1. Stable: a draft with other random weights (accepts next to nothing). Change spec.draft to a
   draft that is the target's own weights (accepts what greedy decoding emits): the canary
   serves beside the stable pod, is promoted, the stable Deployment rolls to it (a new pod
   Ready before the old one leaves: maxUnavailable 0), the canary is deleted.
2. Change spec.draft back to the random draft: its canary is rolled back, and the stable
   Deployment is not written.
Throughout: 0 failed requests. With SPECDEPLOY_CANARY_TRACES=<dir>, each arm's /metrics pages
are recorded for bench/bench_canary.py (tests/fixtures/metrics/canary/).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from test_speculative_serving import Server, _config, _document, _get, _post
from tiny_models import build_pair

pytest.importorskip("vllm")
pytest.importorskip("kmock")

from tests.integration.conftest import (  # noqa: E402,F401  (fixtures: the operator on kmock)
    DEPLOYMENT, NS, Cluster, Operator, cluster, emulator, eventually, kmock_options, operator, with_identity,
)

TELEMETRY_INTERVAL_S = 0.5
NAME = "tiny-canary"
PROMPT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture
def fast_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_TELEMETRY_INTERVAL_S", str(TELEMETRY_INTERVAL_S))
    # Two or three vLLM CPU servers at once on a shared host: each binds its OpenMP threads to the
    # same cores by default and spins there, which starved the second one's start (not healthy in
    # 420 s). One unbound thread each; the pod's own args and env are otherwise as rendered.
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("canary-models")
    target, random_draft = build_pair(root)
    copy = root / "tiny-target-copy"  # the target's own weights, under another path: a draft that accepts everything
    shutil.copytree(target, copy)
    return {"target": target, "random": random_draft, "copy": copy}


def _draft(path: Path) -> dict[str, Any]:
    return {"method": "draft_model", "model": str(path), "config": _config(path), "numSpeculativeTokens": 3, "tensorParallelSize": 1}


class Service:
    """The Service's endpoints (Ready pods) and a client sending completions to them in turn,
    as kube-proxy spreads connections; every failure is counted."""

    def __init__(self, model: str):
        self.model = model
        self.endpoints: list[str] = []
        self.lock = threading.Lock()
        self.ok = 0
        self.failed: list[str] = []
        self.by_endpoint: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}  # requests sent to each endpoint and not yet answered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def add(self, url: str) -> None:
        with self.lock:
            self.endpoints.append(url)

    def remove(self, url: str) -> None:
        with self.lock:
            self.endpoints.remove(url)

    def drained(self, url: str) -> bool:
        """No request to `url` is in flight (a terminating pod answers what it was sent)."""
        with self.lock:
            return not self.in_flight.get(url)

    def _run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            time.sleep(0.2)  # a steady trickle, not a flood: the CPU servers share two cores with the rest
            with self.lock:  # the endpoint is chosen when the request is sent, as kube-proxy does
                url = self.endpoints[turn % len(self.endpoints)] if self.endpoints else None
                if url is not None:
                    self.in_flight[url] = self.in_flight.get(url, 0) + 1
            turn += 1
            if url is None:
                continue
            try:
                out = _post(url + "/v1/completions", {"model": self.model, "prompt": PROMPT, "max_tokens": 32, "temperature": 0,
                                                      "ignore_eos": True})
                assert out["choices"][0]["text"]
                self.ok += 1
                self.by_endpoint[url] = self.by_endpoint.get(url, 0) + 1
            except (urllib.error.URLError, ConnectionError, TimeoutError, AssertionError, KeyError) as exc:
                self.failed.append(f"{url}: {exc!r}")
            finally:
                with self.lock:
                    self.in_flight[url] -= 1


class Traces:
    """Each arm's /metrics pages, one file per page, when SPECDEPLOY_CANARY_TRACES names a folder."""

    def __init__(self) -> None:
        folder = os.environ.get("SPECDEPLOY_CANARY_TRACES")
        self.folder = Path(folder) if folder else None
        self.started = time.monotonic()

    def record(self, stage: str, arm: str, server: Server) -> None:
        if self.folder is None:
            return
        _, page = _get(server.url + "/metrics")
        out = self.folder / stage / arm
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{time.monotonic() - self.started:09.3f}.txt").write_text(page)


def _container(cluster: Cluster, name: str) -> dict[str, Any]:
    containers = cluster.get(DEPLOYMENT, name)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "vllm")


def _draft_of(container: dict[str, Any]) -> str:
    args = container["args"]
    return json.loads(args[args.index("--speculative-config") + 1])["model"]


async def _replica_set(cluster: Cluster, deployment: str, suffix: str) -> str:
    """The ReplicaSet the Deployment controller makes for the Deployment's current template."""
    dep = cluster.get(DEPLOYMENT, deployment)
    meta = dep["metadata"]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": f"{meta['name']}-{suffix}", "namespace": NS, "labels": dep["spec"]["template"]["metadata"]["labels"],
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                            "uid": meta["uid"], "controller": True}]},
          "spec": {"selector": dep["spec"]["selector"], "template": dep["spec"]["template"]}}
    response = await cluster.k.post(f"/apis/apps/v1/namespaces/{NS}/replicasets", json=rs)
    assert response.status in (200, 201), await response.text()
    return str((await response.json())["metadata"]["uid"])


async def _pod(cluster: Cluster, deployment: str, pod: str, server: Server, owner: str) -> None:
    labels = cluster.get(DEPLOYMENT, deployment)["spec"]["template"]["metadata"]["labels"]
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NS, "labels": labels,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-rs", "uid": owner,
                                              "controller": True}]},
            "spec": {"containers": [{"name": "vllm", "image": "vllm", "ports": [{"name": "http", "containerPort": server.port}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    response = await cluster.k.post(f"/api/v1/namespaces/{NS}/pods", json=body)
    assert response.status in (200, 201), await response.text()


async def _delete_pod(cluster: Cluster, pod: str) -> None:
    await cluster.k.delete(f"/api/v1/namespaces/{NS}/pods/{pod}")


async def _ready(cluster: Cluster, deployment: str, replicas: int = 1) -> None:
    await cluster.patch_status(DEPLOYMENT, deployment, {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
                                                        "availableReplicas": replicas})


async def _start(container: dict[str, Any], tmp_path: Path) -> Server:
    server = Server(container, tmp_path)
    await asyncio.to_thread(server.wait_healthy)
    return server


def _rollout(cluster: Cluster) -> dict[str, Any]:
    return cluster.sd(NAME).get("status", {}).get("rollout") or {}


async def _canary_up(cluster: Cluster, tmp_path: Path, service: Service, draft: Path) -> tuple[Server, int]:
    """Change spec.draft; serve the canary the operator renders; mark what the writes of the stable arm are counted from."""
    mark = cluster.mark()
    generation = cluster.sd(NAME)["metadata"].get("generation", 1) + 1
    await cluster.patch_spec(NAME, {"draft": _draft(draft)}, generation=generation)
    canary = f"{NAME}-canary"
    await eventually(lambda: cluster.exists(DEPLOYMENT, canary) and _rollout(cluster).get("phase") == "Canary", what="the canary")
    container = _container(cluster, canary)
    assert _draft_of(container) == str(draft)
    server = await _start(container, tmp_path)
    owner = await _replica_set(cluster, canary, f"c{generation}")
    await _pod(cluster, canary, f"{canary}-{generation}", server, owner)
    await _ready(cluster, canary)
    service.add(server.url)
    return server, mark


async def _canary_gone(cluster: Cluster, service: Service, server: Server, generation_pod: str) -> None:
    """The canary Deployment was deleted: its pod leaves the endpoints first, then stops (a pod's termination)."""
    await eventually(lambda: not cluster.exists(DEPLOYMENT, f"{NAME}-canary"), what="the canary deleted")
    service.remove(server.url)
    await eventually(lambda: service.drained(server.url), what="the canary's requests in flight answered")
    await _delete_pod(cluster, generation_pod)
    await asyncio.to_thread(server.stop)


def _stable_writes(cluster: Cluster, since: int) -> list[str]:
    return [f"{r.method} {r.url.path}" for r in cluster.writes(since, DEPLOYMENT) if r.url.path.rstrip("/").endswith(f"/deployments/{NAME}")]


async def _record_until(traces: Traces, stage: str, arms: dict[str, Server], done: Any) -> Any:
    """Record each arm's pages every telemetry interval until `done()` is truthy."""
    async def check() -> Any:
        for arm, server in arms.items():
            await asyncio.to_thread(traces.record, stage, arm, server)
        return done()

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(TELEMETRY_INTERVAL_S)
    raise AssertionError(f"no decision in {stage}")


async def test_canary_promotes_the_targets_own_weights_and_rolls_back_a_random_draft(
    models: dict[str, Path], tmp_path: Path, fast_telemetry: None, operator: Operator, cluster: Cluster
) -> None:
    from specdeploy.api.spec import API_GROUP, API_VERSION, KIND

    document = {**_document(models["target"], _draft(models["random"])), "rollout": {"strategy": "Canary"}}
    body = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "metadata": {"name": NAME}, "spec": document}
    await cluster.create(with_identity(body, f"uid-{NAME}"))
    await eventually(lambda: cluster.exists(DEPLOYMENT, NAME) and
                     (cluster.get(DEPLOYMENT, NAME)["metadata"].get("annotations") or {}).get("specdeploy.io/draft"), what="the stable Deployment")
    stable = await _start(_container(cluster, NAME), tmp_path)
    service, traces, servers = Service(str(models["target"])), Traces(), [stable]
    try:
        owner = await _replica_set(cluster, NAME, "s1")
        await _pod(cluster, NAME, f"{NAME}-s1", stable, owner)
        await _ready(cluster, NAME)
        service.add(stable.url)
        service.start()

        # 1. The target's own weights as the draft: promoted.
        canary, mark = await _canary_up(cluster, tmp_path, service, models["copy"])
        servers.append(canary)
        assert _stable_writes(cluster, mark) == []  # the stable arm untouched while the canary serves
        await _record_until(traces, "promote", {"stable": stable, "canary": canary},
                            lambda: _draft_of(_container(cluster, NAME)) == str(models["copy"]))
        status = _rollout(cluster)
        print(f"\n[e2e] promote: {json.dumps(status.get('decision'))}\n  stable {status.get('stable')}\n  canary {status.get('canary')}")
        assert status["decision"]["action"] == "Promote" and status["canary"]["acceptanceRate"] > 0.9
        assert cluster.get(DEPLOYMENT, NAME)["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        # The rolling update with maxUnavailable 0: the new pod is Ready before the old one leaves.
        new = await _start(_container(cluster, NAME), tmp_path)
        servers.append(new)
        owner = await _replica_set(cluster, NAME, "s2")
        await _pod(cluster, NAME, f"{NAME}-s2", new, owner)
        service.add(new.url)
        service.remove(stable.url)
        await eventually(lambda: service.drained(stable.url), what="the old pod's requests in flight answered")
        await _delete_pod(cluster, f"{NAME}-s1")
        await asyncio.to_thread(stable.stop)
        await _ready(cluster, NAME)
        await _canary_gone(cluster, service, canary, f"{NAME}-canary-{cluster.sd(NAME)['metadata'].get('generation', 2)}")
        await eventually(lambda: _rollout(cluster).get("phase") == "Promoted", what="Promoted")

        # 2. The random draft again, against a stable arm that accepts everything: rolled back.
        canary2, mark = await _canary_up(cluster, tmp_path, service, models["random"])
        servers.append(canary2)
        await _record_until(traces, "rollback", {"stable": new, "canary": canary2},
                            lambda: _rollout(cluster).get("phase") == "RolledBack")
        status = _rollout(cluster)
        print(f"\n[e2e] rollback: {json.dumps(status.get('decision'))}\n  stable {status.get('stable')}\n  canary {status.get('canary')}")
        assert status["decision"]["action"] == "RollBack" and status["canary"]["acceptanceRate"] < 0.1
        await _canary_gone(cluster, service, canary2, f"{NAME}-canary-{cluster.sd(NAME)['metadata'].get('generation', 3)}")
        assert _stable_writes(cluster, mark) == []  # a rollback never touches the stable arm
        assert _draft_of(_container(cluster, NAME)) == str(models["copy"])
    finally:
        service.stop()
        for server in servers:
            await asyncio.to_thread(server.stop)
    print(f"\n[e2e] canary: {service.ok} requests served, {len(service.failed)} failed; per endpoint {service.by_endpoint}")
    assert service.failed == [] and service.ok > 0
