"""The kopf wiring: two explicit registries, startup settings, login, the reconcile handler
and the readiness mirror. `run()` is what `specdeploy run` and `python -m specdeploy.demo` call.

A process runs two kopf instances, each in its own thread and loop: the front (`front`: the
liveness endpoint and the validating webhook, in every replica, leader or standby) and the
controller (`registry`: every handler and the telemetry, only while this replica leads). The
main thread turns SIGTERM into a stop bounded at SHUTDOWN_S and gives the Lease up; the
controller's client refuses writes once leadership is lost (controller/process/leader.py).

Handlers are thin and asynchronous: they take the client from `memo`, run the reconcile as
`attempt.reconcile_once` does for every caller (a slot, the time budget
SPECDEPLOY_RECONCILE_BUDGET_S of own work, a status note when cut off), post Events and turn a
transient failure into `kopf.TemporaryError`. A preflight Job is watched, not polled: an event
of the Job or of its pod reconciles the CR that waits on it. Status is written by `Reconciler.write_status`
(the status subresource, one writer per CR at a time), not through kopf's `patch`: kopf
writes after the handler returns, outside that lock. Nothing blocks kopf's event loop: the API
client is aiohttp, and CPU-bound work and Hub reads run in the bounded pools of `offload.py`. There is no timer, daemon or delete
handler, so kopf adds no finalizer: deleting the resource never waits for the operator, and
the children go with it through their ownerReferences. The telemetry (pods' /metrics ->
status.speculation) is one operator-wide loop, registered by `telemetry.register`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import kopf
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from specdeploy.api.spec import API_GROUP, API_VERSION, PLURAL
from specdeploy.controller import LOG_FORMATS
from specdeploy.controller.admission import certificates
from specdeploy.controller.process import env
from specdeploy.controller.process import leader
from specdeploy.controller.scraping import telemetry
from specdeploy.controller.admission import webhook
from specdeploy.controller.reconcile.attempt import reconcile_once, utc_now as _now
from specdeploy.controller.reconcile.diffbase import DigestDiffBaseStorage
from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError, load_configuration, request_timeout
from specdeploy.controller.process.metrics import METRICS, METRICS_PORT
from specdeploy.controller.reconcile.offload import OffLoop, reconcile_budget
from specdeploy.controller.reconcile.steps import Reconciler, RetryKind
from specdeploy.controller.reconcile import state
from specdeploy.preflight.job import JOB_LABEL
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, label_value

registry = kopf.OperatorRegistry()
# kopf's record of the handled spec, fed the spec each reconcile judged (controller/reconcile/diffbase.py).
DIFFBASE = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
logger = logging.getLogger("specdeploy.operator")

# Opt-in (chart value): read spec.hfTokenSecretRef's Secret to fetch configs of gated repos.
READ_SECRETS_ENV = "SPECDEPLOY_READ_HF_TOKEN_SECRETS"
_CHILD_FILTER = {MANAGED_BY_LABEL: MANAGED_BY}
# Multiplies every retry delay (tests shorten them; 1 in production).
BACKOFF_SCALE_ENV = "SPECDEPLOY_BACKOFF_SCALE"
BACKOFF_SCALE = env.Number(BACKOFF_SCALE_ENV, 1.0, minimum=0)
LOG_FORMAT_ENV = "SPECDEPLOY_LOG_FORMAT"  # text (default) | json
# kind -> (first delay, cap) in seconds.
BACKOFF = {RetryKind.API: (2.0, 120.0), RetryKind.SOURCE: (15.0, 600.0), RetryKind.SLOW: (30.0, 600.0)}


@kopf.on.startup(registry=registry)
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Own prefixes for kopf's bookkeeping, explicit watch timeouts, events for warnings,
    and the API client every handler uses."""
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = DIFFBASE
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
    # Pods are watched for the scheduler's verdict on ours only, and preflight Jobs (with their
    # pods) for the verdict: filtered by the server, not here.
    settings.watching.label_selectors[("v1", "pods")] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    settings.watching.label_selectors[("batch", "v1", "jobs")] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    # An idle per-object worker keeps its last watch event (the whole CR) until it exits: 5 s
    # by default, so a burst of creates keeps every CR and child alive at once (bench/RESULTS.md).
    settings.queueing.idle_timeout = 0.5
    memo.budget_s = reconcile_budget()
    leadership: leader.Leadership | None = getattr(memo, "leadership", None)
    memo.kube = Kube(load_configuration(), read_secrets=os.environ.get(READ_SECRETS_ENV, "").lower() == "true",
                     on_response=METRICS.on_response, may_write=None if leadership is None else leadership.holds,
                     keeps_webhook_certificate=certificates.Placement.from_env() is not None)
    memory = state.fresh()  # shared with every Reconciler of this run (the telemetry's too)
    memo.desired, memo.configs, memo.evaluations = memory.desired, memory.configs, memory.evaluations
    memo.offload, memo.slots, memo.status = memory.offload, memory.slots, memory.status
    memo.unschedulable, memo.runs, memo.preflight = memory.unschedulable, memory.runs, memory.preflight
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
    """The config classes' generated data is read on first use: pay it at start-up, not in the
    first reconcile while the other workers wait."""
    from specdeploy.geometry.hf_classes import table

    table()


def _api_client() -> k8s_client.ApiClient:
    """The official synchronous client: only leader election uses it, in its own threads,
    beside kopf's loops. No hidden retries (urllib3 retries a GET 3 times by default): each
    Lease call ends within the timeout the elector gives it, before the renew deadline."""
    configuration = load_configuration()
    configuration.retries = 0
    return k8s_client.ApiClient(configuration)


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then $KUBECONFIG / ~/.kube/config."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _post(body: Any, events: list[tuple[str, str, str]]) -> None:
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])


def backoff(kind: RetryKind, retry: int) -> float:
    """Seconds before retry number `retry` (0-based): exponential per kind (RetryKind), capped."""
    base, cap = BACKOFF[kind]
    return BACKOFF_SCALE.get() * min(cap, base * 2 ** min(retry, 16))


def _reconciler(memo: kopf.Memo, logger: Any) -> Reconciler:
    return Reconciler(memo.kube, logger, desired=memo.desired, configs=memo.configs, evaluations=memo.evaluations,
                      offload=memo.offload, status=memo.status)


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, id="reconcile", registry=registry)
async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, retry: int = 0, **_: Any) -> None:
    """In a slot, within the budget (`attempt.reconcile_once`); kopf retries with our backoff.
    kopf then records the spec this reconcile judged as handled (controller/reconcile/diffbase.py)."""
    DIFFBASE.forget(body.metadata.uid)
    outcome = await reconcile_once(_reconciler(memo, logger), body, budget_s=memo.budget_s, logger=logger, post=_post, retry=retry)
    if outcome.result is not None and outcome.result.judged is not None:
        DIFFBASE.judged(outcome.result.judged)
    if outcome.retry is not None:
        raise kopf.TemporaryError(outcome.retry, delay=backoff(outcome.retry_kind, retry))


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


def _alive(type: str | None, **_: Any) -> bool:
    return type != "DELETED"


@kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="forget", when=_deleted, registry=registry)
async def forget(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted CR: drop what we remembered for it (its children go by garbage collection)."""
    meta = body.get("metadata") or {}
    memo.desired.forget(meta.get("namespace"), meta.get("name"), meta.get("uid"))
    memo.status.forget(meta.get("namespace"), meta.get("name"))
    DIFFBASE.forget(meta.get("uid"))
    memo.unschedulable.forget(meta.get("namespace"), label_value(meta.get("name") or ""))
    memo.runs.forget(meta.get("namespace"), meta.get("name"), meta.get("uid"))
    memo.preflight.done(meta.get("namespace"), meta.get("name"), meta.get("uid"))
    METRICS.state.forget(meta.get("namespace", ""), meta.get("name", ""))


@kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="metrics-observe", when=_alive, registry=registry)
async def observe_status(body: kopf.Body, **_: Any) -> None:
    """The per-CR gauges from the status as the API server stores it, whoever wrote it (the
    reconcile, the readiness mirror, the telemetry's status.speculation), with no hook in them."""
    meta = body.get("metadata") or {}
    METRICS.state.observe(meta.get("namespace", ""), meta.get("name", ""), dict(body.get("status") or {}))


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


@kopf.on.event("", "v1", "pods", labels={**_CHILD_FILTER, JOB_LABEL: kopf.ABSENT}, id="pod-scheduling", registry=registry)
async def pod_scheduling(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A serving pod the scheduler cannot place (or now has placed) -> the parent's Ready says why."""
    result = await _reconciler(memo, logger).pod_scheduling(dict(body), type, now=_now())
    if result.status_patch and result.body is not None:
        _post(result.body, result.events)


@kopf.on.event("batch", "v1", "jobs", labels=_CHILD_FILTER, id="preflight-job", registry=registry)
async def preflight_job(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A preflight Job changed (its pod ended, its deadline passed, it is gone) -> the CR that waits on it."""
    await _preflight_changed(body, type, str((body.get("metadata") or {}).get("name")), memo, logger)


@kopf.on.event("", "v1", "pods", labels={**_CHILD_FILTER, JOB_LABEL: kopf.PRESENT}, id="preflight-pod", registry=registry)
async def preflight_pod(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A pod that carries a preflight Job's label changed -> the CR that waits on that Job (which
    reads the Job and its pods itself: only the Job's own pod gives a verdict)."""
    job = ((body.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL)
    await _preflight_changed(body, type, str(job), memo, logger)


async def _preflight_changed(body: kopf.Body, type: str | None, job: str, memo: kopf.Memo, logger: kopf.Logger) -> None:
    """Reconcile the CR that waits on `job` when the event is news, retrying a transient
    failure as kopf would (nothing else wakes a waiting CR)."""
    meta = body.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    name = memo.preflight.woken(namespace, job, (str(body.get("kind")), str(meta.get("name"))), meta.get("resourceVersion"),
                                deleted=type == "DELETED")
    if name is None:
        return
    parent = {"metadata": {"namespace": namespace, "name": name}}  # the reconcile reads the live CR
    for attempt in itertools.count():
        outcome = await reconcile_once(_reconciler(memo, logger), parent, budget_s=memo.budget_s, logger=logger, post=_post,
                                       retry=attempt, news=True)
        if outcome.retry is None:
            return
        await asyncio.sleep(backoff(outcome.retry_kind, attempt))


@kopf.on.event("", "v1", "services", labels=_CHILD_FILTER, id="heal-service", registry=registry)
async def heal_service(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A hand-edited or deleted Service is put back."""
    await _child_event(body, type, memo, logger, workload=False)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=_CHILD_FILTER, id="heal-pdb", registry=registry)
async def heal_pod_disruption_budget(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A hand-edited or deleted PodDisruptionBudget is put back."""
    await _child_event(body, type, memo, logger, workload=False)


@kopf.on.event("inference.networking.k8s.io", "v1", "inferencepools", labels=_CHILD_FILTER, id="heal-inferencepool", registry=registry)
async def heal_inference_pool(body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """A hand-edited or deleted InferencePool (spec.routing) is put back."""
    await _child_event(body, type, memo, logger, workload=False)


def configure_logging(log_format: str) -> None:
    """INFO by default (what was created, patched, put back, pruned), through kopf's own log
    configuration; "json": one JSON object per line, with the object's namespace and name."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use {' or '.join(LOG_FORMATS)}")
    # Text lines about an object start with [namespace/name]; JSON carries them as fields.
    kopf.configure(log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL, log_prefix=log_format != "json")
    objects = logging.getLogger("kopf.objects")
    for quiet in (_QuietWatchHandlers, _NoEventPerRetry):
        if not any(isinstance(f, quiet) for f in objects.filters):
            objects.addFilter(quiet())
    reactor = logging.getLogger("kopf._core.reactor.running")
    if not any(isinstance(f, _SignalsAreOurs) for f in reactor.filters):
        reactor.addFilter(_SignalsAreOurs())


class _SignalsAreOurs(logging.Filter):
    """kopf runs in threads here and warns that it ignores OS signals: `run` handles them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("OS signals are ignored")


class _NoEventPerRetry(logging.Filter):
    """kopf posts an Event for every retry ("Handler 'reconcile' failed temporarily: ..."): a
    write per retry, however slow the API server already is. The line is still logged; what
    the retry is about is in the status, with its own Event when it changes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and " failed temporarily" in record.msg:
            record.k8s_skip = True
        return True


class _QuietWatchHandlers(logging.Filter):
    """Drops kopf's "Handler 'heal-pdb' succeeded." line, logged for every child watch event
    (thousands an hour at scale, saying nothing); what a handler did is logged by the handler.
    The reconcile's too: it "succeeded" for an invalid spec, and its own line gives the verdict."""

    _IDS = ("mirror-deployment", "mirror-lws", "heal-service", "heal-pdb", "heal-inferencepool", "forget", "telemetry-track",
            "metrics-observe", "reconcile", "preflight-job", "preflight-pod")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str) or not record.msg.startswith("Handler '"):
            return True
        return not any(record.msg.startswith(f"Handler '{id_}' succeeded") for id_ in self._IDS)


telemetry.register(registry)


@kopf.on.startup(registry=registry)
async def keep_webhook_certificate(memo: kopf.Memo, **_: Any) -> None:
    """The leader keeps the webhook's certificate and caBundle when the chart asks it to
    (no cert-manager): controller/admission/certificates.py."""
    where = certificates.Placement.from_env()
    if where is not None:
        memo.certificate_task = asyncio.create_task(certificates.keep(memo.kube, where), name="specdeploy-webhook-certificate")


@kopf.on.cleanup(registry=registry)
async def stop_keeping_webhook_certificate(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "certificate_task", None)
    if task is not None:
        task.cancel()

# -- the front: what every replica serves, leader or standby ---------------------------------
# kopf's liveness endpoint and the validating webhook: validation needs no leadership, so the
# webhook Service may route to any replica. It has no client of its own: the webhook reads
# nothing from the cluster (controller/admission/webhook.py says why).
front = kopf.OperatorRegistry()
kopf.on.login(registry=front)(login)


@kopf.on.startup(registry=front)
async def configure_front(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """The webhook server (when the chart enables it) and the CPU pool its verdicts run in; no
    watches, no Events, no reads."""
    settings.scanning.disabled = True
    settings.posting.enabled = False
    settings.networking.request_timeout = request_timeout()[1]
    settings.admission.server = webhook.server_from_env()
    memo.offload = OffLoop()
    if webhook.enabled():
        webhook.warm_up()


# -- the process -------------------------------------------------------------------------------
# SIGTERM to exit: the controller gets this long to stop (in flight reconciles are cancelled),
# the whole process SHUTDOWN_S; the kubelet's grace period is 30 s, the promise 5 s.
CONTROLLER_STOP_S = 2.5
SHUTDOWN_S = 4.0


@dataclass(frozen=True)
class _Scope:
    namespaces: tuple[str, ...]
    all_namespaces: bool


def run(
    namespaces: list[str],
    all_namespaces: bool,
    liveness: str | None,
    *,
    ready_flag: threading.Event | None = None,
    stop_flag: threading.Event | None = None,
    log_format: str | None = None,
) -> None:
    """Run the operator until stopped (SIGTERM/SIGINT, or `stop_flag`). Every replica serves
    the front (liveness, webhook, /metrics and /readyz); the controller (kopf's handlers, the
    telemetry) runs while this replica leads: always with one replica, while it holds the Lease
    with SPECDEPLOY_LEADER_ELECTION=true (controller/process/leader.py)."""
    if not namespaces and not all_namespaces:
        raise ValueError("give --namespace at least once, or --all-namespaces")
    env.check()  # every numeric setting, before anything starts
    configure_logging(log_format or os.environ.get(LOG_FORMAT_ENV, "text"))
    try:  # fail fast with a clear message instead of kopf retrying its startup every minute
        api_client = _api_client()
    except k8s_config.ConfigException as exc:
        raise ValueError(f"no Kubernetes credentials ({exc}): set KUBECONFIG, or run in a pod with a service account") from exc
    scope = _Scope(tuple(namespaces), all_namespaces)
    stop = stop_flag or threading.Event()
    port = METRICS_PORT.get_int()
    METRICS.webhook_serving = webhook.SERVING if webhook.enabled() else None
    server = METRICS.serve(port) if port else None
    restore_signals = _stop_on_signals(stop)
    front_thread = _kopf_thread("specdeploy-front", front, scope, stop, liveness_endpoint=liveness, ready_flag=METRICS.ready)
    try:
        if leader.enabled():
            _lead_when_elected(api_client, _lease_namespace(namespaces), scope, stop, ready_flag)
        else:
            _control(scope, leader.Leadership.always(), stop, ready_flag)
    finally:
        stop.set()
        front_thread.join(CONTROLLER_STOP_S)
        METRICS.ready.clear()
        api_client.close()
        if server is not None:
            server.shutdown()
        restore_signals()
    if _SIGNALLED.is_set():  # the shipped process: nothing is left to flush but the log, and
        logging.shutdown()  # the interpreter's teardown of a loaded process takes seconds under load
        os._exit(0)


def _lease_namespace(namespaces: list[str]) -> str:
    return (os.environ.get(leader.LEASE_NAMESPACE_ENV) or os.environ.get("POD_NAMESPACE")
            or (namespaces[0] if namespaces else "default"))


def _lead_when_elected(api_client: k8s_client.ApiClient, namespace: str, scope: _Scope, stop: threading.Event,
                       ready_flag: threading.Event | None) -> None:
    """Wait as a standby until this replica holds the Lease, then control until stopped; give
    the Lease up once the controller has stopped writing, so a standby takes over at once."""
    elector = leader.Elector(k8s_client.CoordinationV1Api(api_client), namespace, leader.identity(), leader.Timing.from_env())
    if not elector.acquire(stop):
        return
    leader.watchdog(elector.leadership, stop, _fenced)
    threading.Thread(target=elector.keep, args=(stop,), name="specdeploy-lease-renewer", daemon=True).start()
    if _control(scope, elector.leadership, stop, ready_flag):
        elector.release()


def _fenced() -> None:
    """The renew deadline passed without a renewal: writes are already refused
    (Leadership.holds); end the process now, kopf's own writes with it, before the Lease
    expires for the others. The kubelet restarts it as a standby."""
    logger.error("Could not renew the Lease within the renew deadline: exiting (status %d) so that no two replicas act",
                 leader.FENCED_EXIT)
    logging.shutdown()
    os._exit(leader.FENCED_EXIT)


def _control(scope: _Scope, leadership: leader.Leadership, stop: threading.Event, ready_flag: threading.Event | None) -> bool:
    """Run the controller until `stop` (or until it ends by itself, which stops the process).
    True when it stopped within CONTROLLER_STOP_S."""
    METRICS.leading.set()
    thread = _kopf_thread("specdeploy-controller", registry, scope, stop, ready_flag=ready_flag,
                          memo=kopf.Memo(leadership=leadership))
    while thread.is_alive() and not stop.wait(0.5):
        pass
    stop.set()
    thread.join(CONTROLLER_STOP_S)
    METRICS.leading.clear()
    return not thread.is_alive()


def _kopf_thread(name: str, reg: kopf.OperatorRegistry, scope: _Scope, stop: threading.Event, **kwargs: Any) -> threading.Thread:
    """kopf in its own thread and event loop, stopped by `stop`; its end sets `stop` (the
    front and the controller live and die together). A daemon: a hung handler never holds the
    process past its shutdown."""

    def target() -> None:
        try:
            asyncio.run(_operate(reg, scope, stop, **kwargs))
        finally:
            stop.set()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


async def _operate(reg: kopf.OperatorRegistry, scope: _Scope, stop: threading.Event, **kwargs: Any) -> None:
    # kopf waits for a threading.Event in an executor thread that asyncio.run then joins: one
    # that is never set would keep the process alive after SIGTERM. An asyncio.Event, set from
    # a daemon thread, leaves nothing to join.
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def relay() -> None:
        stop.wait()
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stopping.set)

    threading.Thread(target=relay, name="specdeploy-stop-relay", daemon=True).start()
    await kopf.operator(registry=reg, standalone=True, clusterwide=scope.all_namespaces,
                        namespaces=[] if scope.all_namespaces else list(scope.namespaces), stop_flag=stopping, **kwargs)


_SIGNALLED = threading.Event()  # SIGTERM/SIGINT arrived (main thread only)


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM (the kubelet) and SIGINT set `stop`; in the main thread only (the shipped
    process), as Python allows. Returns what puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(*_: Any) -> None:
        if not stop.is_set():
            _SIGNALLED.set()
            stop.set()
            threading.Thread(target=_exit_after, args=(SHUTDOWN_S,), name="specdeploy-shutdown-deadline", daemon=True).start()

    for sig in previous:
        signal.signal(sig, on_signal)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _exit_after(seconds: float) -> None:
    """The bound on a stop: whatever still runs then (a handler stuck in a read, a pool's
    worker the interpreter would wait for) does not keep the pod in Terminating."""
    time.sleep(seconds)
    logger.warning("Still stopping %.1f s after the signal: exiting now", seconds)
    logging.shutdown()
    os._exit(0)
