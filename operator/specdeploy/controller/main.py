"""The kopf wiring: an explicit registry, startup settings, login, the reconcile handler and
the readiness mirror. `run()` is what `specdeploy run` and `python -m specdeploy.demo` call.

Handlers are thin and asynchronous: they take the client from `memo`, run the reconcile as
`attempt.reconcile_once` does for every caller (a slot, the time budget
SPECDEPLOY_RECONCILE_BUDGET_S, a status note when cut off), post Events and turn a transient
failure into `kopf.TemporaryError`. Status is written by `Reconciler.write_status`
(the status subresource, one writer per CR at a time), not through kopf's `patch`: kopf
writes after the handler returns, outside that lock. Nothing blocks kopf's event loop: the API
client is aiohttp, and CPU-bound work and Hub reads run in the bounded pools of `offload.py`. There is no timer, daemon or delete
handler, so kopf adds no finalizer: deleting the resource never waits for the operator, and
the children go with it through their ownerReferences. The telemetry (pods' /metrics ->
status.speculation) is one operator-wide loop, registered by `telemetry.register`.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import kopf
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from specdeploy.api.spec import API_GROUP, API_VERSION, PLURAL
from specdeploy.controller import LOG_FORMATS, env, leader, telemetry, webhook
from specdeploy.controller.attempt import reconcile_once, utc_now as _now
from specdeploy.controller.diffbase import DigestDiffBaseStorage
from specdeploy.controller.kube import Kube, KubePermanentError, KubeTemporaryError, load_configuration, request_timeout
from specdeploy.controller.metrics import METRICS, METRICS_PORT
from specdeploy.controller.offload import reconcile_budget
from specdeploy.controller.reconcile import Reconciler
from specdeploy.controller import state
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL

registry = kopf.OperatorRegistry()

# Opt-in (chart value): read spec.hfTokenSecretRef's Secret to fetch configs of gated repos.
READ_SECRETS_ENV = "SPECDEPLOY_READ_HF_TOKEN_SECRETS"
_CHILD_FILTER = {MANAGED_BY_LABEL: MANAGED_BY}
# Multiplies every retry delay (tests shorten them; 1 in production).
BACKOFF_SCALE_ENV = "SPECDEPLOY_BACKOFF_SCALE"
BACKOFF_SCALE = env.Number(BACKOFF_SCALE_ENV, 1.0, minimum=0)
LOG_FORMAT_ENV = "SPECDEPLOY_LOG_FORMAT"  # text (default) | json
# kind -> (first delay, cap) in seconds.
# "preflight": polling a running preflight Job (most of its minute or two is the image pull).
BACKOFF = {"api": (2.0, 120.0), "source": (15.0, 600.0), "slow": (30.0, 600.0), "preflight": (5.0, 30.0)}


@kopf.on.startup(registry=registry)
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Own prefixes for kopf's bookkeeping, explicit watch timeouts, events for warnings,
    and the API client every handler uses."""
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 310
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = request_timeout()[1]
    # Only namespaces given on the command line (or all): no cluster-wide namespace/CRD watch.
    settings.scanning.disabled = True
    # Explicit Events only (condition transitions, invalid specs) plus kopf's own warnings.
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    # Every handler is a coroutine; kopf's thread pool only serves its own sync helpers.
    settings.execution.max_workers = 4
    # An idle per-object worker keeps its last watch event (the whole CR) until it exits: 5 s
    # by default, so a burst of creates keeps every CR and child alive at once (bench/RESULTS.md).
    settings.queueing.idle_timeout = 0.5
    memo.budget_s = reconcile_budget()
    memo.kube = Kube(load_configuration(), read_secrets=os.environ.get(READ_SECRETS_ENV, "").lower() == "true",
                     on_response=METRICS.on_response)
    memory = state.fresh()  # shared with every Reconciler of this run (the telemetry's too)
    memo.desired, memo.configs, memo.evaluations = memory.desired, memory.configs, memory.evaluations
    memo.offload, memo.slots, memo.status = memory.offload, memory.slots, memory.status
    # The validating webhook (controller/webhook.py), when the chart enables it.
    settings.admission.server = webhook.server_from_env()
    if webhook.enabled():
        webhook.warm_up()
    _warm_up()


@kopf.on.cleanup(registry=registry)
async def close(memo: kopf.Memo, **_: Any) -> None:
    kube: Kube | None = getattr(memo, "kube", None)
    if kube is not None:
        await kube.close()
    offload = getattr(memo, "offload", None)
    if offload is not None:
        offload.shutdown()


def _warm_up() -> None:
    """transformers imports each config class on first use (about a second for the first):
    pay it at start-up, not in the first reconcile while the other workers wait."""
    from transformers import CONFIG_MAPPING

    for model_type in ("llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "mixtral", "gpt_oss"):
        if model_type in CONFIG_MAPPING:
            CONFIG_MAPPING[model_type]


def _api_client() -> k8s_client.ApiClient:
    """The official synchronous client: only leader election uses it, in its own thread,
    before and beside kopf's loop (the `leaderelection` module is written for it)."""
    return k8s_client.ApiClient(load_configuration())


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then $KUBECONFIG / ~/.kube/config."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _post(body: Any, events: list[tuple[str, str, str]]) -> None:
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])


def backoff(kind: str, retry: int) -> float:
    """Seconds before retry number `retry` (0-based): exponential per kind, capped. "slow" is
    for refusals a person fixes (RBAC, a missing CRD); "source" for an unreachable Hub."""
    base, cap = BACKOFF[kind]
    return BACKOFF_SCALE.get() * min(cap, base * 2 ** min(retry, 16))


def _reconciler(memo: kopf.Memo, logger: Any) -> Reconciler:
    return Reconciler(memo.kube, logger, desired=memo.desired, configs=memo.configs, evaluations=memo.evaluations,
                      offload=memo.offload, status=memo.status)


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, retry: int = 0, **_: Any) -> None:
    """In a slot, within the budget (`attempt.reconcile_once`); kopf retries with our backoff."""
    outcome = await reconcile_once(_reconciler(memo, logger), body, budget_s=memo.budget_s, logger=logger, post=_post, retry=retry)
    if outcome.retry is not None:
        raise kopf.TemporaryError(outcome.retry, delay=backoff(outcome.retry_kind, retry))


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


@kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="forget", when=_deleted, registry=registry)
async def forget(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted CR: drop what we remembered for it (its children go by garbage collection)."""
    meta = body.get("metadata") or {}
    memo.desired.forget(meta.get("namespace"), meta.get("name"), meta.get("uid"))
    memo.status.forget(meta.get("namespace"), meta.get("name"))
    METRICS.state.forget(meta.get("namespace", ""), meta.get("name", ""))


async def _child_event(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, *, workload: bool) -> None:
    reconciler = _reconciler(memo, logger)
    try:
        await reconciler.heal(body, type)
    except (KubeTemporaryError, KubePermanentError) as exc:  # the next event or resync retries
        logger.warning("Could not put back %s %s: %s", body.get("kind"), (body.get("metadata") or {}).get("name"), exc)
    # A workload with no status yet carries no readiness news (the reconcile that created it
    # wrote the status); skipping it saves reading the parent on every create.
    if workload and (type == "DELETED" or body.get("status")):
        await _mirror(body, type, memo, logger)


async def _mirror(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger) -> None:
    result = await _reconciler(memo, logger).mirror_workload(dict(body), type, now=_now())
    if result.status_patch and result.body is not None:
        meta = result.body.get("metadata") or {}
        METRICS.state.observe(meta.get("namespace", ""), meta.get("name", ""), result.status)
        _post(result.body, result.events)


@kopf.on.event("apps", "v1", "deployments", labels=_CHILD_FILTER, id="mirror-deployment", registry=registry)
async def mirror_deployment(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Deployment drift and readiness -> put it back; the parent's Available/Ready/readyReplicas."""
    await _child_event(body, type, memo, logger, workload=True)


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=_CHILD_FILTER, id="mirror-lws", registry=registry)
async def mirror_leader_worker_set(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """LeaderWorkerSet drift and readiness -> put it back; the parent's Available/Ready/readyReplicas."""
    await _child_event(body, type, memo, logger, workload=True)


@kopf.on.event("", "v1", "services", labels=_CHILD_FILTER, id="heal-service", registry=registry)
async def heal_service(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A hand-edited or deleted Service is put back."""
    await _child_event(body, type, memo, logger, workload=False)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=_CHILD_FILTER, id="heal-pdb", registry=registry)
async def heal_pod_disruption_budget(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A hand-edited or deleted PodDisruptionBudget is put back."""
    await _child_event(body, type, memo, logger, workload=False)


def configure_logging(log_format: str) -> None:
    """INFO by default (what was created, patched, put back, pruned), through kopf's own log
    configuration; "json": one JSON object per line, with the object's namespace and name."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use {' or '.join(LOG_FORMATS)}")
    kopf.configure(log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL)
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _QuietWatchHandlers) for f in objects.filters):
        objects.addFilter(_QuietWatchHandlers())


class _QuietWatchHandlers(logging.Filter):
    """Drops kopf's "Handler 'heal-pdb' succeeded." line, logged for every child watch event
    (thousands an hour at scale, saying nothing); what a handler did is logged by the handler."""

    _IDS = ("mirror-deployment", "mirror-lws", "heal-service", "heal-pdb", "forget", "telemetry-track")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str) or not record.msg.startswith("Handler '"):
            return True
        return not any(record.msg.startswith(f"Handler '{id_}' succeeded") for id_ in self._IDS)


webhook.register(registry)
telemetry.register(registry)


def run(
    namespaces: list[str],
    all_namespaces: bool,
    liveness: str | None,
    *,
    ready_flag: threading.Event | None = None,
    stop_flag: threading.Event | None = None,
    log_format: str | None = None,
) -> None:
    """Run the operator until stopped. kopf runs standalone (its peering is not leader
    election); with SPECDEPLOY_LEADER_ELECTION=true this replica first waits for the Lease
    (controller/leader.py), so the chart can run two. SPECDEPLOY_METRICS_PORT serves /metrics
    and /readyz."""
    if not namespaces and not all_namespaces:
        raise ValueError("give --namespace at least once, or --all-namespaces")
    env.check()  # every numeric setting, before anything starts
    configure_logging(log_format or os.environ.get(LOG_FORMAT_ENV, "text"))
    try:  # fail fast with a clear message instead of kopf retrying its startup every minute
        api_client = _api_client()
    except k8s_config.ConfigException as exc:
        raise ValueError(f"no Kubernetes credentials ({exc}): set KUBECONFIG, or run in a pod with a service account") from exc
    port = METRICS_PORT.get_int()
    server = METRICS.serve(port) if port else None
    METRICS.ready.set()  # serving (as leader or standby)

    def operate(stop: threading.Event) -> None:
        kopf.run(
            registry=registry,
            standalone=True,
            clusterwide=all_namespaces,
            namespaces=[] if all_namespaces else list(namespaces),
            liveness_endpoint=liveness,
            ready_flag=ready_flag,
            stop_flag=stop,
        )

    stop = stop_flag or threading.Event()
    try:
        if leader.enabled():
            namespace = (os.environ.get(leader.LEASE_NAMESPACE_ENV) or os.environ.get("POD_NAMESPACE")
                         or (namespaces[0] if namespaces else "default"))
            leader.run_as_leader(lambda lost: operate(_either(stop, lost)), api_client, namespace)
        else:
            operate(stop)
    finally:
        api_client.close()
        if server is not None:
            server.shutdown()


def _either(a: threading.Event, b: threading.Event) -> threading.Event:
    """An event set as soon as `a` or `b` is (kopf takes one stop flag)."""
    both = threading.Event()

    def relay() -> None:
        while not both.is_set():
            if a.wait(0.2) or b.is_set():
                both.set()

    threading.Thread(target=relay, daemon=True).start()
    return both
