"""What the operator remembers between reconciles, in memory only (a restart rebuilds both
from the resume reconcile): the children each CR should have, and the last configs read.

- `DesiredChildren`: the manifests the last successful plan rendered, per CR. The child watch
  compares every child event with them, so a hand edit or a deleted child is put back at once
  (drift), without re-reading configs or re-planning. Each CR has an asyncio lock: a reconcile
  and a child event never apply the same CR's children at the same time (both run on the loop).
- `ConfigCache`: the last config read per (source, model, revision), so a Hub outage or a
  ConfigMap read timeout keeps the last good verdict instead of flipping a serving model.
- `StatusWriters`: one status writer at a time per CR (the reconcile, the readiness mirror, the
  failure notes), each computing its change against the live status inside the lock.
- `Runs`: each CR's reconcile in flight, so a retry joins the one its cut-off caller left
  running, and the failure note last written, so a note is not written again and again.
- `PreflightWaits`: the preflight Job each waiting CR waits on, so a watch event of that Job or
  its pod wakes the CR (and nothing polls it meanwhile).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Iterator, Mapping

from specdeploy.controller.reconcile.budget import Budget
from specdeploy.controller.reconcile.offload import OffLoop, Slots
from specdeploy.pipeline import ModelInputs

Key = tuple[str, str]  # (namespace, name)


class Manifests(Mapping[tuple[str, str], dict[str, Any]]):
    """Rendered children by (kind, name), kept as compact JSON text and decoded on each read
    (a fresh dict: callers may change it): every CR's manifests stay in memory, and as Python
    dicts they cost several times their text."""

    def __init__(self, children: Iterable[dict[str, Any]] = ()) -> None:
        self._text = {(c["kind"], c["metadata"]["name"]): json.dumps(c, separators=(",", ":")) for c in children}

    def __getitem__(self, key: tuple[str, str]) -> dict[str, Any]:
        return json.loads(self._text[key])

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._text)

    def __len__(self) -> int:
        return len(self._text)


@dataclass
class Desired:
    uid: str
    children: Manifests  # (kind, name) -> manifest
    # Owned children listed and pruned by label since this process took the CR on; after that
    # the child watch deletes strays, and a list is needed only when the rendered set changes.
    pruned: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DesiredChildren:
    def __init__(self) -> None:
        self._entries: dict[Key, Desired] = {}
        self._guard = threading.Lock()

    def lock(self, namespace: str, name: str, uid: str) -> Desired:
        """The CR's entry (created empty for a new uid); hold `.lock` while applying."""
        with self._guard:
            entry = self._entries.get((namespace, name))
            if entry is None or entry.uid != uid:
                entry = self._entries[(namespace, name)] = Desired(uid, Manifests())
            return entry

    def get(self, namespace: str, name: str) -> Desired | None:
        with self._guard:
            return self._entries.get((namespace, name))

    def forget(self, namespace: str, name: str, uid: str | None = None) -> None:
        with self._guard:
            entry = self._entries.get((namespace, name))
            if entry is not None and (uid is None or entry.uid == uid):
                del self._entries[(namespace, name)]

    def __len__(self) -> int:
        return len(self._entries)

    def names(self, namespace: str) -> list[str]:
        """The CRs of `namespace` this process has reconciled."""
        with self._guard:
            return [name for ns, name in self._entries if ns == namespace]


@dataclass
class StatusSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    version: int = 0  # status writes this process made for the CR
    # The last workload event the mirror saw while a reconcile of the CR ran, or could not apply
    # yet (status did not name the workload), by kind/name: the body, or None when deleted. The
    # reconcile's write carries the workload state it read before; it applies this newer one
    # after, as no later event may come. One per workload the CR owns (stable, canary).
    unmirrored: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    reconciling: int = 0  # reconciles of the CR running in this process


class StatusWriters:
    """`status.conditions` is a list, which a merge patch replaces whole: a writer that computed
    its conditions from an older copy (the mirror read the CR, then a reconcile wrote) would
    put back what the other just wrote (a verdict reverted, its Event posted twice). So each
    writer holds the CR's lock from reading the status to writing it; `version` lets a
    reconcile reuse the copy it read at its start when no write of this process came since."""

    def __init__(self) -> None:
        self._slots: dict[Key, StatusSlot] = {}
        self._guard = threading.Lock()

    def slot(self, namespace: str, name: str) -> StatusSlot:
        with self._guard:
            return self._slots.setdefault((namespace, name), StatusSlot())

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            slot = self._slots.get((namespace, name))
            if slot is not None and not slot.lock.locked():
                del self._slots[(namespace, name)]

    def __len__(self) -> int:
        return len(self._slots)


class ConfigCache:
    """Bounded LRU of resolved configs. `read(key, fetch, transient)`: fetch; on a transient
    error return the cached value with the error (so the caller can say it is retrying)."""

    def __init__(self, size: int = 1024) -> None:
        self._items: OrderedDict[tuple[str, ...], ModelInputs] = OrderedDict()
        self._size = size
        self._guard = threading.Lock()

    async def read(self, key: tuple[str, ...], fetch: Callable[[], Awaitable[ModelInputs]],
                   transient: type[Exception]) -> tuple[ModelInputs, Exception | None]:
        try:
            value = await fetch()
        except transient as exc:
            with self._guard:
                cached = self._items.get(key)
            if cached is None:
                raise
            return cached, exc
        with self._guard:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value, None


class EvaluationCache:
    """`evaluate` is pure, so its result is cached by the content it reads (the spec and both
    configs, canonical JSON): 500 CRs of one model cost one evaluation, not 500."""

    def __init__(self, size: int = 512) -> None:
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._size = size
        self._guard = threading.Lock()

    @staticmethod
    def key(*parts: Any) -> str:
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        with self._guard:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = await compute()
        with self._guard:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


class Unschedulable:
    """What the scheduler said of each pod it could not place, per CR (keyed by namespace and
    the CR's owner label value, which the pods carry; from the pods' watch):
    the readiness mirror names it while the rollout waits, instead of a silent Pending."""

    def __init__(self) -> None:
        self._pods: dict[Key, dict[str, str]] = {}
        self._guard = threading.Lock()

    def note(self, key: Key, pod: str, message: str | None) -> bool:
        """Record (or clear, with None) one pod's problem; True when the CR's message changed."""
        with self._guard:
            before = self._first(key)
            pods = self._pods.setdefault(key, {})
            if message is None:
                pods.pop(pod, None)
            else:
                pods[pod] = message
            if not pods:
                del self._pods[key]
            return self._first(key) != before

    def message(self, key: Key) -> str:
        with self._guard:
            return self._first(key)

    def _first(self, key: Key) -> str:
        pods = self._pods.get(key) or {}
        return next((f"pod {name}: {pods[name]}" for name in sorted(pods)), "")

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._pods.pop((namespace, name), None)


@dataclass
class Run:
    """One CR's reconcile in flight (`attempt.reconcile_once`), run as its own task: a caller
    cut off by the budget leaves it at work, and the next caller joins it instead of starting
    over. `again`: news came while it ran (its preflight Job changed, a k was written), so it
    makes one more pass before it ends. `written`: the pass wrote its status (a cut-off note
    must not overwrite it)."""

    budget: Budget
    uid: str | None
    generation: int | None
    again: bool = False
    written: bool = False
    task: asyncio.Task[Any] = field(init=False)


class Runs:
    """The runs in flight by CR, and the failure note last written for each (a note is written
    once until a reconcile of the CR finishes)."""

    def __init__(self) -> None:
        self._runs: dict[Key, Run] = {}
        self._notes: dict[Key, str] = {}

    def get(self, key: Key) -> Run | None:
        return self._runs.get(key)

    def put(self, key: Key, run: Run) -> None:
        self._runs[key] = run

    def drop(self, key: Key, run: Run) -> None:
        if self._runs.get(key) is run:
            del self._runs[key]

    def note(self, key: Key, what: str) -> bool:
        """True when `what` is not the note last written for the CR (and it is now)."""
        if self._notes.get(key) == what:
            return False
        self._notes[key] = what
        return True

    def settled(self, key: Key) -> None:
        """A reconcile finished: the next failure is news again."""
        self._notes.pop(key, None)

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """The CR of `uid` is gone: stop its run (not one for a CR made again under its name)."""
        run = self._runs.get((namespace, name))
        if run is not None and run.uid in (None, uid):
            del self._runs[(namespace, name)]
            run.task.cancel()
            self._notes.pop((namespace, name), None)

    def __len__(self) -> int:
        return len(self._runs)


class PreflightWaits:
    """The preflight Job each CR waits on (namespace, Job name -> CR name), and the
    resourceVersion of each object of it (the Job, its pods) last seen in a watch event: an
    event that brings nothing new, as kopf's re-list after a watch restart, wakes no CR."""

    def __init__(self) -> None:
        self._waiting: dict[Key, str] = {}  # (namespace, Job) -> CR
        self._jobs: dict[Key, tuple[str, str | None]] = {}  # (namespace, CR) -> (Job, the CR's uid)
        self._seen: dict[Key, dict[tuple[str, str], str]] = {}  # (namespace, Job) -> {(kind, name): resourceVersion}
        self._guard = threading.Lock()

    def wait(self, namespace: str, job: str, cr: str, uid: str | None = None) -> None:
        """`cr` (of `uid`) waits on `job`; recorded before the Job is read, so that a change
        after that read wakes it."""
        with self._guard:
            previous = self._jobs.get((namespace, cr))
            if previous == (job, uid):
                return
            if previous is not None:
                self._waiting.pop((namespace, previous[0]), None)
                self._seen.pop((namespace, previous[0]), None)
            self._jobs[(namespace, cr)] = (job, uid)
            self._waiting[(namespace, job)] = cr
            self._seen[(namespace, job)] = {}

    def done(self, namespace: str, cr: str, uid: str | None = None) -> None:
        """`cr` waits on no Job (its verdict is kept, or it is gone); with `uid`, only when the
        one waiting is that CR (not one made again under its name)."""
        with self._guard:
            previous = self._jobs.get((namespace, cr))
            if previous is None or (uid is not None and previous[1] not in (None, uid)):
                return
            del self._jobs[(namespace, cr)]
            self._waiting.pop((namespace, previous[0]), None)
            self._seen.pop((namespace, previous[0]), None)

    def woken(self, namespace: str, job: str, obj: tuple[str, str], resource_version: str | None, *, deleted: bool) -> str | None:
        """The CR that waits on `job`, when this event of `obj` (kind, name) is news to it."""
        with self._guard:
            cr = self._waiting.get((namespace, job))
            if cr is None:
                return None
            seen = self._seen[(namespace, job)]
            if not deleted and resource_version is not None and seen.get(obj) == resource_version:
                return None
            seen[obj] = resource_version or ""
            return cr

    def __len__(self) -> int:
        return len(self._waiting)


@dataclass
class Memory:
    """All of the above for one operator run. Every Reconciler of the process shares the
    current one (the telemetry's too: a second set of desired children would fight the first
    over each child); `fresh()` at start-up begins a new run with nothing remembered."""

    desired: DesiredChildren = field(default_factory=DesiredChildren)
    configs: ConfigCache = field(default_factory=ConfigCache)
    evaluations: EvaluationCache = field(default_factory=EvaluationCache)
    offload: OffLoop = field(default_factory=OffLoop)
    slots: Slots = field(default_factory=Slots)
    status: StatusWriters = field(default_factory=StatusWriters)
    unschedulable: Unschedulable = field(default_factory=Unschedulable)
    runs: Runs = field(default_factory=Runs)
    preflight: PreflightWaits = field(default_factory=PreflightWaits)


_current = Memory()


def current() -> Memory:
    return _current


def fresh() -> Memory:
    global _current
    _current.offload.shutdown()
    _current = Memory()
    return _current
