"""A sliding window over per-pod counter samples: what the pods counted in the last N seconds.

Time is passed in (the controller's clock, the tests' numbers), so this stays pure."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from specdeploy.telemetry.metrics import Counters


@dataclass
class Window:
    """Samples per pod, kept while they fall inside the window (plus one older baseline each).

    A pod's first sample is only a baseline: its counters include everything since the
    server started, which may be long before the window. So a pod contributes from its
    second scrape on; a new pod loses at most one interval of counts."""

    seconds: float
    _samples: dict[str, deque[tuple[float, Counters]]] = field(default_factory=dict)

    def observe(self, pod: str, at: float, counters: Counters) -> bool:
        """Record one scrape; True when the pod counted something since its previous scrape."""
        samples = self._samples.setdefault(pod, deque())
        moved = bool(samples) and samples[-1][1] != counters
        samples.append((at, counters))
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
            for (_, earlier), (_, later) in zip(samples, list(samples)[1:]):
                total = total.plus(later.increase_since(earlier))
        return total

    @property
    def pods(self) -> list[str]:
        return sorted(self._samples)


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
