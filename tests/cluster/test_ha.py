"""Two replicas of the chart's operator on the real API server: one Lease, real signals.

The times the issue asks for (the standby holds the Lease within 15 s of a kill -9; SIGTERM ends
a process within 5 s) are measured by bench/bench_cluster.py and recorded in bench/RESULTS.md;
here the behaviour is asserted, and the hang guard only turns a hang into a failure."""

from __future__ import annotations

import signal
from datetime import datetime

from kubernetes import client

from integration.chart_process import ChartPod

from .bed import NAMESPACE, Cluster, until

LEASE = "specdeploy-operator"


def lease(cluster: Cluster) -> client.V1LeaseSpec:
    return client.CoordinationV1Api(cluster.api).read_namespaced_lease(LEASE, NAMESPACE).spec


def holder(cluster: Cluster) -> str:
    return lease(cluster).holder_identity or ""


def leader_and_standby(cluster: Cluster) -> tuple[ChartPod, ChartPod]:
    name = until(lambda: holder(cluster), "a leader")  # the pod's name and a per-process suffix
    (leader,) = [p for p in cluster.operators if name.startswith(p.name + "-")]
    (standby,) = [p for p in cluster.operators if p is not leader]
    return leader, standby


def held_by(cluster: Cluster, pod: ChartPod) -> bool:
    return holder(cluster).startswith(pod.name + "-")


def restart(cluster: Cluster, pod: ChartPod) -> None:
    """A new process for a stopped replica, as the Deployment's ReplicaSet would make."""
    pod.ports = {k: v for k, v in pod.ports.items() if k == "webhook" and pod is cluster.operators[0]}
    pod.start()


def test_kill_9_of_the_leader_hands_the_lease_to_the_standby(cluster: Cluster) -> None:
    leader, standby = leader_and_standby(cluster)
    before = lease(cluster)
    leader.kill()  # SIGKILL: no release, the Lease must expire
    until(lambda: held_by(cluster, standby), f"{standby.name} to hold the Lease")
    after = lease(cluster)
    # It waited for the dead leader's term to run out: no overlap of two leaders.
    expired = before.renew_time.timestamp() + before.lease_duration_seconds
    assert isinstance(after.acquire_time, datetime) and after.acquire_time.timestamp() >= expired - 1
    assert after.lease_transitions == (before.lease_transitions or 0) + 1
    restart(cluster, leader)


def test_sigterm_ends_the_leader_and_releases_the_lease(cluster: Cluster) -> None:
    leader, standby = leader_and_standby(cluster)
    leader.signal(signal.SIGTERM)
    assert leader.proc is not None
    assert leader.proc.wait(60) == 0  # the hang guard of a SIGTERM hang; the time is the bench's
    # Released on the way out: the standby need not wait for the term to expire.
    until(lambda: held_by(cluster, standby), f"{standby.name} to hold the released Lease")
    restart(cluster, leader)
    until(lambda: leader.probe("livenessProbe") == 200, f"{leader.name} alive again as standby")
