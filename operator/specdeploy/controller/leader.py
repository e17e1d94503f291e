"""Two replicas, one active: leader election on a coordination.k8s.io Lease, with the
`kubernetes` package's own `leaderelection` module.

The standby waits in `acquire`; once it holds the Lease it runs the operator. The leader
renews every `retry_period`; if it cannot renew within `renew_deadline` it stops the operator
and returns (the pod then exits and restarts as a standby), so two replicas never act at once.
A dead leader's Lease expires after `lease_duration`: the standby takes over within that plus
one retry period (12 + 2 s by default, under the 15 s the chart promises).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Callable

from kubernetes import client as k8s_client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from specdeploy.controller.env import Number

LEADER_ELECTION_ENV = "SPECDEPLOY_LEADER_ELECTION"  # "true" to enable
LEASE_NAMESPACE_ENV = "SPECDEPLOY_LEASE_NAMESPACE"  # the chart: a namespace its RBAC covers
LEASE_DURATION_ENV = "SPECDEPLOY_LEASE_DURATION_S"
# At least 3 s: leaderelection's Config needs lease > renew deadline > 1.2 x retry period.
LEASE_DURATION = Number(LEASE_DURATION_ENV, 12.0, minimum=3)
LEASE_NAME = "specdeploy-operator"

logger = logging.getLogger("specdeploy.leader")


class PatchingLeaseLock(LeaseLock):
    """LeaseLock renewing with a merge patch that carries the resourceVersion it read (still
    optimistic: a real API server answers 409 to a stale one) instead of a replace, which the
    emulator the tests run against does not serve."""

    def update(self, name: str, namespace: str, updated_record: object) -> bool:
        from kubernetes.client.rest import ApiException

        if self.lease_reference is None:
            return False
        spec = self.get_lease_spec(updated_record, self.lease_reference.spec)
        body = {"metadata": {"resourceVersion": self.lease_reference.metadata.resource_version},
                "spec": self.api_instance.api_client.sanitize_for_serialization(spec)}
        try:
            self.lease_reference = self.api_instance.patch_namespaced_lease(name=name, namespace=namespace, body=body)
            return True
        except ApiException as exc:
            logger.info("Failed to renew the Lease: %s", exc.status)
            return False


def enabled() -> bool:
    return os.environ.get(LEADER_ELECTION_ENV, "").lower() == "true"


def run_as_leader(operate: Callable[[threading.Event], None], api_client: k8s_client.ApiClient, namespace: str) -> None:
    """Block until leader, run `operate(stop_flag)` while leading; return when leadership is
    lost or the operator stopped."""
    duration = LEASE_DURATION.get()
    renew, retry = max(2, int(duration * 2 / 3)), max(1.0, duration / 6)
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    lock = PatchingLeaseLock(LEASE_NAME, namespace, identity)
    lock.api_instance = k8s_client.CoordinationV1Api(api_client)
    stop = threading.Event()

    def lead() -> None:
        logger.info("Leading as %s (Lease %s/%s)", identity, namespace, LEASE_NAME)
        operate(stop)
        raise RuntimeError("the operator stopped")  # ends the renew loop: give the Lease up

    def stopped() -> None:
        logger.warning("Lost the Lease %s/%s: stopping", namespace, LEASE_NAME)
        stop.set()

    config = electionconfig.Config(lock, lease_duration=int(duration), renew_deadline=int(renew), retry_period=retry,
                                   onstarted_leading=lead, onstopped_leading=stopped)
    logging.getLogger("leaderelection").setLevel(logging.WARNING)  # it logs every renewal at INFO
    logger.info("Waiting for the Lease %s/%s as %s", namespace, LEASE_NAME, identity)
    leaderelection.LeaderElection(config).run()
