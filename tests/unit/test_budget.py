"""The reconcile budget counts the operator's own work: its clock stops while a request waits on
the API server (`Kube` wraps each one in `waiting_on_api`), so a slow API server never cuts a
reconcile off. Accounting is checked with a clock the test moves; expiry by the budget's event."""

from __future__ import annotations

import asyncio

from specdeploy.controller.budget import Budget, waiting_on_api


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
    with waiting_on_api():
        clock.now = 101.0  # a hundred seconds waiting on the API server
        with waiting_on_api():  # a second request at the same time counts once
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
    with waiting_on_api():  # entered before the loop runs again: the zero budget has not fired
        for _ in range(5):
            await asyncio.sleep(0)
        assert not budget.expired.is_set()
    await budget.expired.wait()  # own work again: spent
    budget.close()


def test_outside_a_reconcile_a_request_pauses_nothing() -> None:
    with waiting_on_api():
        pass
