"""Two replicas as the chart runs them (its args, env and probes; `chart_process.py`) against the
emulator: the standby is alive to its liveness probe and serves the webhook, every admission
gets a verdict from either replica, SIGTERM stops each mode at once and hands the Lease over.
The lease is shortened to 6 s (SPECDEPLOY_LEASE_DURATION_S); every wait is on an event, bounded
by what the kubelet would allow (its 30 s termination grace) or by start-up under load."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .chart_process import NO_KUBELET, ChartPod, client_context, deployment_container, http_get, lease_holder, render, self_signed
from .conftest import DEPLOYMENT, HANG_GUARD_S, Cluster, eventually, example, with_identity

LLAMA = example("llama-3.1-8b-eagle3.yaml")
NAME = LLAMA["metadata"]["name"]
TERMINATION_GRACE_S = 30  # the pod's default terminationGracePeriodSeconds: SIGKILL after it
HA_VALUES = ("replicas=2", "watchNamespaces={ns1}", "webhook.enabled=true", "webhook.certManager.enabled=true", NO_KUBELET)


@pytest.fixture
def pods(emulator: Any, tmp_path: Path) -> Any:
    started: list[ChartPod] = []
    tls = self_signed(tmp_path / "tls")

    def start(name: str, *values: str) -> ChartPod:
        container = deployment_container(render(*(values or HA_VALUES)))
        pod = ChartPod(name, container, Path(__import__("os").environ["KUBECONFIG"]), tls_dir=tls, log_dir=tmp_path).start()
        started.append(pod)
        return pod

    yield start
    for pod in started:
        pod.kill()


async def _exited(pod: ChartPod) -> int:
    assert pod.proc is not None
    return await asyncio.to_thread(pod.proc.wait, TERMINATION_GRACE_S)


async def _controlling(cluster: Cluster, uid: str) -> None:
    await cluster.create(with_identity(LLAMA, uid))
    await eventually(lambda: cluster.condition(NAME, "Planned").get("status") == "True", what="Planned")


async def test_sigterm_stops_a_single_replica_with_the_chart_flags(emulator: Any, cluster: Cluster, pods: Any) -> None:
    """replicas: 1 (no election): kopf and every thread stop; exit 0 before the kubelet's SIGKILL."""
    pod = pods("solo", "replicas=1", "watchNamespaces={ns1}")
    await _controlling(cluster, "uid-solo")
    assert await pod.probed("livenessProbe") == 200
    pod.signal(signal.SIGTERM)
    assert await _exited(pod) == 0


async def test_the_standby_is_alive_serves_and_takes_over_on_sigterm(emulator: Any, cluster: Cluster, pods: Any) -> None:
    a = pods("a")
    await eventually(lambda: lease_holder(cluster).startswith("a-"), what="a holds the Lease")
    b = pods("b")
    await b.until_probe("readinessProbe")
    await _controlling(cluster, "uid-ha")
    # Alive to the kubelet, which restarts a container after failureThreshold probes in a row
    # fail (each bounded by its timeoutSeconds): over twice that many probes, never that many
    # in a row (the 5-minute soak at the chart's period is bench/bench_ha.py).
    threshold, failed_in_a_row = b.container["livenessProbe"]["failureThreshold"], 0
    for _ in range(2 * threshold):
        failed_in_a_row = 0 if await b.probed("livenessProbe") == 200 else failed_in_a_row + 1
        assert failed_in_a_row < threshold, "the kubelet would restart the standby"
        await asyncio.sleep(1)  # the probe period, shortened
    assert (await _leader_page(a), await _leader_page(b)) == (200, 503)  # readiness tells them apart
    assert lease_holder(cluster).startswith("a-")  # the standby did not take over
    a.signal(signal.SIGTERM)
    assert await _exited(a) == 0
    assert not lease_holder(cluster).startswith("a-")  # released on the way out, not left to expire
    await eventually(lambda: lease_holder(cluster).startswith("b-"), what="b takes the Lease")
    await cluster.patch_spec(NAME, {"draft": {"numSpeculativeTokens": 5}}, generation=2)
    await eventually(lambda: cluster.sd(NAME)["status"].get("observedGeneration") == 2, what="b reconciles")
    args = cluster.get(DEPLOYMENT, NAME)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert '"num_speculative_tokens":5' in " ".join(args)
    b.signal(signal.SIGTERM)
    assert await _exited(b) == 0


async def _leader_page(pod: ChartPod) -> int:
    return await asyncio.to_thread(http_get, pod.ports["metrics"], "/leader")


async def test_every_admission_through_the_service_is_judged(emulator: Any, cluster: Cluster, pods: Any, tmp_path: Path) -> None:
    """100 AdmissionReviews, alternately to each endpoint of the webhook Service (both pods
    are Ready): each gets a verdict, valid specs admitted and invalid ones refused, by the
    leader and the standby alike."""
    a = pods("a")
    await eventually(lambda: lease_holder(cluster).startswith("a-"), what="a holds the Lease")
    b = pods("b")
    for pod in (a, b):
        await pod.until_probe("readinessProbe")
    valid = with_identity(example("qwen3-8b-ngram.yaml"), "uid-valid")
    invalid = with_identity(example("qwen3-8b-ngram.yaml"), "uid-invalid")
    invalid["spec"]["draft"]["numSpeculativeTokens"] = 0
    context = client_context(tmp_path / "tls")
    verdicts: dict[tuple[str, bool], int] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(100):
            pod, obj = (a, b)[i % 2], (valid, invalid)[(i // 2) % 2]
            url = f"https://localhost:{pod.ports['webhook']}/validate-speculativedeployment"
            allowed = await _review(session, url, context, obj)
            verdicts[(pod.name, allowed)] = verdicts.get((pod.name, allowed), 0) + 1
    assert verdicts == {("a", True): 25, ("a", False): 25, ("b", True): 25, ("b", False): 25}


async def _review(session: aiohttp.ClientSession, url: str, context: Any, obj: dict[str, Any]) -> bool:
    uid = str(uuid.uuid4())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
        "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
        "name": obj["metadata"]["name"], "namespace": "ns1", "operation": "CREATE",
        "userInfo": {"username": "kubernetes-admin"}, "object": obj, "oldObject": None, "dryRun": False}}
    deadline = time.monotonic() + HANG_GUARD_S  # kopf opens the server once its start-up is done
    while time.monotonic() < deadline:
        try:
            async with session.post(url, json=review, ssl=context) as response:
                body = await response.json()
                assert response.status == 200 and body["response"]["uid"] == uid, body
                return bool(body["response"]["allowed"])
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never listened")
