"""The operator's own Prometheus metrics and its readiness, on one small HTTP server.

`/metrics` (prometheus_client's exposition): reconciles by result, reconcile duration, API
responses with an error status by verb, kind and code, preflight refusals of specs the fast
rules accepted by the judge's stage, and gauges computed at scrape time from the last status
each CR was given: CRs by Ready status, current findings by code and severity, and per CR
(labels namespace and name) its speculation figures and preflight outcome, and a draft canary's
figures per arm (label arm: stable, canary) and phase. `/readyz`: 200 once the replica serves, its webhook too when it is on (leader or standby: both
serve the webhook, and a standby
that is not Ready would stall every rolling update), else 503; its body says "leader" or
"standby". `/leader`: 200 on the leader, 503 on a standby (for a Service or a person that
wants the leader only); `specdeploy_leader` the same as a gauge.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from specdeploy.api.conditions import READY
from specdeploy.controller.process.env import Number

METRICS_PORT_ENV = "SPECDEPLOY_METRICS_PORT"
METRICS_PORT = Number(METRICS_PORT_ENV, 0, minimum=1, maximum=65535, integer=True)  # unset: no server


# Per-CR gauges, from status.speculation (the telemetry's reading of the pods' /metrics), the
# plan and the preflight: (metric, help, value from the status).
_SPECULATION_GAUGES: tuple[tuple[str, str, Callable[[Mapping[str, Any]], float | None]], ...] = (
    ("specdeploy_speculation_acceptance_rate", "Draft tokens accepted / proposed over the telemetry window (status.speculation.acceptanceRate)",
     lambda s: _number(_speculation(s).get("acceptanceRate"))),
    ("specdeploy_speculation_mean_acceptance_length", "Tokens per target step: 1 + accepted / drafts (status.speculation.meanAcceptanceLength)",
     lambda s: _number(_speculation(s).get("meanAcceptanceLength"))),
    ("specdeploy_speculation_drafts_per_second", "Drafts proposed per second over the telemetry window, all serving pods",
     lambda s: _per_second(_speculation(s))),
    ("specdeploy_speculation_num_speculative_tokens", "The k in force (status.speculation, else the plan)",
     lambda s: _number(_speculation(s).get("numSpeculativeTokens", (s.get("plan") or {}).get("numSpeculativeTokens")))),
    ("specdeploy_speculation_predicted_speedup", "Decoding speedup the goodput model predicts at the k in force (status.speculation.predictedSpeedup)",
     lambda s: _number(_speculation(s).get("predictedSpeedup"))),
    ("specdeploy_speculation_speedup_at_load", "Throughput at the k in force over no speculation, at the observed typical batch size (below 1: speculation does not pay at this load)",
     lambda s: _number(_observed_load(s).get("predictedSpeedup"))),
    ("specdeploy_speculation_crossover_batch_size", "Smallest batch size at which no k pays (status.speculation.crossoverBatchSize)",
     lambda s: _number(_speculation(s).get("crossoverBatchSize"))),
    ("specdeploy_speculation_observed_batch_size", "Typical (median) running batch size per engine over the window (status.speculation.observedLoad.typicalBatchSize)",
     lambda s: _number(_observed_load(s).get("typicalBatchSize"))),
    ("specdeploy_speculation_observed_timestamp_seconds", "When the pods' counters last moved and status.speculation was computed (Unix time)",
     lambda s: _unix_time(_speculation(s).get("observedAt"))),
)
_OBJECT_LABELS = ["namespace", "name"]
# A draft canary's figures per arm (status.rollout.stable / .canary), labelled arm="stable"|"canary".
_ARM_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("specdeploy_rollout_drafts", "Drafts the arm's pods counted since the canary was Ready", "drafts"),
    ("specdeploy_rollout_acceptance_rate", "The arm's accepted / proposed draft tokens", "acceptanceRate"),
    ("specdeploy_rollout_mean_accepted_length", "The arm's tokens per target step: 1 + accepted / drafts", "meanAcceptedLength"),
    ("specdeploy_rollout_speedup", "The goodput model's speedup from the arm's acceptance (what the decision compares)", "speedup"),
    ("specdeploy_rollout_output_tokens_per_second_per_request", "The arm's generated tokens per second per running request", "outputTokensPerSecondPerRequest"),
    ("specdeploy_rollout_server_errors", "5xx responses of the arm's API servers since the canary was Ready", "serverErrors"),
)
ARMS = ("stable", "canary")


def _arm_values(status: Mapping[str, Any]) -> tuple[tuple[float | None, ...], ...]:
    rollout = status.get("rollout") or {}
    if not isinstance(rollout, Mapping):
        return ()
    arms = [rollout.get(arm) if isinstance(rollout.get(arm), Mapping) else {} for arm in ARMS]
    return tuple(tuple(_number(figures.get(key)) for _, _, key in _ARM_GAUGES) for figures in arms)


def _phase(status: Mapping[str, Any]) -> str | None:
    phase = (status.get("rollout") or {}).get("phase") if isinstance(status.get("rollout"), Mapping) else None
    return phase if phase in ("Canary", "Promoting", "Promoted", "RolledBack") else None


def _speculation(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return status.get("speculation") or {}


def _observed_load(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return _speculation(status).get("observedLoad") or {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _per_second(speculation: Mapping[str, Any]) -> float | None:
    """drafts over the window, whose length status writes as e.g. "600s"."""
    try:
        seconds = float(str(speculation.get("window") or "").removesuffix("s"))
    except ValueError:
        return None
    drafts = _number(speculation.get("drafts"))
    return drafts / seconds if drafts is not None and seconds > 0 else None


def _unix_time(stamp: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


@dataclass(frozen=True)
class _Seen:
    """What the collector keeps of one CR's status: a few numbers, not the status."""

    ready: str
    findings: tuple[tuple[str, str], ...]
    gauges: tuple[float | None, ...]
    preflight: str | None
    arms: tuple[tuple[float | None, ...], ...] = ()  # per arm (ARMS), per _ARM_GAUGES
    phase: str | None = None


class _StateCollector:
    """CRs by Ready and findings by code, and each CR's speculation gauges and preflight outcome,
    from the last status each CR was given. A CR's series are one per gauge, labelled with its
    namespace and name only, and go at the first scrape after the CR is deleted (`forget`)."""

    def __init__(self) -> None:
        self._state: dict[tuple[str, str], _Seen] = {}
        self._guard = threading.Lock()

    def observe(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        ready = next((c.get("status", "Unknown") for c in status.get("conditions") or [] if c.get("type") == READY), "Unknown")
        findings = tuple((f.get("code", ""), f.get("severity", "")) for f in status.get("findings") or [] if isinstance(f, dict))
        gauges = tuple(value(status) for _, _, value in _SPECULATION_GAUGES)
        outcome = (status.get("preflight") or {}).get("outcome")
        with self._guard:
            self._state[(namespace, name)] = _Seen(ready, findings, gauges, outcome if isinstance(outcome, str) else None,
                                                   _arm_values(status), _phase(status))

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._state.pop((namespace, name), None)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self._guard:
            state = sorted(self._state.items())
        ready = GaugeMetricFamily("specdeploy_resources", "SpeculativeDeployments by their Ready condition", labels=["ready"])
        counts: dict[str, int] = {"True": 0, "False": 0, "Unknown": 0}
        by_code: dict[tuple[str, str], int] = {}
        for _, seen in state:
            counts[seen.ready] = counts.get(seen.ready, 0) + 1
            for key in seen.findings:
                by_code[key] = by_code.get(key, 0) + 1
        for status, n in sorted(counts.items()):
            ready.add_metric([status], n)
        yield ready
        found = GaugeMetricFamily("specdeploy_findings", "Current findings over all SpeculativeDeployments", labels=["code", "severity"])
        for (code, severity), n in sorted(by_code.items()):
            found.add_metric([code, severity], n)
        yield found
        yield from _per_object(state)


def _per_object(state: list[tuple[tuple[str, str], _Seen]]) -> Iterable[GaugeMetricFamily]:
    """One series per CR and gauge that has a value; the preflight outcome as one series per CR
    whose `outcome` label is the current outcome."""
    for index, (metric, text, _) in enumerate(_SPECULATION_GAUGES):
        family = GaugeMetricFamily(metric, text, labels=_OBJECT_LABELS)
        for key, seen in state:
            if seen.gauges[index] is not None:
                family.add_metric(list(key), seen.gauges[index])
        yield family
    outcome = GaugeMetricFamily("specdeploy_preflight_outcome", "1 for the outcome of the CR's last preflight "
                                "(Running, Passed, Refused, CouldNotRun, ...; status.preflight.outcome)", labels=[*_OBJECT_LABELS, "outcome"])
    for key, seen in state:
        if seen.preflight is not None:
            outcome.add_metric([*key, seen.preflight], 1)
    yield outcome
    yield from _per_arm(state)


def _per_arm(state: list[tuple[tuple[str, str], _Seen]]) -> Iterable[GaugeMetricFamily]:
    """A draft canary's figures, one series per CR, arm and gauge; its phase as one series per CR."""
    for index, (metric, text, _) in enumerate(_ARM_GAUGES):
        family = GaugeMetricFamily(metric, text, labels=[*_OBJECT_LABELS, "arm"])
        for key, seen in state:
            for arm, values in zip(ARMS, seen.arms):
                if values[index] is not None:
                    family.add_metric([*key, arm], values[index])
        yield family
    phase = GaugeMetricFamily("specdeploy_rollout_phase", "1 for the CR's draft rollout phase (Canary, Promoting, Promoted, "
                              "RolledBack; status.rollout.phase)", labels=[*_OBJECT_LABELS, "phase"])
    for key, seen in state:
        if seen.phase is not None:
            phase.add_metric([*key, seen.phase], 1)
    yield phase


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
        # cluster checks our rules continuously (controller/reconcile/preflight_gate.py).
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
