"""How long after the canary is Ready the decision comes, from real vLLM counter traces replayed
at a rate.

The traces are /metrics pages of real vLLM 0.32.0 CPU servers, recorded by
tests/e2e/test_canary_serving.py (SPECDEPLOY_CANARY_TRACES) into tests/fixtures/metrics/canary/:
`promote/` (stable: a random-weight draft; canary: the target's own weights) and `rollback/`
(stable: the target's own weights; canary: the random draft), one folder per arm, one page per
telemetry interval. Each arm's increments between two pages are what vLLM really counted in that
step (drafts, accepted tokens per position, 5xx); the replay lays them out at a chosen rate of
drafts per second, and the operator's own code counts and decides on them: the per-arm windows and
the canary pod's count-from-process-start (controller/scraping/canary_telemetry.py: `_observe`, `_arm`)
and the decision (rollout/decision.py `decide`), at each scrape of a telemetry interval.

Arms replayed:
- `half`: the question the issue asks. Stable: the target's own weights (acceptance about 1).
  Canary: the recorded increments of both drafts interleaved so that its acceptance is half the
  stable one's (per draft all or nothing: the largest spread a half acceptance can have, so the
  bound is at its slowest).
- `recorded-rollback`, `recorded-promote`: each recorded canary against its recorded stable arm.

Traffic: the canary gets `share` of the drafts (its share of the pods: 10 % = 1 canary pod next
to 9 stable ones), so the stable arm's rate is (1 - share) / share times the canary's. The canary
is Ready at t = 0 and the scrape that follows comes anywhere within one interval: every phase in
steps of a tenth of the interval is replayed and the worst is reported. The stable arm is counted
from t = 0 only (in the operator it counts from the canary's creation, earlier): conservative.

    .venv/bin/python bench/bench_canary.py [--traces tests/fixtures/metrics/canary]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from specdeploy.controller.scraping.canary_telemetry import CanaryWatch, _arm, _observe  # noqa: E402
from specdeploy.rollout.decision import Decision, decide  # noqa: E402
from specdeploy.telemetry.metrics import Counters, Sample, parse_sample  # noqa: E402

TRACES = ROOT / "tests" / "fixtures" / "metrics" / "canary"
PLAN = {"method": "draft_model"}  # no memory in the plan: the stated default draft cost, as in the e2e
RATES = (0.5, 1.0, 2.0, 5.0, 20.0, 100.0)  # canary drafts per second
INTERVALS = (60.0, 15.0)  # the telemetry's default interval, and a shorter one
SHARES = (0.1, 0.2)
PHASES = 10
HORIZON_S = 3600.0


def increments(folder: Path) -> list[Counters]:
    """What vLLM counted between consecutive pages of one arm (the pages of one process)."""
    pages = [parse_sample(p.read_text()) for p in sorted(folder.glob("*.txt"))]
    out = []
    for earlier, later in zip(pages, pages[1:]):
        step = later.counters.increase_since(earlier.counters, restarted=later.started != earlier.started)
        if step.drafts > 0:
            out.append(step)
    if not out:
        raise SystemExit(f"{folder}: no drafts counted between its pages")
    return out


def acceptance(steps: list[Counters]) -> float:
    total = Counters()
    for step in steps:
        total = total.plus(step)
    return total.accepted_tokens / total.draft_tokens if total.draft_tokens else 0.0


def half_of(stable: list[Counters], good: list[Counters], bad: list[Counters], steps: int = 400) -> list[Counters]:
    """good and bad increments interleaved (each list cycled), each next one the one that keeps
    the running acceptance nearest half the stable arm's: a canary at half the stable acceptance."""
    goal = acceptance(stable) / 2
    out, total, g, b = [], Counters(), 0, 0
    for _ in range(steps):
        rate = total.accepted_tokens / total.draft_tokens if total.draft_tokens else 0.0
        if rate < goal:
            step, g = good[g % len(good)], g + 1
        else:
            step, b = bad[b % len(bad)], b + 1
        out.append(step)
        total = total.plus(step)
    return out


@dataclass
class Stream:
    """An arm's cumulative counters over time: its increments, in order and repeated, at `rate`
    drafts/s (asked at times that only grow)."""

    steps: list[Counters]
    rate: float
    total: Counters = Counters()
    drafts: float = 0.0
    index: int = 0

    def at(self, t: float) -> Counters:
        while True:
            step = self.steps[self.index % len(self.steps)]
            if (self.drafts + step.drafts) / self.rate > t:
                return self.total
            self.total, self.drafts, self.index = self.total.plus(step), self.drafts + step.drafts, self.index + 1


def time_to_decision(stable: list[Counters], canary: list[Counters], *, rate: float, share: float, interval: float,
                     phase: float, early: bool = False) -> tuple[float, Decision]:
    """Seconds from Ready to the first scrape whose decision is not Wait. `early`: the stable
    arm's baseline is the round before Ready (the operator counts it from the canary's creation,
    and a vLLM server takes longer than a round to load), else the first round after Ready."""
    stable_stream, canary_stream = Stream(stable, rate * (1 - share) / share), Stream(canary, rate)
    watch = CanaryWatch("bench", 0.0)
    if early:
        _observe(watch.stable, watch.stable_load, "stable-0", Sample(Counters(), (1.0,), 1.0), phase - interval)
    t = phase
    while t <= HORIZON_S:
        _observe(watch.stable, watch.stable_load, "stable-0", Sample(stable_stream.at(t), (1.0,), 1.0), t)
        if "canary-0" not in watch.canary.pods:
            _observe(watch.canary, watch.canary_load, "canary-0", Sample(Counters(), (), 2.0), t - 1e-3)
        _observe(watch.canary, watch.canary_load, "canary-0", Sample(canary_stream.at(t), (1.0,), 2.0), t)
        decision = decide(_arm(watch.canary.increase(t), watch.canary_load, PLAN, t, 0.0),
                          _arm(watch.stable.increase(t), watch.stable_load, PLAN, t, 0.0))
        if decision.action != "Wait":
            return t, decision
        t += interval
    return math.inf, decision


def worst(stable: list[Counters], canary: list[Counters], *, rate: float, share: float, interval: float,
          early: bool = False) -> tuple[float, set[str]]:
    runs = [time_to_decision(stable, canary, rate=rate, share=share, interval=interval, phase=interval * (i + 0.001) / PHASES,
                             early=early) for i in range(PHASES)]
    return max(t for t, _ in runs), {d.action for _, d in runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    args = parser.parse_args()
    promote_stable, promote_canary = increments(args.traces / "promote" / "stable"), increments(args.traces / "promote" / "canary")
    rollback_stable, rollback_canary = increments(args.traces / "rollback" / "stable"), increments(args.traces / "rollback" / "canary")
    good, bad = promote_canary + rollback_stable, promote_stable + rollback_canary  # the target's weights; the random draft
    half = half_of(good, good, bad)
    arms = {
        "half": (good, half),
        "recorded-rollback": (rollback_stable, rollback_canary),
        "recorded-promote": (promote_stable, promote_canary),
    }
    pages = sum(len(list((args.traces / s / a).glob("*.txt"))) for s in ("promote", "rollback") for a in ("stable", "canary"))
    print(f"traces: {pages} pages; increments: target's weights {len(good)}, random draft {len(bad)}")
    for name, (stable, canary) in arms.items():
        print(f"{name}: stable acceptance {acceptance(stable):.3f}, canary {acceptance(canary):.3f} "
              f"(k={canary[0].num_speculative_tokens}, drafts per increment {sum(c.drafts for c in canary) / len(canary):.0f})")
    print()
    print("| arms | stable counted from | share | interval | " + " | ".join(f"{r:g} drafts/s" for r in RATES) + " |")
    print("|---|---|---|---|" + "---|" * len(RATES))
    for name, (stable, canary) in arms.items():
        for early in (False, True):
            for share in SHARES:
                for interval in INTERVALS:
                    cells = []
                    for rate in RATES:
                        seconds, actions = worst(stable, canary, rate=rate, share=share, interval=interval, early=early)
                        cells.append(("never" if math.isinf(seconds) else f"{seconds:.0f} s") + f" {'/'.join(sorted(actions))}")
                    since = "the round before Ready" if early else "the first round after Ready"
                    print(f"| {name} | {since} | {share:.0%} | {interval:.0f} s | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
