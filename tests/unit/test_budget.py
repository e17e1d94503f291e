"""The reconcile budget counts the operator's own work: its clock stops while a request waits on
the API server (`Kube` wraps each one in `waiting`) or for a slot, so a slow API server never
cuts a reconcile off. Accounting is checked with a clock the test moves; expiry by the budget's event."""

from __future__ import annotations

import asyncio

from specdeploy.controller.reconcile.budget import Budget, waiting
from specdeploy.controller.reconcile.offload import Slots


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_clock_stops_while_a_request_is_in_flight() -> None:
    clock = Clock()
    budget = Budget(10.0, clock=clock)
    budget.start()
    clock.now = 1.0
    assert budget.left() == 9.0
    with waiting():
        clock.now = 101.0  # a hundred seconds waiting on the API server
        with waiting():  # a second request at the same time counts once
            clock.now = 150.0
        assert budget.left() == 9.0
    clock.now = 152.0
    assert budget.left() == 7.0
    budget.renew()  # a retry joins: a fresh allowance
    assert budget.left() == 10.0 and not budget.expired.is_set()
    budget.close()


async def test_a_budget_spent_only_waiting_on_the_api_never_expires() -> None:
    budget = Budget(0.0)
    budget.start()
    with waiting():  # entered before the loop runs again: the zero budget has not fired
        for _ in range(5):
            await asyncio.sleep(0)
        assert not budget.expired.is_set()
    await budget.expired.wait()  # own work again: spent
    budget.close()


def test_outside_a_reconcile_a_request_pauses_nothing() -> None:
    with waiting():
        pass


async def test_taking_a_slot_back_after_a_config_read_is_not_the_reconciles_time() -> None:
    """A reconcile gives its slot away while it reads configs; waiting for it again, behind the
    others' reconciles, is not its own work."""
    slots, clock = Slots(1), Clock()
    budget = Budget(10.0, clock=clock)
    taken, finish = asyncio.Event(), asyncio.Event()

    async def reconcile() -> float:
        async with slots.held():
            budget.start()
            async with slots.released():
                await taken.wait()  # another reconcile took the slot meanwhile
            return budget.left()

    async def other() -> None:
        async with slots.held():
            taken.set()
            await finish.wait()

    first = asyncio.create_task(reconcile())
    await asyncio.sleep(0)
    second = asyncio.create_task(other())
    await taken.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # the first now waits for the slot
    clock.now = 100.0
    assert budget.left() == 10.0
    finish.set()
    assert await first == 10.0
    await second
    budget.close()
