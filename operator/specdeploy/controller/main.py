"""The kopf wiring: an explicit registry, startup settings, login, the reconcile handler and
the readiness mirror. `run()` is what `specdeploy run` and `python -m specdeploy.demo` call.

Handlers are thin: they take the client from `memo`, call `Reconciler`, write the status
changes through kopf's `patch` (or the status subresource, for the mirror), post Events and
turn a transient failure into `kopf.TemporaryError`. There is no timer, daemon or delete
handler, so kopf adds no finalizer: deleting the resource never waits for the operator, and
the children go with it through their ownerReferences. The telemetry (pods' /metrics ->
status.speculation) is one operator-wide loop, registered by `telemetry.register`.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from typing import Any

import kopf
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from specdeploy.api.spec import API_GROUP, API_VERSION, KIND, PLURAL
from specdeploy.controller import webhook
from specdeploy.controller import telemetry
from specdeploy.controller.kube import Kube
from specdeploy.controller.reconcile import Reconciler, Result
from specdeploy.render.labels import MANAGED_BY, OWNER_LABEL

registry = kopf.OperatorRegistry()

# Opt-in (chart value): read spec.hfTokenSecretRef's Secret to fetch configs of gated repos.
READ_SECRETS_ENV = "SPECDEPLOY_READ_HF_TOKEN_SECRETS"
_CHILD_FILTER = {"app.kubernetes.io/managed-by": MANAGED_BY}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@kopf.on.startup(registry=registry)
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Own prefixes for kopf's bookkeeping, explicit watch timeouts, events for warnings,
    and the API client every handler uses."""
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 310
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # Only namespaces given on the command line (or all): no cluster-wide namespace/CRD watch.
    settings.scanning.disabled = True
    # Explicit Events only (condition transitions, invalid specs) plus kopf's own warnings.
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8
    memo.kube = Kube(_api_client(), read_secrets=os.environ.get(READ_SECRETS_ENV, "").lower() == "true")
    # The validating webhook (controller/webhook.py), when the chart enables it.
    settings.admission.server = webhook.server_from_env()
    if webhook.enabled():
        webhook.warm_up()


def _api_client() -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:  # read $KUBECONFIG now, not at import time
        k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    return k8s_client.ApiClient(configuration)


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then $KUBECONFIG / ~/.kube/config."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _post(body: Any, events: list[tuple[str, str, str]]) -> None:
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    result: Result = Reconciler(memo.kube, logger).reconcile(body, now=_now())
    for key, value in result.status_patch.items():
        patch.status[key] = value
    _post(body, result.events)
    if result.retry is not None:
        raise kopf.TemporaryError(result.retry, delay=result.retry_delay)


def _mirror(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger) -> None:
    meta = body.get("metadata") or {}
    owner, namespace = (meta.get("labels") or {}).get(OWNER_LABEL), meta.get("namespace")
    if not owner or not namespace:
        return
    kube: Kube = memo.kube
    parent = kube.get(KIND, namespace, owner)
    if parent is None or (parent.get("status") or {}).get("workload") != f"{body.get('kind')}/{meta.get('name')}":
        return  # not (or no longer) the workload this parent serves from
    workload = None if type == "DELETED" else dict(body)
    result = Reconciler(kube, logger).mirror(parent, workload, now=_now())
    if result.status_patch:
        kube.merge_patch(KIND, namespace, owner, {"status": result.status_patch}, subresource="status")
        _post(parent, result.events)


@kopf.on.event("apps", "v1", "deployments", labels=_CHILD_FILTER, id="mirror-deployment", registry=registry)
def mirror_deployment(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Deployment readiness -> the parent's Available/Ready/readyReplicas."""
    _mirror(body, type, memo, logger)


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=_CHILD_FILTER, id="mirror-lws", registry=registry)
def mirror_leader_worker_set(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """LeaderWorkerSet readiness -> the parent's Available/Ready/readyReplicas."""
    _mirror(body, type, memo, logger)


webhook.register(registry)
telemetry.register(registry)


def run(
    namespaces: list[str],
    all_namespaces: bool,
    liveness: str | None,
    *,
    ready_flag: threading.Event | None = None,
    stop_flag: threading.Event | None = None,
) -> None:
    """Run the operator until stopped. Standalone: kopf peering is not leader election, so
    the chart runs one replica with `strategy: Recreate` instead."""
    if not namespaces and not all_namespaces:
        raise ValueError("give --namespace at least once, or --all-namespaces")
    try:  # fail fast with a clear message instead of kopf retrying its startup every minute
        _api_client().close()
    except k8s_config.ConfigException as exc:
        raise ValueError(f"no Kubernetes credentials ({exc}): set KUBECONFIG, or run in a pod with a service account") from exc
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=all_namespaces,
        namespaces=[] if all_namespaces else list(namespaces),
        liveness_endpoint=liveness,
        ready_flag=ready_flag,
        stop_flag=stop_flag,
    )
