"""The asyncio client takes its credentials from the official `kubernetes` loader: the bearer
token (re-read through the loader's refresh hook before each request), client certificates and
the cluster CA from a kubeconfig; every call is checked against PERMISSIONS before it is sent;
HTTP answers are typed by retry policy. Served by a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from specdeploy.controller.reconcile.budget import Budget
from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError, load_configuration


def _kubeconfig(path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


async def _serve(handler: Any, ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_token_ca_and_typed_answers_over_tls(tmp_path: Path, self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed
    seen: list[tuple[str, str, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, request.headers.get("Authorization")))
        status = {"/api/v1/namespaces/n/configmaps/gone": 404, "/api/v1/namespaces/n/configmaps/forbidden": 403,
                  "/api/v1/namespaces/n/configmaps/bad": 422}.get(request.path, 200)
        return web.json_response({"kind": "ConfigMap", "data": {"config.json": "{}"}, "message": "nope"}, status=status)

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    runner, port = await _serve(handler, server_tls)
    try:
        config = _kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}", {"token": "sekrit"},
                             {"certificate-authority": str(cert)})
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        errors: list[tuple[str, str, int]] = []
        kube = Kube(load_configuration(), on_response=lambda *a: errors.append(a))
        assert await kube.read_config_map_key("n", "cfg", "config.json") == "{}"
        assert seen[-1] == ("GET", "/api/v1/namespaces/n/configmaps/cfg", "Bearer sekrit")
        assert await kube.get("ConfigMap", "n", "gone") is None
        with pytest.raises(KubeTemporaryError) as slow:
            await kube.get("ConfigMap", "n", "forbidden")
        assert slow.value.slow and slow.value.status == 403 and "RBAC" in str(slow.value)
        with pytest.raises(KubePermanentError):
            await kube.get("ConfigMap", "n", "bad")
        with pytest.raises(AssertionError, match="not in PERMISSIONS"):
            await kube.delete("Secret", "n", "cfg")  # the operator may not delete Secrets
        assert ("GET", "ConfigMap", 403) in errors and len(seen) == 4  # the refused delete was never sent
        await kube.close()
    finally:
        await runner.cleanup()


async def test_an_untrusted_server_certificate_is_refused(tmp_path: Path, self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    runner, port = await _serve(handler, server_tls)
    try:  # no certificate-authority: the self-signed server is not trusted
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", {"token": "t"})))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube = Kube(load_configuration())
        with pytest.raises(KubeTemporaryError, match="certificate|SSL"):
            await kube.get("ConfigMap", "n", "cfg")
        await kube.close()
    finally:
        await runner.cleanup()


async def test_the_token_is_refreshed_through_the_loaders_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-cluster and exec kubeconfigs rotate tokens through the loader's refresh hook. The
    client asks it once per refresh period, not per request, and again at once after a 401."""
    tokens: list[str | None] = []
    statuses = iter([200, 200, 200, 401, 200])

    async def handler(request: web.Request) -> web.Response:
        tokens.append(request.headers.get("Authorization"))
        return web.json_response({}, status=next(statuses))

    runner, port = await _serve(handler)
    try:
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", {"token": "old"})))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        configuration = load_configuration()
        asked: list[int] = []

        def rotate(c: Any) -> None:
            asked.append(1)
            c.api_key.update(BearerToken=f"Bearer t{len(asked)}")

        configuration.refresh_api_key_hook = rotate
        kube = Kube(configuration)
        for name in "abc":
            await kube.get("ConfigMap", "n", name)
        with pytest.raises(KubeTemporaryError):
            await kube.get("ConfigMap", "n", "rotated")  # 401: the token was rotated under us
        await kube.get("ConfigMap", "n", "d")
        assert tokens == ["Bearer t1"] * 4 + ["Bearer t2"] and len(asked) == 2
        await kube.close()
    finally:
        await runner.cleanup()


async def test_a_zero_refresh_period_asks_the_hook_before_every_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        tokens.append(request.headers.get("Authorization"))
        return web.json_response({})

    runner, port = await _serve(handler)
    try:
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", {"token": "old"})))
        monkeypatch.setenv("SPECDEPLOY_AUTH_REFRESH_S", "0")
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        configuration = load_configuration()
        rotated = iter(["Bearer first", "Bearer second"])
        configuration.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken=next(rotated))
        kube = Kube(configuration)
        await kube.get("ConfigMap", "n", "a")
        await kube.get("ConfigMap", "n", "b")
        assert tokens == ["Bearer first", "Bearer second"]
        await kube.close()
    finally:
        await runner.cleanup()


async def test_the_client_pauses_the_budget_of_the_reconcile_it_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the connection to the answer: the handler sees the budget paused while it holds it."""
    arrived, answered = asyncio.Event(), asyncio.Event()
    budget = Budget(0.0)

    async def handler(request: web.Request) -> web.Response:
        arrived.set()
        await answered.wait()
        return web.json_response({"kind": "ConfigMap", "data": {}})

    runner, port = await _serve(handler)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", {"token": "t"})))
    kube = Kube(load_configuration())

    async def reconcile() -> Any:
        budget.start()
        return await kube.get("ConfigMap", "n", "c")

    task = asyncio.create_task(reconcile())
    await arrived.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not budget.expired.is_set()  # a zero budget, held on the API server
    answered.set()
    assert await task == {"kind": "ConfigMap", "data": {}}
    await budget.expired.wait()  # the request answered: the clock runs (and is spent) again
    await kube.close()
    await runner.cleanup()
