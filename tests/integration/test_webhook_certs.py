"""The webhook's certificate as cert-manager delivers it: through the Secret's volume, possibly
after the pod started, and renewed in place. The shipped process (the chart's args and env)
waits for it without failing its liveness probe, then serves each new certificate to new
connections without a restart."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
from pathlib import Path
from typing import Any

from .chart_process import NO_KUBELET, ChartPod, deployment_container, render, self_signed, until_off_loop
from .conftest import eventually

VALUES = ("replicas=1", "watchNamespaces={ns1}", "webhook.enabled=true", "webhook.certManager.enabled=true", NO_KUBELET)


def _served(port: int) -> bytes | None:
    try:
        return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port), timeout=5))
    except OSError:
        return None


def _on_disk(directory: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert((directory / "tls.crt").read_text())


def _install(source: Path, volume: Path) -> None:
    """As the kubelet updates a Secret's volume: both files replaced at once (a rename)."""
    staging = volume.parent / f"{volume.name}.new"
    staging.mkdir()
    for name in ("tls.crt", "tls.key"):
        (staging / name).write_bytes((source / name).read_bytes())
        os.replace(staging / name, volume / name)
    staging.rmdir()


async def test_the_certificate_is_awaited_then_reloaded_when_renewed(emulator: Any, tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    first, renewed = self_signed(tmp_path / "first"), self_signed(tmp_path / "renewed")
    pod = ChartPod("solo", deployment_container(render(*VALUES)), Path(os.environ["KUBECONFIG"]), tls_dir=volume,
                   log_dir=tmp_path, extra_env={"SPECDEPLOY_WEBHOOK_CERT_CHECK_S": "0.2"}).start()
    try:
        await pod.until_probe("livenessProbe")
        # Not Ready until its webhook listens: the Service sends admissions only where one answers.
        assert await pod.probed("readinessProbe") == 503 and await asyncio.to_thread(_served, pod.ports["webhook"]) is None
        _install(first, volume)
        await until_off_loop(lambda: _served(pod.ports["webhook"]) == _on_disk(first), "the first served")
        await pod.until_probe("readinessProbe")
        _install(renewed, volume)
        await until_off_loop(lambda: _served(pod.ports["webhook"]) == _on_disk(renewed), "the renewal served")
        assert pod.proc is not None and pod.proc.poll() is None  # the same process: no restart
    finally:
        await asyncio.to_thread(pod.kill)


async def test_without_cert_manager_the_leader_keeps_the_certificate_and_the_ca_bundle(emulator: Any, cluster: Any,
                                                                                        tmp_path: Path) -> None:
    """The chart's default webhook (no cert-manager): the operator issues the Secret and fills
    the caBundle; the API server, trusting that caBundle, accepts what the webhook serves for
    the Service's DNS name once the kubelet has put the Secret in the volume."""
    objects = render("replicas=1", "watchNamespaces={ns1}", "webhook.enabled=true", NO_KUBELET)
    (configuration,) = [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
    response = await emulator.post("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", json=configuration)
    assert response.status in (200, 201), await response.text()
    container = deployment_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    volume = tmp_path / "volume"
    volume.mkdir()
    pod = ChartPod("solo", container, Path(os.environ["KUBECONFIG"]), tls_dir=volume, log_dir=tmp_path,
                   extra_env={"SPECDEPLOY_WEBHOOK_CERT_CHECK_S": "0.2"}).start()
    try:
        secret = await eventually(lambda: cluster.get("v1/secrets", env["SPECDEPLOY_WEBHOOK_SECRET"]),
                                  what="the Secret issued")
        name = configuration["metadata"]["name"]
        ca_bundle = await eventually(
            lambda: emulator.objects["admissionregistration.k8s.io/v1/validatingwebhookconfigurations", None, name]
            .raw["webhooks"][0]["clientConfig"].get("caBundle"), what="the caBundle set")
        for key in ("tls.crt", "tls.key"):  # the kubelet's part
            (volume / key).write_bytes(base64.b64decode(secret["data"][key]))
        trusted = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
        host = f"{env['SPECDEPLOY_WEBHOOK_SERVICE']}.ns1.svc"
        await until_off_loop(lambda: _handshake(pod.ports["webhook"], trusted, host), "a trusted handshake")
    finally:
        await asyncio.to_thread(pod.kill)


def _handshake(port: int, context: ssl.SSLContext, host: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host):
            return True
    except (ConnectionRefusedError, TimeoutError):  # not listening yet, or too busy to answer: try again
        return False
