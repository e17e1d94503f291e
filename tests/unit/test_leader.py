"""Leader election's rules (controller/process/leader.py), on a fake Lease store and a fake clock: a
standby takes only a Lease it has seen unchanged for the lease duration (or a released one), a
stale write loses, leadership ends at the renew deadline, and a write is refused from then on
before anything is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from specdeploy.controller.process.kube import Kube, NotLeading
from specdeploy.controller.process.leader import Elector, Leadership, Timing

TIMING = Timing(lease_duration=12, renew_deadline=8, retry_period=2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeLeases:
    """One Lease with the API server's rules: a new resourceVersion per write, 409 for a write
    that names another one, 404 before it exists."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] | None = None
        self.version = 0
        self.api_client = k8s_client.ApiClient()

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> k8s_client.V1Lease:
        if self.spec is None:
            raise ApiException(status=404)
        return k8s_client.V1Lease(metadata=k8s_client.V1ObjectMeta(name=name, resource_version=str(self.version)),
                                  spec=k8s_client.V1LeaseSpec(holder_identity=self.spec.get("holderIdentity"),
                                                              lease_duration_seconds=self.spec.get("leaseDurationSeconds")))

    def create_namespaced_lease(self, namespace: str, body: k8s_client.V1Lease, **_: Any) -> None:
        if self.spec is not None:
            raise ApiException(status=409)
        self._store(self.api_client.sanitize_for_serialization(body.spec))

    def patch_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != str(self.version):
            raise ApiException(status=409)
        self._store({**(self.spec or {}), **body["spec"]})

    def _store(self, spec: dict[str, Any]) -> None:
        self.spec, self.version = spec, self.version + 1


def _elector(leases: FakeLeases, who: str, clock: Clock) -> Elector:
    return Elector(leases, "ns1", who, TIMING, clock=clock)  # type: ignore[arg-type]


def test_a_standby_waits_until_it_has_seen_the_lease_unchanged_for_its_duration() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = _elector(leases, "a", clock), _elector(leases, "b", clock)
    assert a.try_acquire_or_renew() and leases.spec["holderIdentity"] == "a"
    assert not b.try_acquire_or_renew()  # first sight of a's record
    clock.now += 10
    assert a.try_acquire_or_renew()  # a renews: b starts counting again
    clock.now += 1
    assert not b.try_acquire_or_renew()
    clock.now += 11.9
    assert not b.try_acquire_or_renew()  # 11.9 s since b saw the renewal
    clock.now += 0.2
    assert b.try_acquire_or_renew() and leases.spec["holderIdentity"] == "b"
    assert not a.try_acquire_or_renew()  # a's record is gone: it waits like any standby


def test_a_released_lease_is_taken_at_once_and_release_never_clears_another_holder() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = _elector(leases, "a", clock), _elector(leases, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    a.release()
    assert not a.leadership.holds() and not a.try_acquire_or_renew()  # released for good
    assert b.try_acquire_or_renew() and leases.spec["holderIdentity"] == "b"
    _elector(leases, "c", clock).release()  # not the holder: nothing changes
    assert leases.spec["holderIdentity"] == "b"


def test_of_two_writes_over_the_same_record_only_one_wins() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = _elector(leases, "a", clock), _elector(leases, "b", clock)
    assert a.try_acquire_or_renew()
    stale = leases.read_namespaced_lease("specdeploy-operator", "ns1")
    assert a.try_acquire_or_renew()  # a renews meanwhile
    assert not b._write(clock(), stale.metadata.resource_version, stale.spec, taking_over=True)
    assert leases.spec["holderIdentity"] == "a" and not b.leadership.holds()


def test_leadership_ends_at_the_renew_deadline_after_the_start_of_the_last_renewal() -> None:
    clock = Clock()
    leadership = Leadership(TIMING.renew_deadline, clock)
    assert not leadership.holds()
    leadership.renewed(clock.now)
    clock.now += TIMING.renew_deadline - 0.01
    assert leadership.holds()
    clock.now += 0.02
    assert not leadership.holds() and leadership.remaining() < 0
    assert Leadership.always().holds()


def test_a_write_is_refused_without_being_sent_once_leadership_is_lost() -> None:
    configuration = k8s_client.Configuration(host="http://127.0.0.1:9")  # nothing listens: a sent request would fail otherwise
    kube = Kube(configuration, may_write=lambda: False)

    async def attempt() -> None:
        try:
            with pytest.raises(NotLeading, match="does not hold the Lease"):
                await kube.merge_patch("Deployment", "ns1", "x", {"spec": {}})
            with pytest.raises(NotLeading):
                await kube.create({"kind": "Service", "metadata": {"namespace": "ns1", "name": "x"}})
            with pytest.raises(Exception) as read:  # reads are not fenced: this one is sent (and fails to connect)
                await kube.get("Deployment", "ns1", "x")
            assert not isinstance(read.value, NotLeading)
        finally:
            await kube.close()

    asyncio.run(attempt())
