"""The operator's only Kubernetes client: a few verbs over raw JSON on kopf's asyncio loop,
errors typed by retry policy.

aiohttp (kopf's own HTTP stack, so no new dependency), with the credentials the official
`kubernetes` package loads from the kubeconfig or the in-cluster service account (token, client
certificates, CA, TLS server name, and its token refresh hook, asked before every request).
`kubernetes_asyncio` would be a second copy of that loader plus a generated typed API the
operator does not use: the typed APIs validate bodies client-side and know nothing of
LeaderWorkerSet, while the operator only needs get / list / create / merge-patch / delete on a
few kinds. Every call is checked against `PERMISSIONS`, so the chart's RBAC and the code cannot
drift apart. Writes are create-or-merge-patch (no server-side apply: the emulator used in tests
has none); swapping in SSA is local to here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import aiohttp
import kopf
from kubernetes.client import Configuration

from specdeploy import __version__
from specdeploy.api.spec import API_GROUP, API_VERSION, PLURAL
from specdeploy.controller.reconcile.budget import waiting
from specdeploy.controller.process.env import Number
from specdeploy.controller.process.permissions import allows

RETRY_DELAY_S = 15.0
USER_AGENT = f"specdeploy/{__version__} (aiohttp)"
# Seconds per API request (connect, read); SPECDEPLOY_API_TIMEOUT_S overrides the read part.
API_TIMEOUT_ENV = "SPECDEPLOY_API_TIMEOUT_S"
API_TIMEOUT = Number(API_TIMEOUT_ENV, 60.0, minimum=0, exclusive=True)
# Concurrent connections to the API server (aiohttp's limit_per_host).
API_CONNECTIONS = Number("SPECDEPLOY_API_CONNECTIONS", 16, minimum=1, integer=True)
# How long the auth headers are reused: the in-cluster loader's own token refresh period (the
# kubelet rotates projected tokens long before they expire); a 401 asks again at once.
AUTH_REFRESH_S = Number("SPECDEPLOY_AUTH_REFRESH_S", 60.0, minimum=0)


def request_timeout() -> tuple[float, float]:
    read = API_TIMEOUT.get()
    return (min(10.0, read), read)


class KubeTemporaryError(kopf.TemporaryError):
    """The API server is unavailable, overloaded or raced us (5xx, 409, 429, timeouts).
    `slow`: a refusal a person has to fix (403: RBAC; 404 on create: a CRD not installed),
    retried too, but on a longer backoff."""

    def __init__(self, message: str, delay: float = RETRY_DELAY_S, *, slow: bool = False, status: int | None = None):
        super().__init__(message, delay=delay)
        self.slow = slow
        self.status = status


class NotLeading(KubeTemporaryError):
    """A write refused before it was sent: leadership was lost (or never held)."""


class KubePermanentError(kopf.PermanentError):
    """The API server refused the request for good (400/422: the body is wrong)."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Kind:
    api_group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.api_group}/{self.version}" if self.api_group else self.version

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        root = f"/apis/{self.api_group}/{self.version}" if self.api_group else f"/api/{self.version}"
        path = f"{root}/namespaces/{namespace}/{self.plural}" if namespace else f"{root}/{self.plural}"  # "": cluster-scoped
        if name is not None:
            path += f"/{name}"
        if subresource is not None:
            path += f"/{subresource}"
        return path


KINDS: dict[str, Kind] = {
    "Deployment": Kind("apps", "v1", "deployments"),
    "LeaderWorkerSet": Kind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    "Service": Kind("", "v1", "services"),
    "PodDisruptionBudget": Kind("policy", "v1", "poddisruptionbudgets"),
    "InferencePool": Kind("inference.networking.k8s.io", "v1", "inferencepools"),
    "ConfigMap": Kind("", "v1", "configmaps"),
    "Secret": Kind("", "v1", "secrets"),
    "Pod": Kind("", "v1", "pods"),
    "ReplicaSet": Kind("apps", "v1", "replicasets"),
    "StatefulSet": Kind("apps", "v1", "statefulsets"),
    "Job": Kind("batch", "v1", "jobs"),
    "Event": Kind("", "v1", "events"),
    "SpeculativeDeployment": Kind(API_GROUP, API_VERSION, PLURAL),
    "ValidatingWebhookConfiguration": Kind("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
}


class Kube:
    """get (None on 404), list, create, merge_patch, delete, plus the two reads the sources need.
    Coroutines: call them on the loop the client was first used on (kopf's)."""

    def __init__(self, configuration: Configuration, *, read_secrets: bool = False,
                 on_response: Callable[[str, str, int], None] | None = None,
                 may_write: Callable[[], bool] | None = None, keeps_webhook_certificate: bool = False):
        self.configuration = configuration
        self.keeps_webhook_certificate = keeps_webhook_certificate
        # The fence (controller/process/leader.py Leadership.holds): asked before every write; None: always.
        self.may_write = may_write
        self.read_secrets = read_secrets
        self.on_response = on_response  # (method, kind, HTTP status): the metrics hook
        self.timeout = request_timeout()
        self.host = configuration.host.rstrip("/")
        self._ssl = _ssl_context(configuration) if self.host.startswith("https") else None
        self._server_hostname = getattr(configuration, "tls_server_name", None) or None
        self._session: aiohttp.ClientSession | None = None
        self._auth: tuple[float, dict[str, str]] | None = None  # (monotonic stamp, auth headers)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # A connection pool per operator run; limit_per_host bounds concurrent requests.
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit_per_host=API_CONNECTIONS.get_int())
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- verbs ------------------------------------------------------------------------------
    async def get(self, kind: str, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        return await self._call("GET", kind, "get", namespace, name, missing_ok=True, timeout=timeout)

    async def list(self, kind: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The objects of `kind` in `namespace` matching the selector ([] for a kind this API
        server does not serve, e.g. LeaderWorkerSet without its CRD)."""
        listed = await self._call("GET", kind, "list", namespace, None, query={"labelSelector": label_selector}, missing_ok=True)
        return list((listed or {}).get("items") or [])

    async def watch_object(self, kind_name: str, namespace: str, name: str, *, timeout_s: float) -> AsyncIterator[str]:
        """The types of the watch events of one object (a fieldSelector on its name, which RBAC
        can narrow with resourceNames), until the server ends the watch after `timeout_s`.
        Only the event type is kept: the caller reads the object again to act on it."""
        kind = KINDS[kind_name]
        if not allows(kind.api_group, kind.plural, "watch", with_secrets=self.read_secrets,
                      with_webhook_certificate=self.keeps_webhook_certificate):
            raise AssertionError(f"watch {kind.api_group or 'core'}/{kind.plural} is not in PERMISSIONS")
        query = {"watch": "true", "fieldSelector": f"metadata.name={name}", "timeoutSeconds": str(int(timeout_s))}
        limits = aiohttp.ClientTimeout(total=timeout_s + self.timeout[0] + self.timeout[1], sock_connect=self.timeout[0])
        try:
            async with self._client().get(self.host + kind.path(namespace), params=query, headers=self._headers("GET", None),
                                          timeout=limits, server_hostname=self._server_hostname) as response:
                if response.status != 200:
                    raise KubeTemporaryError(f"watch {kind_name} {namespace}/{name}: HTTP {response.status}: {_reason(await response.read())}",
                                             status=response.status)
                while line := await response.content.readline():
                    yield _event_type(line)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            raise KubeTemporaryError(f"watch {kind_name} {namespace}/{name}: {type(exc).__name__}: {exc}") from exc

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind, namespace = obj["kind"], obj["metadata"]["namespace"]
        created = await self._call("POST", kind, "create", namespace, None, body=obj)
        assert created is not None
        return created

    async def merge_patch(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        patched = await self._call("PATCH", kind, "patch", namespace, name, body=patch, subresource=subresource)
        assert patched is not None
        return patched

    async def delete(self, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete (background propagation); `uid` guards against deleting a re-created object."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        await self._call("DELETE", kind, "delete", namespace, name, body=body, missing_ok=True)

    async def read_config_map_key(self, namespace: str, name: str, key: str, *, timeout: float | None = None) -> str | None:
        """The value, or None when the ConfigMap or the key is missing."""
        cm = await self.get("ConfigMap", namespace, name, timeout=timeout)
        return None if cm is None else (cm.get("data") or {}).get(key)

    async def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """Only when the chart opted in (SECRETS_PERMISSION); the value never leaves memory."""
        if not self.read_secrets:
            return None
        secret = await self.get("Secret", namespace, name)
        raw = None if secret is None else (secret.get("data") or {}).get(key)
        return None if raw is None else base64.b64decode(raw).decode()

    # -- transport --------------------------------------------------------------------------
    def _headers(self, method: str, body: dict[str, Any] | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self._auth_headers()}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        return headers

    def _auth_headers(self) -> dict[str, str]:
        """The official client's auth settings, asked at most once per AUTH_REFRESH_S and again
        after a 401: its refresh hook (in-cluster token rotation, exec/OIDC kubeconfigs) re-reads
        files and the environment, which per request was 7 % of the controller thread."""
        now = time.monotonic()
        if self._auth is not None and now - self._auth[0] < AUTH_REFRESH_S.get():
            return self._auth[1]
        headers: dict[str, str] = {}
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if "authorization" not in headers and self.configuration.username:
            headers["authorization"] = self.configuration.get_basic_auth_token()
        self._auth = (now, headers)
        return headers

    async def _call(
        self,
        method: str,
        kind_name: str,
        verb: str,
        namespace: str,
        name: str | None,
        *,
        body: dict[str, Any] | None = None,
        subresource: str | None = None,
        missing_ok: bool = False,
        query: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any] | None:
        kind = KINDS[kind_name]
        resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        if not allows(kind.api_group, resource, verb, with_secrets=self.read_secrets,
                      with_webhook_certificate=self.keeps_webhook_certificate):
            raise AssertionError(f"{verb} {kind.api_group or 'core'}/{resource} is not in PERMISSIONS")
        where = f"{kind_name} {namespace}/{name or (body or {}).get('metadata', {}).get('name')}"
        if method != "GET" and self.may_write is not None and not self.may_write():
            raise NotLeading(f"{method} {where}: refused, this replica does not hold the Lease")
        connect, read = self.timeout
        if timeout is not None:
            connect, read = min(connect, timeout), min(read, timeout)
        limits = aiohttp.ClientTimeout(total=read + connect, sock_connect=connect, sock_read=read)
        try:
            with waiting():  # a connection and the answer: not the reconcile's own time
                async with self._client().request(
                    method, self.host + kind.path(namespace, name, subresource), params=query,
                    data=None if body is None else json.dumps(body), headers=self._headers(method, body),
                    timeout=limits, server_hostname=self._server_hostname,
                ) as response:
                    status, data = response.status, await response.read()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise KubeTemporaryError(f"{method} {where}: {type(exc).__name__}: {exc}", delay=RETRY_DELAY_S) from exc
        if self.on_response is not None:
            self.on_response(method, kind_name, status)
        if 200 <= status < 300:
            return json.loads(data) if data else {}
        if status == 404 and missing_ok:
            return None
        detail = _reason(data)
        if status == 404 and method == "POST":
            message = f"cannot create {where}: {kind.api_version}/{kind.plural} is not served here (is its CRD installed?)"
            raise KubeTemporaryError(message, slow=True, status=status)
        if status == 401:
            self._auth = None  # a rotated token: the next request asks the loader again
        if status in (401, 403):
            raise KubeTemporaryError(f"{method} {where}: HTTP {status} (check the operator's RBAC): {detail}", slow=True, status=status)
        if status in (408, 409, 429) or status >= 500 or status == 404:
            raise KubeTemporaryError(f"{method} {where}: HTTP {status}: {detail}", status=status)
        raise KubePermanentError(f"{method} {where}: HTTP {status}: {detail}", status=status)


def _ssl_context(configuration: Configuration) -> ssl.SSLContext:
    """TLS as the official client sets it up: the cluster CA, client certificates, verify."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def load_configuration() -> Configuration:
    """Credentials from the in-cluster service account, else $KUBECONFIG (read now, not at
    import time). Raises kubernetes.config.ConfigException when there are none."""
    from kubernetes import config as k8s_config

    configuration = Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    return configuration


# A watch line longer than this is not an event we read (aiohttp's readline limit is 64 KiB anyway).
MAX_EVENT_BYTES = 1 << 20


def _event_type(line: bytes) -> str:
    """ADDED, MODIFIED, DELETED, ERROR or BOOKMARK of one watch line (ValueError if unreadable)."""
    if len(line) > MAX_EVENT_BYTES:
        raise ValueError("watch event over the size bound")
    event = json.loads(line)
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(kind, str):
        raise ValueError("watch event without a type")
    return kind


def _reason(data: bytes | None) -> str:
    try:
        return str(json.loads(data or b"{}").get("message", ""))[:500]
    except ValueError:
        return (data or b"")[:200].decode(errors="replace")
