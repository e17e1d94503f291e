"""The operator's only Kubernetes client: a few verbs over raw JSON, errors typed by retry policy.

It sends requests through the official client's `ApiClient` (auth, TLS, kubeconfig or
in-cluster config) but builds the paths itself: the typed APIs of kubernetes 37 validate
bodies client-side and know nothing of LeaderWorkerSet, while the operator only needs
get / list / create / merge-patch on a few kinds. Every call is checked against `PERMISSIONS`,
so the chart's RBAC and the code cannot drift apart. Writes are create-or-merge-patch (no
server-side apply: the emulator used in tests has none); swapping in SSA is local to here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes.client import ApiClient
from urllib3.exceptions import HTTPError as Urllib3Error

from specdeploy.api.spec import API_GROUP, API_VERSION, PLURAL
from specdeploy.controller.permissions import allows

RETRY_DELAY_S = 15.0
REQUEST_TIMEOUT = (10.0, 60.0)  # connect, read


class KubeTemporaryError(kopf.TemporaryError):
    """The API server is unavailable, overloaded or raced us (5xx, 409, 429, timeouts)."""


class KubePermanentError(kopf.PermanentError):
    """The API server refused the request for good (400/403/422, or a kind not installed)."""


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
        path = f"{root}/namespaces/{namespace}/{self.plural}"
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
    "ConfigMap": Kind("", "v1", "configmaps"),
    "Secret": Kind("", "v1", "secrets"),
    "Pod": Kind("", "v1", "pods"),
    "Event": Kind("", "v1", "events"),
    "SpeculativeDeployment": Kind(API_GROUP, API_VERSION, PLURAL),
}


class Kube:
    """get (None on 404), list, create, merge_patch, plus the two reads the sources need."""

    def __init__(self, api_client: ApiClient, *, read_secrets: bool = False):
        self.api_client = api_client
        self.read_secrets = read_secrets

    # -- verbs ------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._call("GET", kind, "get", namespace, name, missing_ok=True)

    def list(self, kind: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The objects of `kind` in `namespace` matching the selector (the telemetry's pods)."""
        listed = self._call("GET", kind, "list", namespace, None, query={"labelSelector": label_selector})
        return list((listed or {}).get("items") or [])

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind, namespace = obj["kind"], obj["metadata"]["namespace"]
        created = self._call("POST", kind, "create", namespace, None, body=obj)
        assert created is not None
        return created

    def merge_patch(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        patched = self._call("PATCH", kind, "patch", namespace, name, body=patch, subresource=subresource)
        assert patched is not None
        return patched

    def read_config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        """The value, or None when the ConfigMap or the key is missing."""
        cm = self.get("ConfigMap", namespace, name)
        return None if cm is None else (cm.get("data") or {}).get(key)

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """Only when the chart opted in (SECRETS_PERMISSION); the value never leaves memory."""
        if not self.read_secrets:
            return None
        import base64

        secret = self.get("Secret", namespace, name)
        raw = None if secret is None else (secret.get("data") or {}).get(key)
        return None if raw is None else base64.b64decode(raw).decode()

    # -- transport --------------------------------------------------------------------------
    def _call(
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
    ) -> dict[str, Any] | None:
        kind = KINDS[kind_name]
        resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        if not allows(kind.api_group, resource, verb, with_secrets=self.read_secrets):
            raise AssertionError(f"{verb} {kind.api_group or 'core'}/{resource} is not in PERMISSIONS")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        _, url, headers, data, _ = self.api_client.param_serialize(
            method=method,
            resource_path=kind.path(namespace, name, subresource),
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        where = f"{kind_name} {namespace}/{name or body and body['metadata'].get('name')}"
        try:
            response = self.api_client.call_api(method, url, header_params=headers, body=data, _request_timeout=REQUEST_TIMEOUT)
            response.read()
        except (Urllib3Error, OSError, TimeoutError) as exc:
            raise KubeTemporaryError(f"{method} {where}: {type(exc).__name__}: {exc}", delay=RETRY_DELAY_S) from exc
        status = response.status
        if 200 <= status < 300:
            return json.loads(response.data) if response.data else {}
        if status == 404 and missing_ok:
            return None
        detail = _reason(response.data)
        if status == 404 and method == "POST":
            raise KubePermanentError(f"cannot create {where}: {kind.api_version}/{kind.plural} is not served here (is its CRD installed?)")
        if status in (409, 429) or status >= 500 or status == 404:
            raise KubeTemporaryError(f"{method} {where}: HTTP {status}: {detail}", delay=RETRY_DELAY_S)
        raise KubePermanentError(f"{method} {where}: HTTP {status}: {detail}")


def _reason(data: bytes | None) -> str:
    try:
        return str(json.loads(data or b"{}").get("message", ""))[:500]
    except ValueError:
        return (data or b"")[:200].decode(errors="replace")
