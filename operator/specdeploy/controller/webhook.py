"""Admission: refuse at `kubectl apply` a SpeculativeDeployment whose spec does not parse or
whose pair is invalid with the configs at hand, over HTTPS with the chart's certificate.

"At hand" means no waiting and no local file: inline configs and ConfigMaps. A Hub config is
never fetched at admission, and a model that names a path is refused on its form alone, as the
reconcile refuses it (`resolve_model(local_files=False)`, one rule for both): the verdict says
nothing of the operator's own filesystem. A config not at hand never blocks: the object is
admitted with a warning and judged in status by the reconciler, as without the webhook. The
verdict is the same `parse_object` + `pipeline.evaluate` the CLI and the reconciler run. The
chart sets the webhook's failurePolicy to Ignore by default: an operator that is down never
blocks applies.

The review itself is untrusted input, answered here rather than by kopf's admission machinery
(kopf's TLS server and certificate reload are kept): a review that is not an AdmissionReview
of this shape is a 400 naming the field, not a 500; the body limit is what the API server can
send (`MAX_REVIEW_BYTES`), so no UPDATE is blocked for its size; nothing is kept per review
(kopf remembers every UPDATE's object uid for good); a refusal is the webhook working, logged at
INFO.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import kopf
from aiohttp import web

from specdeploy.api.parse import MAX_REQUEST_BYTES, parse_object, parse_spec
from specdeploy.controller.env import Number
from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model, resolve_pair
from specdeploy.findings import Severity

HANDLER_ID = "validate-speculativedeployment"  # the path the chart's webhook configuration calls
PORT_ENV = "SPECDEPLOY_WEBHOOK_PORT"
PORT = Number(PORT_ENV, 0, minimum=1, maximum=65535, integer=True)  # unset: no webhook
CERT_DIR_ENV = "SPECDEPLOY_WEBHOOK_CERT_DIR"  # tls.crt + tls.key, as cert-manager and the chart write them
# An UPDATE review carries the object and its oldObject, each up to the API server's request
# limit, plus the review's own fields: the largest review the API server can send.
MAX_REVIEW_BYTES = 2 * MAX_REQUEST_BYTES + 1024 * 1024
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE")  # what the chart registers the webhook for
logger = logging.getLogger("specdeploy.webhook")
# (namespace, name, key) -> the key's text, or None when the ConfigMap or key is missing.
ConfigMapLookup = Callable[[str, str, str], "str | None"]


@dataclass(frozen=True)
class Admission:
    """The answer to one AdmissionReview."""

    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)


def admission_verdict(obj: dict[str, Any], *, read_config_map: ConfigMapLookup | None = None, check_name: bool = True) -> Admission:
    """The verdict on one object. Refuse only on errors that are certain from what is at hand."""
    from specdeploy.pipeline import evaluate

    parsed = parse_object(obj)
    findings = [f for f in parsed.findings if check_name or not f.field.startswith("metadata.name")]
    if any(f.severity is Severity.ERROR for f in findings):
        return _refusal(findings)
    spec, namespace = parsed.spec, parsed.namespace
    if spec is None:  # refused only for its name, which an UPDATE cannot change
        spec, spec_findings = parse_spec(obj["spec"])
        if spec is None:
            return _refusal(spec_findings)

    def configmap_reader(name: str, key: str) -> str:
        try:
            text = read_config_map(namespace, name, key) if read_config_map else None
        except Exception:  # an API hiccup never blocks an apply: admit, the reconciler retries
            text = None
        if text is None:
            raise SourceUnavailable("configMapRef", f"ConfigMap {name} with key {key} not found (yet)")
        return text

    try:  # the reconcile's rule (no local file), with nothing fetched: what is at hand
        target, draft = resolve_pair(spec, lambda source, where: resolve_model(
            source, where, configmap_reader=configmap_reader, local_only=True, local_files=False))
    except SourceInvalid as exc:
        return _refusal([], extra=f"{exc.field}: {exc.message}")
    except SourceUnavailable as exc:
        return Admission(True, warnings=[f"not judged at admission: {exc.field}: {exc.message[:300]}; the operator judges it in status"])
    evaluation = evaluate(spec, target, draft)
    if not evaluation.ok:
        return _refusal(list(evaluation.findings))
    return Admission(True, warnings=[f"{f.field}: {f.message}" for f in evaluation.findings if f.severity is Severity.WARNING])


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


async def _review_body(request: web.Request) -> bytes:
    """The body, read up to MAX_REVIEW_BYTES (aiohttp's default stops at 1 MiB: a 413 for an
    UPDATE of a CR over 0.5 MiB, which would block it under failurePolicy Fail)."""
    if (request.content_length or 0) > MAX_REVIEW_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_REVIEW_BYTES, actual_size=request.content_length or 0)
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > MAX_REVIEW_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_REVIEW_BYTES, actual_size=len(body))
    return bytes(body)


CONFIG_MAP_READ_S = 2.0  # admission answers fast; a slow read admits with a warning


async def answer_review(request: web.Request, memo: Any) -> web.Response:
    """One review: 400 for what is not a review, else the verdict (CPU work, in the operator's
    CPU pool; its ConfigMap reads are the loop's asyncio client, waited for from that thread)."""
    try:
        review = read_review(json.loads(await _review_body(request)))
    except (MalformedReview, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise web.HTTPBadRequest(text=f"not an AdmissionReview: {str(exc)[:300]}") from None
    kube, offload = getattr(memo, "kube", None), getattr(memo, "offload", None)
    loop = asyncio.get_running_loop()

    def read_config_map(namespace: str, name: str, key: str) -> str | None:
        read = kube.read_config_map_key(namespace, name, key, timeout=CONFIG_MAP_READ_S)
        return asyncio.run_coroutine_threadsafe(read, loop).result(CONFIG_MAP_READ_S + 1)

    def judge() -> Admission:
        return admission_verdict(review.obj, read_config_map=read_config_map if kube is not None else None,
                                 check_name=review.operation == "CREATE")  # a name cannot change: judge it once

    verdict = await offload.run(offload.cpu, None, judge) if offload is not None else await asyncio.to_thread(judge)
    if not verdict.allowed:
        meta = review.obj.get("metadata") if isinstance(review.obj.get("metadata"), dict) else {}
        logger.info("Refused %s of SpeculativeDeployment %s/%s: %s", review.operation, meta.get("namespace"), meta.get("name"),
                    verdict.message)
    return web.json_response(review_response(review, verdict))


class ReviewServer(kopf.WebhookServer):
    """kopf's HTTPS server (TLS, certificate reload), answering with `answer_review`: kopf's
    own admission function (the `fn` it passes) is not called, for the reasons in the module's
    doc; only the operator's memo (its client and CPU pool) is taken from it."""

    memo: Any = None

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        # kopf binds the memo into its admission function (functools.partial, `memobase`).
        self.memo = getattr(fn, "keywords", {}).get("memobase")
        async for client_config in super().__call__(fn):
            yield client_config

    async def _serve(self, fn: Any, request: web.Request) -> web.Response:  # type: ignore[override]
        return await answer_review(request, self.memo)


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


# Set while this replica's webhook server listens (readiness waits for it: controller/metrics.py).
SERVING = threading.Event()


class ReloadingWebhookServer:
    """The review server (kopf's `WebhookServer` answering with `answer_review`) over an SSL context whose certificate is loaded again when
    tls.crt or tls.key change on disk (a renewal that does not roll the pods). New connections
    get the new certificate; the server is never restarted. Until both files exist (a Secret
    volume filled after the pod started) the server waits instead of failing."""

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
        server = ReviewServer(addr="0.0.0.0", port=self.port, context=context,
                                    certfile=str(self.certfile), pkeyfile=str(self.pkeyfile))
        watcher = asyncio.create_task(self._reload_on_change(context, served), name="specdeploy-webhook-cert")
        try:
            async for client_config in server(fn):  # the first comes once the socket listens
                SERVING.set()
                yield client_config
        finally:
            SERVING.clear()
            watcher.cancel()

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
