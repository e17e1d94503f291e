"""spec.routing with the shipped operator on the emulator: the InferencePool appears with the
CR, follows edits of the spec, is put back when deleted by hand and goes when routing is turned
off; on a cluster without the InferencePool CRD the CR says so, keeps serving, and gets its pool once
the CRD is there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specdeploy.demo import INFERENCE_POOL_RESOURCE, write_kubeconfig

from .conftest import DEPLOYMENT, NS, Cluster, Operator, created, eventually, example
from .fault_proxy import FaultProxy, start_proxy

POOL = INFERENCE_POOL_RESOURCE
LLAMA = example("llama-3.1-8b-eagle3.yaml")


def _routed(picker: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**LLAMA, "spec": {**LLAMA["spec"], "routing": {"endpointPicker": picker} if picker else {}}}


def _pool(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return cluster.get(POOL, name) if cluster.exists(POOL, name) else None


async def test_the_pool_follows_the_spec_and_goes_when_routing_is_turned_off(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, _routed({"name": "llama-epp"}), "uid-routed")
    pool = await eventually(lambda: _pool(cluster, name), what="the InferencePool")
    deployment = cluster.get(DEPLOYMENT, name)
    assert pool["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert pool["spec"]["endpointPickerRef"]["name"] == "llama-epp"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "uid-routed"
    await cluster.patch_spec(name, {"routing": {"endpointPicker": None}}, generation=2)
    await eventually(lambda: "endpointPickerRef" not in (_pool(cluster, name) or {"spec": {"endpointPickerRef": 1}})["spec"],
                     what="the picker removed from the pool")
    response = await cluster.k.delete(f"/apis/{POOL.rsplit('/', 1)[0]}/namespaces/{NS}/inferencepools/{name}")
    assert response.status in (200, 202), await response.text()
    await eventually(lambda: _pool(cluster, name), what="the deleted pool put back")
    await cluster.patch_spec(name, {"routing": None}, generation=3)
    await eventually(lambda: not cluster.exists(POOL, name), what="the pool pruned")
    assert cluster.exists(DEPLOYMENT, name)


@pytest.fixture
async def without_the_crd(emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The operator behind a proxy that answers 404 to every InferencePool request, as an API
    server without the CRD does, until the test clears it (the CRD installed)."""
    proxy, runner, url = await start_proxy(str(emulator.url))
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(url, tmp_path / "proxied-kubeconfig")))
    monkeypatch.setenv("SPECDEPLOY_BACKOFF_SCALE", "0.05")
    for method in ("GET", "POST", "PATCH", "DELETE"):
        proxy.inject(method, "/apis/inference.networking.k8s.io/", 404)
    operator = Operator(emulator)
    await operator.start()
    yield proxy
    await operator.stop()
    await proxy.drop_watches()
    await runner.cleanup()


async def test_without_the_crd_the_cr_says_so_and_serves_until_it_is_installed(without_the_crd: FaultProxy, cluster: Cluster) -> None:
    name = await created(cluster, _routed(), "uid-no-crd")
    progressing = await eventually(lambda: cluster.condition(name, "Progressing").get("reason") == "ApplyFailed"
                                   and cluster.condition(name, "Progressing"), what="Progressing=False ApplyFailed")
    assert progressing["status"] == "False"
    assert "inferencepools is not served here (is its CRD installed?)" in progressing["message"], progressing
    assert cluster.exists(DEPLOYMENT, name) and not cluster.exists(POOL, name)
    # Routing off: the prune's list of pools is a 404 too, which means none to prune.
    await cluster.patch_spec(name, {"routing": None}, generation=2)
    await eventually(lambda: cluster.condition(name, "Progressing").get("reason") not in (None, "ApplyFailed"),
                     what="Progressing without ApplyFailed")
    without_the_crd.clear()
    await cluster.patch_spec(name, {"routing": {}}, generation=3)
    await eventually(lambda: _pool(cluster, name), what="the pool once the CRD is there")
