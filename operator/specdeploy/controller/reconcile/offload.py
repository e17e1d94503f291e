"""Work that must not run on kopf's event loop, and the per-reconcile time budget.

The loop serves every CR's API calls; a CPU-bound evaluation or a blocking Hub read there
would stop them all. So `pipeline.evaluate` and spec/config parsing run in a small CPU pool,
Hub reads (huggingface_hub's blocking client) in a separate I/O pool, each bounded. Jobs are
keyed by what they compute: a second request for the same key (another CR of the same model,
or the retry of a reconcile that ran over its budget) waits for the job already running
instead of taking a second thread, so a stalled read or a slow evaluation holds one thread,
however often it is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, Hashable, TypeVar

from specdeploy.controller.reconcile.budget import waiting
from specdeploy.controller.process.env import Number
from specdeploy.controller.process.kube import API_CONNECTIONS

T = TypeVar("T")

BUDGET_ENV = "SPECDEPLOY_RECONCILE_BUDGET_S"
DEFAULT_BUDGET_S = 30.0
CPU_WORKERS_ENV = "SPECDEPLOY_CPU_WORKERS"
IO_WORKERS_ENV = "SPECDEPLOY_IO_WORKERS"
SLOTS_ENV = "SPECDEPLOY_MAX_RECONCILES"
ORPHAN_TTL_S = 600.0
DEFAULT_SLOTS = 16  # SPECDEPLOY_API_CONNECTIONS' default: a reconcile at work always finds a connection
BUDGET = Number(BUDGET_ENV, DEFAULT_BUDGET_S, minimum=0.1)
CPU_WORKERS = Number(CPU_WORKERS_ENV, min(4, os.cpu_count() or 1), minimum=1, integer=True)
IO_WORKERS = Number(IO_WORKERS_ENV, 16, minimum=1, integer=True)
SLOTS = Number(SLOTS_ENV, DEFAULT_SLOTS, minimum=1, integer=True)


def reconcile_budget() -> float:
    """Seconds one reconcile may take before it is cut off, said so in status and retried."""
    return BUDGET.get()


class OffLoop:
    """The two pools and the jobs in flight, for one operator run (created on its loop)."""

    def __init__(self, cpu_workers: int | None = None, io_workers: int | None = None) -> None:
        cpu = cpu_workers or CPU_WORKERS.get_int()
        io = io_workers or IO_WORKERS.get_int()
        self.cpu = ThreadPoolExecutor(max_workers=cpu, thread_name_prefix="specdeploy-cpu")
        self.io = ThreadPoolExecutor(max_workers=io, thread_name_prefix="specdeploy-io")
        self._running: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(self, pool: ThreadPoolExecutor, key: Hashable | None, fn: Callable[[], T]) -> T:
        """`fn()` in `pool`; `key` (None: never shared) joins a job already running for it.
        Cancelling the caller (its budget ran out) leaves the job running, and its outcome
        waits for the next caller with the same key (the retry), so a job slower than the
        budget is finished once and used, not started over on every retry."""
        job = self._running.get(key) if key is not None else None
        if job is None:
            job = asyncio.wrap_future(pool.submit(fn))
            job.add_done_callback(_retrieve)
            if key is not None:
                self._running[key] = job
                job.add_done_callback(lambda done, key=key: self._expire(key, done))
        try:
            result = await asyncio.shield(job)
        except asyncio.CancelledError:
            raise  # the job stays: its outcome is for the retry
        except BaseException:
            self._forget(key, job)
            raise
        self._forget(key, job)
        return result

    def _forget(self, key: Hashable | None, job: asyncio.Future[Any]) -> None:
        if key is not None and self._running.get(key) is job:
            del self._running[key]

    def _expire(self, key: Hashable, job: asyncio.Future[Any]) -> None:
        """An outcome nobody collects (the CR was deleted) is dropped after a while."""
        asyncio.get_running_loop().call_later(ORPHAN_TTL_S, self._forget, key, job)

    def busy(self) -> int:
        return len(self._running)

    def shutdown(self) -> None:
        """Stop taking work; running jobs finish in their threads (nothing waits for them)."""
        self.cpu.shutdown(wait=False, cancel_futures=True)
        self.io.shutdown(wait=False, cancel_futures=True)


def _retrieve(job: asyncio.Future[Any]) -> None:
    """Nobody may await a job whose caller was cut off: mark its error as seen."""
    if not job.cancelled():
        job.exception()


_holding: contextvars.ContextVar[dict[str, bool] | None] = contextvars.ContextVar("specdeploy_slot", default=None)


class Slots:
    """At most `n` reconciles at work at once (SPECDEPLOY_MAX_RECONCILES, default 16, never more
    than SPECDEPLOY_API_CONNECTIONS), so a burst of creates is served in arrival order with
    bounded memory instead of all at once, and no reconcile in a slot queues for a connection
    behind the others. A reconcile gives its slot back while it waits on a config read or an
    evaluation (`released`), so CRs whose configs stall never hold the slots the others need."""

    def __init__(self, n: int | None = None) -> None:
        self.n = n or min(SLOTS.get_int(), API_CONNECTIONS.get_int())
        self._free: asyncio.Semaphore | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        if self._free is None:  # created on the loop that uses it
            self._free = asyncio.Semaphore(self.n)
        return self._free

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        free = self._semaphore()
        await free.acquire()
        state = {"held": True}
        token = _holding.set(state)
        try:
            yield
        finally:
            _holding.reset(token)
            if state["held"]:
                free.release()

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """Inside `held`: give the slot back for the block, take one again after it."""
        state = _holding.get()
        if state is None or not state["held"] or self._free is None:
            yield
            return
        self._free.release()
        state["held"] = False
        try:
            yield
        finally:
            with waiting():  # behind the others' reconciles: not this one's time
                await self._free.acquire()  # cancelled here: not held, and `held` releases nothing
            state["held"] = True
