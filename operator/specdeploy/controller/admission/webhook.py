"""Admission: refuse at `kubectl apply` a SpeculativeDeployment whose spec does not parse or
whose pair is invalid with the configs in the object itself, over HTTPS with the chart's
certificate.

The webhook reads nothing: no local file, no Hub config, and no object from the cluster. A
review can be POSTed straight to the webhook port by anyone who reaches it, with no credential
the webhook could check, so it cannot know whether its caller may read what the review names.
A ConfigMap it read would answer for the operator's ServiceAccount (its existence, its JSON,
the values at config keys), in any namespace the chart lets the operator read. So a model given
by `configMapRef` is admitted with a warning, the same words whether or not that ConfigMap
exists, and the reconcile reads and judges it in status, in the CR's own namespace, as for an
object created without the webhook. A Hub model is likewise not fetched, and a model that names
a path is refused on its form alone, as the reconcile refuses it (`resolve_model(local_files=False)`,
one rule for both). Nor is a refusal by rules guessed for an image of unknown release certain:
when a preflight will judge the image's own plan (pipeline.plan_for_image), it is admitted with
the guess as warnings. The verdict is the same `parse_object` + `pipeline.evaluate` the CLI and
the reconciler run. The chart sets failurePolicy Ignore by default: an operator that is down never
blocks applies.

The review itself is untrusted input, answered here rather than by kopf's admission machinery:
a review that is not an AdmissionReview of this shape is a 400 naming the field, not a 500; the
body limit is what the API server can send (`MAX_REVIEW_BYTES`), so no UPDATE is blocked for its
size; nothing is kept per review (kopf remembers every UPDATE's object uid for good); a refusal
is the webhook working, logged at INFO. Nor does a client hold the server's resources:

- kopf's server (aiohttp's TCPSite) leaves the TLS handshake asyncio's 60 s and the request's
  headers aiohttp's keep-alive hour. Here each connection's handshake, and then each request,
  headers and body, must arrive whole within `READ_DEADLINE_S`, or the connection is cut
  (`_Connection`); an idle kept-alive connection is closed after `IDLE_S`.
- At most `MAX_REVIEWS` reviews are read or judged at once (`ReviewSlots`): memory under load is
  that many bodies at most, whatever the number of clients; one more is answered 429 at once
  (the API server then applies the failurePolicy). When the reviews stop, the C heap's free pages
  are given back (glibc keeps them otherwise, in each thread's arena).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable

import kopf
from aiohttp import web

from specdeploy.api.parse import MAX_REQUEST_BYTES, parse_object, parse_spec
from specdeploy.controller.reconcile import preflight_gate
from specdeploy.controller.process.env import Number
from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model, resolve_pair
from specdeploy.findings import Severity

HANDLER_ID = "validate-speculativedeployment"  # the path the chart's webhook configuration calls
PORT_ENV = "SPECDEPLOY_WEBHOOK_PORT"
PORT = Number(PORT_ENV, 0, minimum=1, maximum=65535, integer=True)  # unset: no webhook
CERT_DIR_ENV = "SPECDEPLOY_WEBHOOK_CERT_DIR"  # tls.crt + tls.key, as cert-manager and the chart write them
# An UPDATE review carries the object and its oldObject, each up to the API server's request
# limit, plus the review's own fields: the largest review the API server can send.
MAX_REVIEW_BYTES = 2 * MAX_REQUEST_BYTES + 1024 * 1024
# The TLS handshake, then each request (headers and body), must arrive within this many seconds.
# The API server sends a review at once and waits at most its timeoutSeconds (<= 30 s) anyway.
READ_DEADLINE_S = Number("SPECDEPLOY_WEBHOOK_READ_DEADLINE_S", 10.0, minimum=0, exclusive=True)
# Reviews read or judged at once; one more is answered 429 (failurePolicy applies).
MAX_REVIEWS = Number("SPECDEPLOY_WEBHOOK_MAX_REVIEWS", 8, minimum=1, integer=True)
IDLE_S = 60.0  # a kept-alive connection with no request is closed (Go's clients keep theirs 90 s)
TRIM_AFTER_S = 1.0  # the reviews have stopped this long: give the heap's free pages back
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE")  # what the chart registers the webhook for
logger = logging.getLogger("specdeploy.webhook")


@dataclass(frozen=True)
class Admission:
    """The answer to one AdmissionReview."""

    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)


def _not_at_admission(name: str, key: str) -> str:
    """A ConfigMap is never read at admission (the module's doc says why): the same words
    whether it exists or not."""
    raise SourceUnavailable("configMapRef", "a ConfigMap is not read at admission")


def admission_verdict(obj: dict[str, Any], *, check_name: bool = True) -> Admission:
    """The verdict on one object. Refuse only on errors that are certain from the object alone."""
    from specdeploy.pipeline import evaluate

    parsed = parse_object(obj)
    findings = [f for f in parsed.findings if check_name or not f.field.startswith("metadata.name")]
    if any(f.severity is Severity.ERROR for f in findings):
        return _refusal(findings)
    spec = parsed.spec
    if spec is None:  # refused only for its name, which an UPDATE cannot change
        spec, spec_findings = parse_spec(obj["spec"])
        if spec is None:
            return _refusal(spec_findings)
    try:  # the reconcile's rule (no local file), with nothing read from anywhere
        target, draft = resolve_pair(spec, lambda source, where: resolve_model(
            source, where, configmap_reader=_not_at_admission, local_only=True, local_files=False))
    except SourceInvalid as exc:
        return _refusal([], extra=f"{exc.field}: {exc.message}")
    except SourceUnavailable as exc:
        return Admission(True, warnings=[f"not judged at admission: {exc.field}: {exc.message[:300]}; the operator judges it in status"])
    evaluation = evaluate(spec, target, draft)
    reported = evaluation.findings
    if evaluation.image_plan is not None and preflight_gate.runs_for(spec):
        # Rules guessed for an image of unknown release: not certain; the image's own vLLM decides.
        reported = evaluation.as_guess()
    elif not evaluation.ok:
        return _refusal(list(reported))
    return Admission(True, warnings=[f"{f.field}: {f.message}" for f in reported if f.severity is Severity.WARNING])


def _refusal(findings: list[Any], extra: str = "") -> Admission:
    errors = [f"{f.field}: {f.message} [{f.code}]" for f in findings if f.severity is Severity.ERROR]
    return Admission(False, "; ".join([*errors, *([extra] if extra else [])])[:4000] or "invalid")


class MalformedReview(ValueError):
    """The request is not an AdmissionReview this webhook answers; the message names the field."""


@dataclass(frozen=True)
class Review:
    """What a verdict needs of an AdmissionReview request."""

    api_version: str
    uid: str
    operation: str
    obj: dict[str, Any]


def read_review(data: Any) -> Review:
    """The review's fields, checked: the API server always sends them so; anything else is a
    client that is not the API server, answered 400 with the field at fault."""
    if not isinstance(data, dict):
        raise MalformedReview("the body must be a JSON object (an AdmissionReview)")
    if data.get("kind") != "AdmissionReview" or data.get("apiVersion") not in REVIEW_VERSIONS:
        raise MalformedReview(f"kind must be AdmissionReview and apiVersion one of {', '.join(REVIEW_VERSIONS)}")
    request = data.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request must be an object")
    uid, operation, obj = request.get("uid"), request.get("operation"), request.get("object")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid must be a non-empty string")
    if operation not in OPERATIONS:
        raise MalformedReview(f"request.operation must be one of {', '.join(OPERATIONS)}, got {str(operation)[:40]!r}")
    if not isinstance(obj, dict):
        raise MalformedReview("request.object must be an object")
    return Review(str(data["apiVersion"]), uid, str(operation), obj)


def review_response(review: Review, verdict: Admission) -> dict[str, Any]:
    """The AdmissionReview answer: a refusal carries 422 and the findings, as the API server
    shows them to the user."""
    response: dict[str, Any] = {"uid": review.uid, "allowed": verdict.allowed}
    if verdict.warnings:
        response["warnings"] = [w[:512] for w in verdict.warnings]
    if not verdict.allowed:
        response["status"] = {"code": 422, "reason": "Invalid", "message": verdict.message}
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}



async def _review_body(request: web.BaseRequest) -> bytes:
    """The body, read up to MAX_REVIEW_BYTES (aiohttp's default stops at 1 MiB: a 413 for an
    UPDATE of a CR over 0.5 MiB, which would block it under failurePolicy Fail). Once it is read
    whole, the connection's read deadline stops: judging is not the client's time."""
    if (request.content_length or 0) > MAX_REVIEW_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_REVIEW_BYTES, actual_size=request.content_length or 0)
    body = bytearray()
    try:
        async for chunk in request.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > MAX_REVIEW_BYTES:
                raise web.HTTPRequestEntityTooLarge(max_size=MAX_REVIEW_BYTES, actual_size=len(body))
    except ConnectionError:  # cut at the read deadline, or the client left: nobody reads the answer
        raise web.HTTPRequestTimeout() from None
    if isinstance(request.protocol, _Connection):
        request.protocol.request_read()
    return bytes(body)


async def answer_review(request: web.BaseRequest, offload: Any) -> web.Response:
    """One review: 400 for what is not a review, else the verdict (CPU work, in the operator's
    CPU pool when it has one)."""
    if request.method != "POST":
        raise web.HTTPMethodNotAllowed(request.method, ["POST"])
    try:
        review = read_review(json.loads(await _review_body(request)))
    except (MalformedReview, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise web.HTTPBadRequest(text=f"not an AdmissionReview: {str(exc)[:300]}") from None

    def judge() -> Admission:
        return admission_verdict(review.obj, check_name=review.operation == "CREATE")  # a name cannot change: judge it once

    verdict = await offload.run(offload.cpu, None, judge) if offload is not None else await asyncio.to_thread(judge)
    if not verdict.allowed:
        meta = review.obj.get("metadata") if isinstance(review.obj.get("metadata"), dict) else {}
        logger.info("Refused %s of SpeculativeDeployment %s/%s: %s", review.operation, meta.get("namespace"), meta.get("name"),
                    verdict.message)
    return web.json_response(review_response(review, verdict))


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def trim_heap() -> None:
    """Give the C heap's free pages back to the system. Python frees a review's body and objects,
    but glibc keeps the pages for reuse, in the main heap and in each thread's arena, unless
    asked: without this the RSS after a load stays at its peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class ReviewSlots:
    """At most `limit` reviews read or judged at once, so memory under review load is bounded by
    that many bodies whatever the number of clients. Taken before the body is read, answered 429
    when none is free (the API server then applies the failurePolicy: Ignore admits, and the
    reconcile judges). When the last one is given back and none is taken for `quiet_s`, `trim`
    runs off the loop."""

    def __init__(self, limit: int, *, trim: Callable[[], None] = trim_heap, quiet_s: float = TRIM_AFTER_S) -> None:
        self.limit, self.busy, self.refused = limit, 0, 0
        self._trim, self._quiet_s = trim, quiet_s
        self._timer: asyncio.TimerHandle | None = None
        self._told = False  # a refusal was logged in this busy period

    def take(self) -> bool:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.busy >= self.limit:
            self.refused += 1
            if not self._told:
                logger.info("Refused reviews beyond %d at once (%s): the API server applies the webhook's failurePolicy",
                            self.limit, MAX_REVIEWS.name)
                self._told = True
            return False
        self.busy += 1
        return True

    def give(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self._told = False
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._quiet_s, lambda: loop.run_in_executor(None, self._trim))


class _Connection(web.RequestHandler):
    """aiohttp's connection handler with a read deadline: each request, headers and body, must
    arrive whole within `deadline` seconds of the connection's start (after the TLS handshake) or
    of its own first byte, or the connection is cut. aiohttp alone gives the headers its
    keep-alive timeout (an hour) and the body no limit."""

    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, deadline: float, **kwargs: Any) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._deadline_loop, self._deadline = loop, deadline
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._timer is None:  # the first byte of the next request on a kept-alive connection
            self._arm()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.request_read()
        super().connection_lost(exc)

    def request_read(self) -> None:
        """The request has arrived whole: its deadline stops."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        self._timer = self._deadline_loop.call_later(self._deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.transport is not None:
            logger.debug("Cut a webhook connection whose request did not arrive within %g s", self._deadline)
            self.transport.abort()


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


async def listen(port: int, context: ssl.SSLContext, answer: Handler) -> tuple[asyncio.AbstractServer, web.Server]:
    """HTTPS on `port` with the read deadline (`_Connection`) and the TLS handshake bounded by it
    too; kopf's server (aiohttp's TCPSite) can set neither."""
    loop, deadline = asyncio.get_running_loop(), READ_DEADLINE_S.get()

    async def closing(request: web.BaseRequest) -> web.StreamResponse:
        try:
            return await answer(request)
        except web.HTTPException as exc:  # not a review read whole: this connection ends with the answer
            exc.force_close()
            raise

    server = web.Server(closing)
    listener = await loop.create_server(
        lambda: _Connection(server, loop=loop, deadline=deadline, keepalive_timeout=IDLE_S), "0.0.0.0", port,
        ssl=context, ssl_handshake_timeout=deadline, reuse_address=True, reuse_port=True)
    return listener, server


async def _disabled(fn: Any) -> AsyncIterator[Any]:
    """No webhook: listens nowhere and yields no client config."""
    await asyncio.Event().wait()
    yield  # pragma: no cover - never reached


def enabled() -> bool:
    return bool(PORT.get_int())


def server_from_env() -> Any:
    """The review server on $SPECDEPLOY_WEBHOOK_PORT with the certificate in
    $SPECDEPLOY_WEBHOOK_CERT_DIR, reloaded when it changes; a server that listens nowhere when
    the port is not set."""
    port = PORT.get_int()
    if not port:
        return _disabled
    return ReloadingWebhookServer(port, Path(os.environ.get(CERT_DIR_ENV, "/tls")))


# How often the certificate files are compared with the ones served: the kubelet refreshes a
# Secret's volume within about a minute of a cert-manager renewal.
CERT_CHECK_S = Number("SPECDEPLOY_WEBHOOK_CERT_CHECK_S", 10.0, minimum=0, exclusive=True)


# Set while this replica's webhook server listens (readiness waits for it: controller/process/metrics.py).
SERVING = threading.Event()


class ReloadingWebhookServer:
    """The review server (`listen`, answering with `answer_review`) over an SSL context whose
    certificate is loaded again when tls.crt or tls.key change on disk (a renewal that does not
    roll the pods). New connections get the new certificate; the server is never restarted.
    Until both files exist (a Secret volume filled after the pod started) the server waits
    instead of failing."""

    def __init__(self, port: int, cert_dir: Path) -> None:
        self.port = port
        self.certfile, self.pkeyfile = cert_dir / "tls.crt", cert_dir / "tls.key"

    def _pair(self) -> tuple[bytes, bytes] | None:
        try:
            return self.certfile.read_bytes(), self.pkeyfile.read_bytes()
        except OSError:
            return None

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        served = self._pair()
        if served is None:
            logger.info("Waiting for the webhook certificate in %s", self.certfile.parent)
        while served is None:
            await asyncio.sleep(CERT_CHECK_S.get())
            served = self._pair()
        context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.certfile), str(self.pkeyfile))
        # kopf binds the operator's memo into its admission function (functools.partial,
        # `memobase`): its CPU pool judges. kopf's function itself is not called (module doc).
        offload = getattr(getattr(fn, "keywords", {}).get("memobase"), "offload", None)
        slots = ReviewSlots(MAX_REVIEWS.get_int())

        async def answer(request: web.BaseRequest) -> web.StreamResponse:
            if not slots.take():
                raise web.HTTPTooManyRequests(headers={"Retry-After": "1"}, text=f"more than {slots.limit} reviews at once")
            try:
                return await answer_review(request, offload)
            finally:
                slots.give()

        listener, server = await listen(self.port, context, answer)
        watcher = asyncio.create_task(self._reload_on_change(context, served), name="specdeploy-webhook-cert")
        try:
            SERVING.set()
            yield kopf.WebhookClientConfig(url=f"https://localhost:{self.port}")
            await asyncio.Event().wait()  # kopf asks for the next config: there is none
        finally:
            SERVING.clear()
            watcher.cancel()
            listener.close()
            await server.shutdown(1.0)

    async def _reload_on_change(self, context: ssl.SSLContext, served: tuple[bytes, bytes]) -> None:
        while True:
            await asyncio.sleep(CERT_CHECK_S.get())
            current = self._pair()
            if current is None or current == served:
                continue
            try:
                context.load_cert_chain(str(self.certfile), str(self.pkeyfile))
            except (ssl.SSLError, OSError) as exc:  # a half-written pair: the next check retries
                logger.warning("Could not load the renewed webhook certificate: %s", exc)
                continue
            served = current
            logger.info("Serving the renewed webhook certificate from %s", self.certfile)


def warm_up() -> None:
    """Import what a verdict needs at start-up, so the first review answers within 1 s."""
    import specdeploy.pipeline  # noqa: F401
    import specdeploy.planning.planner  # noqa: F401
