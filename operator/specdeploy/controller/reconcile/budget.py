"""The reconcile's time budget counts the operator's own work, not its waits on the API server.

A `Budget` is a deadline whose clock stops while the reconcile waits on something that is not its
own work: the API server (a free connection, then the answer: `Kube` wraps each request in
`waiting`) and a reconcile slot to take again after a config read (`Slots.released`). A slow or
busy API server then slows reconciles down instead of cutting them off, and a cut-off, with its
status note and retry, is left for what the budget is for: a stalled config read, a slow verdict.

The budget in force is the current task's (a context variable set by `start`), so the client
needs no argument: every request made while a reconcile runs pauses that reconcile's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Callable, ContextManager, Iterator

_CURRENT: contextvars.ContextVar["Budget | None"] = contextvars.ContextVar("specdeploy_budget", default=None)


class Budget:
    """`seconds` of the operator's own time; `expired` is set when they are spent. The clock
    runs from `start` except while the reconcile waits (`waiting`)."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] | None = None) -> None:
        self.seconds = seconds
        self.expired = asyncio.Event()
        self._clock = clock
        self._left = seconds
        self._started = False
        self._since: float | None = None  # when the clock last started running; None: stopped
        self._waits = 0  # requests in flight
        self._timer: asyncio.TimerHandle | None = None

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def left(self) -> float:
        """Seconds of own work still allowed."""
        return self._left - (self._now() - self._since if self._since is not None else 0.0)

    def start(self) -> None:
        """Run the clock, for the current task and the tasks it starts (their waits pause it)."""
        _CURRENT.set(self)
        self._started = True
        self._run()

    def renew(self) -> None:
        """A fresh allowance: a retry that joins the reconcile its cut-off caller left running."""
        self._halt()
        self._left = self.seconds
        self.expired.clear()
        self._run()

    def close(self) -> None:
        """The reconcile ended: no expiry after it."""
        self._halt()
        self._started = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The clock stopped for the block (nested and concurrent blocks count once)."""
        self._waits += 1
        if self._waits == 1:
            self._halt()
        try:
            yield
        finally:
            self._waits -= 1
            self._run()

    def _run(self) -> None:
        if not self._started or self._waits or self._since is not None:
            return
        self._since = self._now()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, self._left), self.expired.set)

    def _halt(self) -> None:
        if self._since is not None:
            self._left = self.left()
            self._since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def waiting() -> ContextManager[None]:
    """Around a wait that is not the reconcile's own work (an API request, a slot): the current
    reconcile's clock stops until it ends."""
    budget = _CURRENT.get()
    return budget.paused() if budget is not None else contextlib.nullcontext()
