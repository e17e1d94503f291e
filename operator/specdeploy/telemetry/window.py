"""A sliding window over per-pod counter samples: what the pods counted in the last N seconds.

Time is passed in (the controller's clock, the tests' numbers), so this stays pure."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from specdeploy.telemetry.metrics import PROCESS_START, Counters


class NotARestart(ValueError):
    """A count went down while the serving process stayed the same: the sample is not counted
    (the message says why, the same words at every scrape so that it is logged once)."""


def _restarted(earlier: float | None, later: float | None) -> bool:
    """A new process: its start time is known in both samples and moved forward."""
    return earlier is not None and later is not None and later > earlier


@dataclass
class Window:
    """Samples per pod, kept while they fall inside the window (plus one older baseline each).

    A pod's first sample is only a baseline: its counters include everything since the
    server started, which may be long before the window. So a pod contributes from its
    second scrape on; a new pod loses at most one interval of counts. A count that goes down
    is a restart only when the process start time says so; otherwise the sample is refused
    (NotARestart) and the pod's last sample stays its baseline."""

    seconds: float
    _samples: dict[str, deque[tuple[float, Counters, float | None]]] = field(default_factory=dict)

    def observe(self, pod: str, at: float, counters: Counters, started: float | None = None) -> bool:
        """Record one scrape (`started`: the process start time it reports); True when the pod
        counted something since its previous scrape. Raises NotARestart, recording nothing."""
        samples = self._samples.setdefault(pod, deque())
        if samples:
            _, last, last_started = samples[-1]
            fell = counters.fell(last)
            if fell is not None and not _restarted(last_started, started):
                raise NotARestart(_not_a_restart(fell, last_started, started))
        moved = bool(samples) and samples[-1][1] != counters
        samples.append((at, counters, started))
        return moved

    def increase(self, now: float) -> Counters:
        """Everything counted inside [now - seconds, now], summed over pods (restart-aware)."""
        cutoff = now - self.seconds
        total = Counters()
        for pod in list(self._samples):
            samples = self._samples[pod]
            while len(samples) > 1 and samples[1][0] <= cutoff:
                samples.popleft()  # keep the newest sample at or before the cutoff as baseline
            if samples[-1][0] <= cutoff:
                del self._samples[pod]  # gone for a whole window: its pod is gone
                continue
            for (_, earlier, then), (_, later, now_started) in zip(samples, list(samples)[1:]):
                total = total.plus(later.increase_since(earlier, restarted=_restarted(then, now_started)))
        return total

    @property
    def pods(self) -> list[str]:
        return sorted(self._samples)


def _not_a_restart(fell: str, earlier: float | None, later: float | None) -> str:
    if earlier is None or later is None:
        return (f"{fell} went down and the server exports no {PROCESS_START}: a restart cannot be told from a counter "
                "that goes back; sample not counted")
    moved = "did not change" if later == earlier else "went back"
    return f"{fell} went down while {PROCESS_START} {moved}: not a restart; sample not counted"


@dataclass
class LoadWindow:
    """The running-requests readings of the last N seconds (every engine of every pod): the
    batch sizes the serving actually ran, over the same window as the acceptance counters."""

    seconds: float
    _readings: deque[tuple[float, float]] = field(default_factory=deque)

    def observe(self, at: float, running: tuple[float, ...]) -> None:
        self._readings.extend((at, value) for value in running)

    def batch_sizes(self, now: float) -> list[float]:
        """Readings inside the window with at least one running request: an idle engine
        decodes nothing, so its zero says nothing about the batch decoding runs at."""
        while self._readings and self._readings[0][0] < now - self.seconds:
            self._readings.popleft()
        return [value for _, value in self._readings if value >= 1]
