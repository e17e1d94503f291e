"""The operator's own Prometheus metrics and its readiness, on one small HTTP server.

`/metrics` (prometheus_client's exposition): reconciles by result, reconcile duration, API
responses with an error status by verb, kind and code, preflight refusals of specs the fast
rules accepted by the judge's stage, and two gauges computed at scrape time
from what the reconciles last saw: CRs by Ready status, and current findings by code and
severity. `/readyz`: 200 once the replica serves, its webhook too when it is on (leader or standby: both
serve the webhook, and a standby
that is not Ready would stall every rolling update), else 503; its body says "leader" or
"standby". `/leader`: 200 on the leader, 503 on a standby (for a Service or a person that
wants the leader only); `specdeploy_leader` the same as a gauge.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from specdeploy.api.conditions import READY
from specdeploy.controller.env import Number

METRICS_PORT_ENV = "SPECDEPLOY_METRICS_PORT"
METRICS_PORT = Number(METRICS_PORT_ENV, 0, minimum=1, maximum=65535, integer=True)  # unset: no server


class _StateCollector:
    """CRs by Ready and findings by code, from the last status each CR was given."""

    def __init__(self) -> None:
        self._state: dict[tuple[str, str], tuple[str, tuple[tuple[str, str], ...]]] = {}
        self._guard = threading.Lock()

    def observe(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        ready = next((c.get("status", "Unknown") for c in status.get("conditions") or [] if c.get("type") == READY), "Unknown")
        findings = tuple((f.get("code", ""), f.get("severity", "")) for f in status.get("findings") or [] if isinstance(f, dict))
        with self._guard:
            self._state[(namespace, name)] = (ready, findings)

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._state.pop((namespace, name), None)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self._guard:
            state = list(self._state.values())
        ready = GaugeMetricFamily("specdeploy_resources", "SpeculativeDeployments by their Ready condition", labels=["ready"])
        counts: dict[str, int] = {"True": 0, "False": 0, "Unknown": 0}
        by_code: dict[tuple[str, str], int] = {}
        for status, findings in state:
            counts[status] = counts.get(status, 0) + 1
            for key in findings:
                by_code[key] = by_code.get(key, 0) + 1
        for status, n in sorted(counts.items()):
            ready.add_metric([status], n)
        yield ready
        found = GaugeMetricFamily("specdeploy_findings", "Current findings over all SpeculativeDeployments", labels=["code", "severity"])
        for (code, severity), n in sorted(by_code.items()):
            found.add_metric([code, severity], n)
        yield found


class _LeaderCollector:
    """specdeploy_leader: 1 on the replica that runs the controller, 0 on a standby."""

    def __init__(self, leading: threading.Event) -> None:
        self.leading = leading

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily("specdeploy_leader", "1 while this replica holds the Lease and runs the controller",
                                value=1.0 if self.leading.is_set() else 0.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter("specdeploy_reconciles", "Reconciles by result (ok, invalid, retry, timeout, error)", ["result"], registry=self.registry)
        self.duration = Histogram("specdeploy_reconcile_duration_seconds", "Time one reconcile took", registry=self.registry,
                                  buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        # The fast rules accepted what the image's own vLLM refused, by the judge's stage: every
        # cluster checks our rules continuously (controller/preflight.py).
        self.preflight_disagreements = Counter("specdeploy_preflight_disagreements", "Specs the fast rules accepted and the preflight (the image's vLLM) refused, by stage", ["stage"], registry=self.registry)
        self.api_errors = Counter("specdeploy_api_errors", "Kubernetes API responses with an error status", ["method", "kind", "code"], registry=self.registry)
        self.state = _StateCollector()
        self.registry.register(self.state)  # type: ignore[arg-type]
        self.ready = threading.Event()
        self.leading = threading.Event()  # this replica runs the controller (holds the Lease)
        self.webhook_serving: threading.Event | None = None  # with the webhook on, Ready waits for it
        self.registry.register(_LeaderCollector(self.leading))  # type: ignore[arg-type]

    def on_response(self, method: str, kind: str, status: int) -> None:
        if status >= 400 and not (status == 404 and method == "GET"):
            self.api_errors.labels(method, kind, str(status)).inc()

    def is_ready(self) -> bool:
        return self.ready.is_set() and (self.webhook_serving is None or self.webhook_serving.is_set())

    def readiness(self) -> bytes:
        """Ready (serving, the webhook too when it is on) as leader or as standby: the body tells which."""
        if not self.is_ready():
            return b"starting\n"
        return b"ok: leader\n" if self.leading.is_set() else b"ok: standby\n"

    def serve(self, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body, code, kind = generate_latest(metrics.registry), 200, CONTENT_TYPE_LATEST
                elif self.path.split("?")[0] in ("/readyz", "/healthz"):
                    body, code, kind = metrics.readiness(), (200 if metrics.is_ready() else 503), "text/plain"
                elif self.path.split("?")[0] == "/leader":
                    leading = metrics.leading.is_set()
                    body, code, kind = (b"leader\n" if leading else b"standby\n"), (200 if leading else 503), "text/plain"
                else:
                    body, code, kind = b"not found\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, name="specdeploy-metrics", daemon=True).start()
        return server


METRICS = Metrics()
