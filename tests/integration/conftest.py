"""The operator as shipped (`controller.main.run`, kopf in its own thread) against kmock's
Kubernetes emulator over real HTTP (stack.md §2.4). Tests assert on final state: the
emulator may deliver an event twice."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import kmock
import pytest
import yaml

from specdeploy.controller.process.main import run
from specdeploy.demo import SD_RESOURCE, register_resources, write_kubeconfig

NS = "ns1"
ROOT = Path(__file__).resolve().parents[2]
SD_PATH = f"/apis/specdeploy.io/v1alpha1/namespaces/{NS}/speculativedeployments"
DEPLOYMENT = "apps/v1/deployments"
LWS = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
SERVICE = "v1/services"
PDB = "policy/v1/poddisruptionbudgets"
WRITES = {"POST", "PATCH", "PUT", "DELETE"}


def example(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]
    return doc


def with_identity(doc: dict[str, Any], uid: str) -> dict[str, Any]:
    """What the apiserver would add: kopf needs uid (ownerReferences); the emulator replaces
    the resourceVersion."""
    doc = copy.deepcopy(doc)
    doc["metadata"].update(namespace=NS, uid=uid, resourceVersion="1", generation=1)
    return doc


# How long a wait may last before the test calls it a hang. A wait ends as soon as what it waits
# for happens, so this bounds only a failure, never a pass: on a busy 2-core machine importing the
# operator alone takes ~20 s, and no test asserts how long anything took.
HANG_GUARD_S = float(os.environ.get("SPECDEPLOY_TEST_HANG_GUARD_S", "300"))


async def eventually(check: Callable[[], Any], timeout: float = HANG_GUARD_S, what: str = "") -> Any:
    """Poll `check` until it is truthy; AssertionError after `timeout` (a hang)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (KeyError, AssertionError, IndexError, TypeError) as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")


def reconciles_finished() -> float:
    """Reconciles the operator (in this process) has finished, whatever their result: waiting
    for it to move is waiting for a reconcile to end."""
    from specdeploy.controller.process.metrics import METRICS

    return sum(sample.value for metric in METRICS.reconciles.collect() for sample in metric.samples
               if sample.name.endswith("_total"))


async def created(cluster: "Cluster", doc: dict[str, Any], uid: str) -> str:
    name = doc["metadata"]["name"]
    await cluster.create(with_identity(doc, uid))
    await eventually(lambda: cluster.condition(name, "Planned").get("status") == "True", what="Planned=True")
    return name


class Operator:
    """Start/stop the real operator in a thread, as often as a test needs (restarts)."""

    def __init__(self, emulator: Any):
        self.emulator = emulator
        self.thread: threading.Thread | None = None
        self.stop_flag = threading.Event()

    async def start(self) -> None:
        ready, self.stop_flag = threading.Event(), threading.Event()
        watches_before = watches(self.emulator)
        self.thread = threading.Thread(
            target=run, args=([NS], False, None), kwargs={"ready_flag": ready, "stop_flag": self.stop_flag}, daemon=True
        )
        self.thread.start()
        assert await asyncio.to_thread(ready.wait, HANG_GUARD_S), "operator did not start"
        await watching(self.emulator, watches_before)

    async def stop(self) -> None:
        if self.thread is not None:
            self.stop_flag.set()
            await asyncio.to_thread(self.thread.join, HANG_GUARD_S)
            assert not self.thread.is_alive(), "operator did not stop"
            self.thread = None


def watches(emulator: Any) -> int:
    """Watch requests the emulator has seen: an operator is listening once its three are open."""
    return sum(1 for r in list(emulator) if r.action == kmock.action.WATCH)


async def watching(emulator: Any, before: int, process: Any = None) -> None:
    """Wait until an operator started after `before` watches has opened its three (the CR,
    Deployments, LeaderWorkerSets): from then on it sees every event. `process`: its subprocess,
    whose early exit is a failure, not a wait."""
    def opened() -> bool:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the operator exited with {process.returncode} before it watched")
        return watches(emulator) >= before + 3

    await eventually(opened, what="the operator's watches")


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    """kmock's emulator with resourceVersions (specdeploy.emulator), as the API server has them."""
    from specdeploy.emulator import ApiServerEmulator

    return {**kmock_options, "cls": ApiServerEmulator}


@pytest.fixture
async def emulator(kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    register_resources(kmock)
    kubeconfig = write_kubeconfig(str(kmock.url), tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # No kubelet here runs a preflight Job: tests/integration/test_preflight.py turns it on
    # with its kubelet double.
    monkeypatch.setenv("SPECDEPLOY_PREFLIGHT", "false")
    return kmock


@pytest.fixture
async def operator(emulator: Any) -> Any:
    op = Operator(emulator)
    await op.start()
    yield op
    await op.stop()


class Cluster:
    """Small helpers over the emulator: create/patch the CR, read objects, count writes."""

    def __init__(self, emulator: Any):
        self.k = emulator

    async def create(self, doc: dict[str, Any]) -> None:
        response = await self.k.post(SD_PATH, json=doc)
        assert response.status == 201 or response.status == 200, await response.text()

    async def patch_spec(self, name: str, spec_patch: dict[str, Any], generation: int) -> None:
        body = {"metadata": {"generation": generation}, "spec": spec_patch}
        response = await self.k.patch(f"{SD_PATH}/{name}", json=body)
        assert response.status == 200, await response.text()

    async def patch_status(self, resource: str, name: str, status: dict[str, Any]) -> None:
        group_version, plural = resource.rsplit("/", 1)
        root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        response = await self.k.patch(f"{root}/namespaces/{NS}/{plural}/{name}/status", json={"status": status})
        assert response.status == 200, await response.text()

    def get(self, resource: str, name: str) -> dict[str, Any]:
        return json.loads(json.dumps(self.k.objects[resource, NS, name].raw))

    def exists(self, resource: str, name: str) -> bool:
        try:
            return not self.k.objects[resource, NS, name].deleted
        except KeyError:
            return False

    def sd(self, name: str) -> dict[str, Any]:
        return self.get(SD_RESOURCE, name)

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        conditions = self.sd(name).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == kind), {})

    def writes(self, since: int = 0, resource: str | None = None) -> list[Any]:
        out = []
        for request in list(self.k)[since:]:
            if str(request.method).upper().split(".")[-1] not in WRITES:
                continue
            if resource is not None and request.resource != kmock.resource(resource):
                continue
            out.append(request)
        return out

    def mark(self) -> int:
        return len(list(self.k))

    def events(self) -> list[dict[str, Any]]:
        """The Events stored (what `kubectl get events` shows), in the order they were created."""
        events = kmock.resource("v1/events")
        return [json.loads(json.dumps(obj.raw)) for (resource, _, _), obj in list(self.k.objects.items())
                if resource == events and not obj.deleted]


@pytest.fixture
def cluster(emulator: Any) -> Cluster:
    return Cluster(emulator)


Check = Callable[[], Awaitable[Any]]
