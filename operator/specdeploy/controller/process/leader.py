"""Two replicas, one active: leader election on a coordination.k8s.io Lease, with fencing.

Every replica serves the webhook and its probes; only the holder of the Lease runs the
controller (reconciles, telemetry). The rules are client-go's (tools/leaderelection): the
leader renews every `retry_period`; it holds leadership until `renew_deadline` after the start
of its last renewal that succeeded, measured on this process's monotonic clock; a standby takes
a Lease whose record it has seen unchanged for `lease_duration` (on its own clock), or one that
was released. Because renew deadline < lease duration, a leader that cannot renew (API reset,
Lease calls that hang, a blackhole) stops acting before anyone else may start: `Leadership`
refuses writes from that instant (controller/process/kube.py asks it before every write) and the
`watchdog` ends the process (kopf's own writes included), independently of any call in flight.

The `kubernetes` package's `leaderelection` is not used: it measures with the wall clock and a
renewal that hangs blocks its deadline check, so a partitioned leader kept acting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from specdeploy.controller.process.env import Number

LEADER_ELECTION_ENV = "SPECDEPLOY_LEADER_ELECTION"  # "true" to enable
LEASE_NAMESPACE_ENV = "SPECDEPLOY_LEASE_NAMESPACE"  # the chart: a namespace its RBAC covers
LEASE_DURATION_ENV = "SPECDEPLOY_LEASE_DURATION_S"
LEASE_DURATION = Number(LEASE_DURATION_ENV, 12.0, minimum=3)
LEASE_NAME = "specdeploy-operator"
# The exit status of a leader that could not renew in time (the kubelet restarts it as a standby).
FENCED_EXIT = 3

logger = logging.getLogger("specdeploy.leader")


@dataclass(frozen=True)
class Timing:
    """client-go's defaults scaled to the lease: 15/10/2 s there, 12/8/2 s here by default."""

    lease_duration: float
    renew_deadline: float
    retry_period: float

    @classmethod
    def from_env(cls) -> "Timing":
        duration = LEASE_DURATION.get()
        return cls(duration, duration * 2 / 3, duration / 6)


class Leadership:
    """Whether this process may act now: until the renew deadline after the start of the last
    renewal that succeeded (monotonic clock). `always()` for a single replica."""

    def __init__(self, renew_deadline: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._renew_deadline = renew_deadline
        self._clock = clock
        self._until: float | None = None
        self.changed = threading.Condition()

    @classmethod
    def always(cls) -> "Leadership":
        return cls(None)

    def renewed(self, attempt_started: float) -> None:
        """A renewal that began at `attempt_started` (this clock) succeeded."""
        assert self._renew_deadline is not None
        with self.changed:
            self._until = attempt_started + self._renew_deadline
            self.changed.notify_all()

    def give_up(self) -> None:
        with self.changed:
            self._until = None
            self.changed.notify_all()

    def holds(self) -> bool:
        if self._renew_deadline is None:
            return True
        until = self._until
        return until is not None and self._clock() < until

    def remaining(self) -> float:
        """Seconds left before the renew deadline (<= 0: not leading)."""
        if self._renew_deadline is None:
            return float("inf")
        until = self._until
        return -1.0 if until is None else until - self._clock()


def enabled() -> bool:
    return os.environ.get(LEADER_ELECTION_ENV, "").lower() == "true"


def identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"


class Elector:
    """Acquires, renews and releases the Lease for one identity (calls bounded by the retry
    period, so none outlives the renew deadline by much)."""

    def __init__(self, api: k8s_client.CoordinationV1Api, namespace: str, who: str, timing: Timing,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.namespace, self.identity, self.timing, self.clock = api, namespace, who, timing, clock
        self.leadership = Leadership(timing.renew_deadline, clock)
        self._seen: tuple[str | None, float] = (None, 0.0)  # (resourceVersion, first seen at)
        self._lock = threading.Lock()  # one Lease call at a time: a renewal never follows the release
        self._released = False

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this replica holds the Lease (True) or `stop` is set (False)."""
        logger.info("Waiting for the Lease %s/%s as %s", self.namespace, LEASE_NAME, self.identity)
        while not stop.is_set():
            if self.try_acquire_or_renew():
                logger.info("Leading as %s (Lease %s/%s)", self.identity, self.namespace, LEASE_NAME)
                return True
            stop.wait(self.timing.retry_period)
        return False

    def keep(self, stop: threading.Event) -> None:
        """Renew every retry period until `stop`; a failed renewal is retried (the watchdog
        acts at the deadline)."""
        while not stop.wait(self.timing.retry_period):
            self.try_acquire_or_renew()

    def try_acquire_or_renew(self) -> bool:
        with self._lock:
            return not self._released and self._try_acquire_or_renew()

    def _try_acquire_or_renew(self) -> bool:
        started = self.clock()
        try:
            lease = self.api.read_namespaced_lease(LEASE_NAME, self.namespace, _request_timeout=self._timeout())
        except ApiException as exc:
            if exc.status != 404:
                logger.info("Could not read the Lease: HTTP %s", exc.status)
                return False
            return self._create(started)
        except Exception as exc:  # connection reset, timeout: the next retry tries again
            logger.info("Could not read the Lease: %s", type(exc).__name__)
            return False
        spec = lease.spec or k8s_client.V1LeaseSpec()
        version = lease.metadata.resource_version
        if version != self._seen[0]:
            self._seen = (version, started)
        holder = spec.holder_identity or ""
        duration = float(spec.lease_duration_seconds or self.timing.lease_duration)
        if holder and holder != self.identity and started - self._seen[1] < duration:
            return False  # someone else's, renewed within its duration as far as we have seen
        return self._write(started, version, spec, taking_over=holder != self.identity)

    def _create(self, started: float) -> bool:
        body = k8s_client.V1Lease(metadata=k8s_client.V1ObjectMeta(name=LEASE_NAME, namespace=self.namespace),
                                  spec=self._spec(k8s_client.V1LeaseSpec(lease_transitions=0), taking_over=True))
        try:
            self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self._timeout())
        except Exception as exc:
            logger.info("Could not create the Lease: %s", getattr(exc, "status", type(exc).__name__))
            return False
        self.leadership.renewed(started)
        return True

    def _write(self, started: float, version: str, spec: k8s_client.V1LeaseSpec, *, taking_over: bool) -> bool:
        """Merge patch carrying the resourceVersion read: the API server refuses (409) a write
        over a newer record, so two replicas never both win."""
        body = {"metadata": {"resourceVersion": version},
                "spec": self.api.api_client.sanitize_for_serialization(self._spec(spec, taking_over=taking_over))}
        try:
            self.api.patch_namespaced_lease(LEASE_NAME, self.namespace, body, _request_timeout=self._timeout())
        except Exception as exc:
            logger.info("Could not renew the Lease: %s", getattr(exc, "status", type(exc).__name__))
            return False
        self.leadership.renewed(started)
        return True

    def _spec(self, old: k8s_client.V1LeaseSpec, *, taking_over: bool) -> k8s_client.V1LeaseSpec:
        now = datetime.now(timezone.utc)
        transitions = (old.lease_transitions or 0) + (1 if taking_over and old.holder_identity else 0)
        return k8s_client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=int(self.timing.lease_duration),
                                      acquire_time=now if taking_over else old.acquire_time, renew_time=now,
                                      lease_transitions=transitions)

    def release(self) -> None:
        """Give the Lease up (as client-go's ReleaseOnCancel): a standby takes it at its next retry."""
        with self._lock:
            self._released = True
            self.leadership.give_up()
            self._give_up_the_lease()

    def _give_up_the_lease(self) -> None:
        """Clear the holder if it is still us (the resourceVersion read is the precondition)."""
        try:
            lease = self.api.read_namespaced_lease(LEASE_NAME, self.namespace, _request_timeout=self._timeout())
            if (lease.spec.holder_identity if lease.spec else None) != self.identity:
                return
            body = {"metadata": {"resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": datetime.now(timezone.utc).isoformat()}}
            self.api.patch_namespaced_lease(LEASE_NAME, self.namespace, body, _request_timeout=self._timeout())
            logger.info("Released the Lease %s/%s", self.namespace, LEASE_NAME)
        except Exception as exc:  # the standby waits out the lease instead
            logger.warning("Could not release the Lease: %s", getattr(exc, "status", type(exc).__name__))

    def _timeout(self) -> tuple[float, float]:
        """A slow API server still renews: a call may take until the renew deadline (the
        watchdog acts then, whatever the call is doing), at least one retry period."""
        limit = max(self.timing.retry_period, min(self.leadership.remaining(), self.timing.renew_deadline))
        return (limit, limit)


def watchdog(leadership: Leadership, stop: threading.Event, on_lost: Callable[[], None]) -> threading.Thread:
    """A thread that calls `on_lost` as soon as the renew deadline passes without a renewal,
    whatever the other threads are blocked on; it ends when `stop` is set."""

    def watch() -> None:
        while not stop.is_set():
            remaining = leadership.remaining()
            if remaining <= 0:
                if not stop.is_set():
                    on_lost()
                return
            with leadership.changed:
                leadership.changed.wait(min(remaining, 0.5))

    thread = threading.Thread(target=watch, name="specdeploy-lease-watchdog", daemon=True)
    thread.start()
    return thread
