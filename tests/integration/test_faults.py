"""The shipped operator behind a fault-injecting proxy: API errors and timeouts on child
writes and status patches are retried with backoff (a 403 too, slower), Stalled=True while it
cannot progress, no hot loop, converged once the fault is gone; a dropped watch and a SIGKILL
mid-reconcile change nothing in the end state. Backoffs are scaled down (SPECDEPLOY_BACKOFF_SCALE)."""

from __future__ import annotations

import asyncio
import copy
import json
import signal
from pathlib import Path
from typing import Any

import kopf
import pytest

from specdeploy.api.spec import API_GROUP
from specdeploy.controller.reconcile.diffbase import DigestDiffBaseStorage
from specdeploy.controller.process.main import backoff
from specdeploy.controller.reconcile.steps import RetryKind
from specdeploy.demo import write_kubeconfig

from . import operator_process
from .conftest import DEPLOYMENT, HANG_GUARD_S, PDB, SERVICE, Cluster, Operator, created, eventually, example, with_identity
from .fault_proxy import FaultProxy, start_proxy

LLAMA = example("llama-3.1-8b-eagle3.yaml")
NAME = LLAMA["metadata"]["name"]
DEPLOYMENTS = r"/apis/apps/v1/namespaces/ns1/deployments$"
SERVICES = r"/api/v1/namespaces/ns1/services$"
STATUS = r"/speculativedeployments/[^/]+/status$"


@pytest.fixture
async def proxied(emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    proxy, runner, url = await start_proxy(str(emulator.url))
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(url, tmp_path / "proxied-kubeconfig")))
    monkeypatch.setenv("SPECDEPLOY_BACKOFF_SCALE", "0.05")
    monkeypatch.setenv("SPECDEPLOY_API_TIMEOUT_S", "1")
    yield proxy
    await proxy.drop_watches()
    await runner.cleanup()


@pytest.fixture
async def faulty(proxied: FaultProxy, emulator: Any) -> Any:
    op = Operator(emulator)
    await op.start()
    yield proxied
    await op.stop()


def _watches(proxy: FaultProxy) -> int:
    return sum(1 for method, path, _ in proxy.log if method == "GET" and "watch=true" in path)


def _handled(cluster: Cluster, name: str) -> bool:
    """kopf has recorded the CR's current spec as handled (controller/reconcile/diffbase.py, as main.py
    configures it), its last write once the handler succeeded, and no retry is pending."""
    body = kopf.Body(cluster.sd(name))
    storage = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    pending = any(key.startswith(f"{API_GROUP}/reconcile") for key in body.metadata.annotations)
    return bool(storage.fetch(body=body)) and not pending


def _children(cluster: Cluster) -> bool:
    return all(cluster.exists(r, n) for r, n in ((DEPLOYMENT, NAME), (SERVICE, f"{NAME}-api"), (PDB, NAME)))


async def test_a_403_stalls_with_slow_retries_and_converges_once_rbac_is_fixed(faulty: FaultProxy, cluster: Cluster) -> None:
    refused = faulty.inject("POST", DEPLOYMENTS, 403)
    await cluster.create(with_identity(LLAMA, "uid-403"))
    await eventually(lambda: cluster.condition(NAME, "Stalled").get("status") == "True", what="Stalled=True")
    assert cluster.condition(NAME, "Progressing")["reason"] == "ApplyFailed"
    assert "RBAC" in cluster.condition(NAME, "Stalled")["message"]
    assert cluster.condition(NAME, "Ready")["status"] == "False"
    assert not cluster.exists(SERVICE, f"{NAME}-api")  # nothing half-created past the refusal
    # Retried slowly, not in a hot loop: the retry waited out the "slow" backoff (a busy machine
    # can only lengthen the wait).
    await eventually(lambda: len(refused.hit_at) >= 2, what="a retry of the refused create")
    assert refused.hit_at[1] - refused.hit_at[0] >= backoff(RetryKind.SLOW, 0), "403 retried in a hot loop"
    faulty.clear()
    await eventually(lambda: _children(cluster), what="children once the 403 is gone")
    await eventually(lambda: cluster.condition(NAME, "Stalled").get("status") == "False", what="Stalled=False")
    # One Warning (Stalled=True) for the whole outage, however many retries were refused.
    failed = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "ApplyFailed"], what="the ApplyFailed Event")
    assert [(e["type"], e["message"].split(":")[0]) for e in failed] == [("Warning", "Stalled=True")], failed


async def test_5xx_409_429_and_timeouts_are_retried_until_converged(faulty: FaultProxy, cluster: Cluster) -> None:
    faulty.inject("POST", DEPLOYMENTS, 500, times=2)
    faulty.inject("POST", SERVICES, 409, times=1)
    faulty.inject("GET", r"/api/v1/namespaces/ns1/services/[^/]+$", delay=2.5, times=1)  # past the 1 s deadline
    name = await created(cluster, LLAMA, "uid-5xx")
    await eventually(lambda: _children(cluster), what="children")
    await eventually(lambda: cluster.condition(name, "Stalled").get("status") == "False", what="Stalled=False")
    assert cluster.sd(name)["status"]["workload"] == f"Deployment/{name}"
    assert faulty.count("POST", DEPLOYMENTS, 500) == 2 and faulty.count("POST", DEPLOYMENTS, 200) == 1  # the emulator answers 200
    # The first failure said it was retrying (Unknown), the second that it was stuck (Stalled).
    history = [v for v in cluster.k.objects["specdeploy.io/v1alpha1/speculativedeployments", "ns1", name].history if v is not None]
    reasons = {(c["type"], c["reason"]) for v in history for c in (v.get("status") or {}).get("conditions", [])}
    assert ("Progressing", "ApplyRetrying") in reasons and ("Stalled", "ApplyFailed") in reasons
    # A status write refused twice (429): the edit's status lands on the third attempt.
    faulty.inject("PATCH", STATUS, 429, times=2)
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 4}}, generation=2)
    await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 2, what="the edit's status")
    assert faulty.count("PATCH", STATUS, 429) == 2
    assert cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == 4
    # Settled: once kopf's own bookkeeping of the retries is written, nothing more is. A write
    # after it could only come later: the wait can miss one, never invent one.
    await eventually(lambda: _handled(cluster, name), what="kopf's bookkeeping of the edit")
    mark = len(faulty.log)
    await asyncio.sleep(1.0)
    assert [e for e in faulty.log[mark:] if e[0] in ("POST", "PATCH", "DELETE") and "/events" not in e[1]] == []


async def test_a_dropped_watch_is_reopened_and_the_next_edit_applied(faulty: FaultProxy, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-watch")
    opened = _watches(faulty)
    dropped = await faulty.drop_watches()
    assert dropped >= 3
    await eventually(lambda: _watches(faulty) >= opened + dropped, what="the watches reopened")
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 5}}, generation=2)
    await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 2, what="the edit after the drop")
    assert cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == 5


async def test_sigkill_mid_reconcile_then_restart_leaves_one_set_of_children(proxied: FaultProxy, cluster: Cluster) -> None:
    hold = proxied.inject("POST", SERVICES, delay=60)  # the Deployment is created, the Service hangs
    process = operator_process.start(["run", "--namespace", "ns1"], env=operator_process.shipped_env())
    try:
        await cluster.create(with_identity(LLAMA, "uid-kill"))
        await eventually(lambda: hold.hits >= 1, what="the reconcile in the middle")
        assert cluster.exists(DEPLOYMENT, NAME) and not cluster.exists(SERVICE, f"{NAME}-api")
        process.send_signal(signal.SIGKILL)
        assert await asyncio.to_thread(process.wait, HANG_GUARD_S) == -signal.SIGKILL
        proxied.clear()
        process = operator_process.start(["run", "--namespace", "ns1"], env=operator_process.shipped_env())
        await eventually(lambda: _children(cluster), what="the children after the restart")
        await eventually(lambda: cluster.condition(NAME, "Planned").get("status") == "True", what="Planned=True")
        assert cluster.sd(NAME)["status"]["workload"] == f"Deployment/{NAME}"
        for resource, child in ((DEPLOYMENT, NAME), (SERVICE, f"{NAME}-api"), (PDB, NAME)):
            assert cluster.get(resource, child)["metadata"]["ownerReferences"][0]["uid"] == "uid-kill"
    finally:
        process.kill()
        await asyncio.to_thread(process.wait, HANG_GUARD_S)


CONFIG_MAPS = r"/api/v1/namespaces/ns1/configmaps/[^/]+$"


async def _config_map(cluster: Cluster, name: str, config: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns1"},
            "data": {"config.json": json.dumps(config)}}
    response = await cluster.k.post("/api/v1/namespaces/ns1/configmaps", json=body)
    assert response.status in (200, 201), await response.text()


def _from_config_map(name: str, config_map: str) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = name
    del doc["spec"]["draft"]["config"]
    doc["spec"]["draft"]["configMapRef"] = {"name": config_map}
    return doc


async def test_a_configmap_read_that_hangs_keeps_the_last_good_config(faulty: FaultProxy, cluster: Cluster) -> None:
    """The ConfigMap GET hangs past its deadline (the proxy holds it 5 s, the read gives up at
    1 s): a serving CR keeps its verdict, its workload and Ready, says the refresh is retrying
    with one Event, and still applies an edit with the last config read; a new CR whose
    ConfigMap was never read says clearly that it is waiting for it. Both converge after."""
    draft_config = LLAMA["spec"]["draft"]["config"]
    await _config_map(cluster, "draft-config", draft_config)
    await _config_map(cluster, "other-config", draft_config)
    name = await created(cluster, _from_config_map("cm-serving", "draft-config"), "uid-cm-serving")
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    await eventually(lambda: cluster.condition(name, "Ready").get("status") == "True", what="Ready=True")

    hang = faulty.inject("GET", CONFIG_MAPS, delay=5)
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 4}}, generation=2)
    await eventually(lambda: cluster.condition(name, "Validated").get("reason") == "ConfigRefreshRetrying", what="the retrying note")
    assert hang.hits >= 1
    validated = cluster.condition(name, "Validated")
    assert validated["status"] == "True" and "spec.draft.configMapRef" in validated["message"] and "retrying" in validated["message"]
    await eventually(lambda: '"num_speculative_tokens":4' in " ".join(cluster.get(DEPLOYMENT, name)["spec"]["template"]["spec"]["containers"][0]["args"]),
                     what="the edit applied with the last good config")
    assert cluster.condition(name, "Ready")["status"] == "True"

    await cluster.create(with_identity(_from_config_map("cm-new", "other-config"), "uid-cm-new"))
    await eventually(lambda: cluster.condition("cm-new", "Validated").get("reason") == "ConfigUnavailable", what="ConfigUnavailable")
    waiting = cluster.condition("cm-new", "Validated")
    assert waiting["status"] == "Unknown" and "ConfigMap ns1/other-config" in waiting["message"] and "(retrying)" in waiting["message"]
    assert not cluster.exists(DEPLOYMENT, "cm-new")
    def retrying() -> list[dict[str, Any]]:
        return [e for e in cluster.events() if e.get("reason") == "ConfigRefreshRetrying"]

    await eventually(retrying, what="the ConfigRefreshRetrying Event")  # posted after the handler
    hits = hang.hits
    await eventually(lambda: hang.hits >= hits + 2, what="two more retries while it still hangs")
    assert len(retrying()) == 1, retrying()

    faulty.clear()
    await eventually(lambda: cluster.condition("cm-new", "Planned").get("status") == "True", what="cm-new Planned")
    await eventually(lambda: cluster.condition(name, "Validated").get("reason") == "Valid", what="Valid again")
    assert cluster.condition(name, "Ready")["status"] == "True"
