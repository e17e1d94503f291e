"""The pools behind the reconcile: a job is shared by key, a caller cut off by its budget
leaves the outcome for the retry (a slow step is done once, not restarted on every retry),
and a reconcile waiting on configs gives its slot to the others."""

from __future__ import annotations

import asyncio
import threading

import pytest

from specdeploy.controller.reconcile.offload import OffLoop, Slots, reconcile_budget


async def test_a_retry_joins_the_job_its_cut_off_caller_left_running() -> None:
    offload = OffLoop(cpu_workers=1, io_workers=1)
    gate, calls = threading.Event(), []

    def slow() -> str:
        calls.append(1)
        gate.wait(5)
        return "done"

    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(offload.run(offload.io, "k", slow), 0.05)  # over budget
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(offload.run(offload.io, "k", slow), 0.05)  # a retry, still slow
    gate.set()
    await asyncio.sleep(0.1)  # the job ends while nobody waits for it
    assert await offload.run(offload.io, "k", slow) == "done"
    assert calls == [1] and offload.busy() == 0  # one run; collected, then forgotten
    assert await offload.run(offload.io, "k", lambda: "again") == "again"  # a new read after that
    offload.shutdown()


async def test_errors_reach_every_waiter_and_are_not_kept() -> None:
    offload = OffLoop(cpu_workers=1, io_workers=1)

    def broken() -> None:
        raise ValueError("bad config")

    with pytest.raises(ValueError, match="bad config"):
        await offload.run(offload.cpu, "e", broken)
    assert offload.busy() == 0
    offload.shutdown()


async def test_a_reconcile_waiting_on_configs_gives_its_slot_away() -> None:
    slots = Slots(1)
    order: list[str] = []
    reading = asyncio.Event()

    async def slow_config() -> None:
        async with slots.held():
            async with slots.released():
                reading.set()
                await asyncio.sleep(0.2)
            order.append("slow done")

    async def healthy() -> None:
        await reading.wait()
        async with slots.held():
            order.append("healthy done")

    await asyncio.wait_for(asyncio.gather(slow_config(), healthy()), 2)
    assert order == ["healthy done", "slow done"]


async def test_a_cut_off_wait_for_a_slot_does_not_leak_one() -> None:
    slots = Slots(1)

    async def cut_off() -> None:
        async with slots.held():
            async with slots.released():
                await asyncio.sleep(10)

    task = asyncio.create_task(cut_off())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with slots.held():  # the one slot is free again, exactly once
        assert slots._free is not None and slots._free.locked()


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECDEPLOY_RECONCILE_BUDGET_S", raising=False)
    assert reconcile_budget() == 30.0
    monkeypatch.setenv("SPECDEPLOY_RECONCILE_BUDGET_S", "soon")
    with pytest.raises(ValueError, match="SPECDEPLOY_RECONCILE_BUDGET_S must be a number"):
        reconcile_budget()
