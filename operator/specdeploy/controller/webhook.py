"""Admission: refuse at `kubectl apply` a SpeculativeDeployment whose spec does not parse or
whose pair is invalid with the configs at hand, through kopf's own `on.validate` and its
webhook server (HTTPS, with the chart's certificate).

"At hand" means no waiting: inline configs, ConfigMaps, and Hub configs already in the
operator's cache. A config not yet fetched never blocks: the object is admitted with a
warning and judged in status by the reconciler, as without the webhook. The verdict is the
same `parse_object` + `pipeline.evaluate` the CLI and the reconciler run. The chart sets the
webhook's failurePolicy to Ignore by default: an operator that is down never blocks applies.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import kopf

from specdeploy.api.parse import parse_object, parse_spec
from specdeploy.api.spec import API_GROUP, API_VERSION, PLURAL
from specdeploy.controller.env import Number
from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model, resolve_pair
from specdeploy.findings import Severity

HANDLER_ID = "validate-speculativedeployment"  # kopf routes POST /<id> to this handler
PORT_ENV = "SPECDEPLOY_WEBHOOK_PORT"
PORT = Number(PORT_ENV, 0, minimum=1, maximum=65535, integer=True)  # unset: no webhook
CERT_DIR_ENV = "SPECDEPLOY_WEBHOOK_CERT_DIR"  # tls.crt + tls.key, as cert-manager and the chart write them
# (namespace, name, key) -> the key's text, or None when the ConfigMap or key is missing.
ConfigMapLookup = Callable[[str, str, str], "str | None"]


@dataclass(frozen=True)
class Admission:
    """The answer to one AdmissionReview."""

    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)


def admission_verdict(obj: dict[str, Any], *, read_config_map: ConfigMapLookup | None = None,
                      hf_token: str | None = None, check_name: bool = True) -> Admission:
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

    try:
        target, draft = resolve_pair(spec, lambda source, where: resolve_model(
            source, where, hf_token=hf_token, configmap_reader=configmap_reader, local_only=True))
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


CONFIG_MAP_READ_S = 2.0  # admission answers fast; a slow read admits with a warning


async def _handle(body: kopf.Body, operation: str | None, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    """The verdict is CPU work: it runs in the operator's CPU pool, not on the event loop; its
    ConfigMap reads are the loop's asyncio client, waited for from that thread."""
    kube = getattr(memo, "kube", None)
    loop = asyncio.get_running_loop()

    def read_config_map(namespace: str, name: str, key: str) -> str | None:
        read = kube.read_config_map_key(namespace, name, key, timeout=CONFIG_MAP_READ_S)
        return asyncio.run_coroutine_threadsafe(read, loop).result(CONFIG_MAP_READ_S + 1)

    def judge() -> Admission:
        return admission_verdict(
            dict(body),
            read_config_map=read_config_map if kube is not None else None,
            hf_token=os.environ.get("HF_TOKEN") or None,
            check_name=operation == "CREATE",  # a name cannot change: judge it once
        )

    offload = getattr(memo, "offload", None)
    verdict = await offload.run(offload.cpu, None, judge) if offload is not None else await asyncio.to_thread(judge)
    warnings.extend(w[:512] for w in verdict.warnings)
    if not verdict.allowed:
        raise kopf.AdmissionError(verdict.message, code=422)


async def _disabled(fn: Any) -> AsyncIterator[Any]:
    """No webhook: kopf refuses to start with admission handlers and no server, so this one
    listens nowhere and yields no client config."""
    await asyncio.Event().wait()
    yield  # pragma: no cover - never reached


def enabled() -> bool:
    return bool(PORT.get_int())


def server_from_env() -> Any:
    """kopf's webhook server on $SPECDEPLOY_WEBHOOK_PORT with the certificate in
    $SPECDEPLOY_WEBHOOK_CERT_DIR; a server that listens nowhere when the port is not set."""
    port = PORT.get_int()
    if not port:
        return _disabled
    cert_dir = Path(os.environ.get(CERT_DIR_ENV, "/tls"))
    return kopf.WebhookServer(addr="0.0.0.0", port=port, certfile=str(cert_dir / "tls.crt"), pkeyfile=str(cert_dir / "tls.key"))


def warm_up() -> None:
    """Import what a verdict needs at start-up, so the first review answers within 1 s."""
    import specdeploy.pipeline  # noqa: F401
    import specdeploy.planning.planner  # noqa: F401


def register(registry: kopf.OperatorRegistry) -> None:
    """Add the validating handler to the operator's registry."""
    kopf.on.validate(API_GROUP, API_VERSION, PLURAL, id=HANDLER_ID, registry=registry,
                     operations=["CREATE", "UPDATE"], subresource=None)(_handle)
