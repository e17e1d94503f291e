"""`python -m specdeploy.cli ...` under tracemalloc, for finding where the operator's memory
goes (bench_operator.py --trace DIR). Each SIGUSR1 writes a snapshot, `snapshot-N.pickle`,
to $BENCH_TRACE_DIR; `python bench/traced_operator.py --report DIR/snapshot-N.pickle` prints
the top allocation sites by file and by line. Tracing costs time and memory of its own:
read the sites, not the RSS, of a traced run."""

from __future__ import annotations

import itertools
import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from typing import Any

FRAMES = int(os.environ.get("BENCH_TRACE_FRAMES", "4"))


def _report(path: str, top: int = 30) -> None:
    snapshot = tracemalloc.Snapshot.load(path).filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(s.size for s in snapshot.statistics("filename"))
    print(f"traced: {total / 2**20:.1f} MiB")
    for key in ("filename", "lineno"):
        print(f"--- top {top} by {key}")
        for stat in snapshot.statistics(key)[:top]:
            frame = stat.traceback[0]
            print(f"{stat.size / 2**20:7.2f} MiB {stat.count:8d}  {frame.filename}:{frame.lineno if key == 'lineno' else ''}")
    print(f"--- top {top} by traceback (the caller inside specdeploy or kopf)")
    for stat in snapshot.statistics("traceback")[:top]:
        frames = [f for f in stat.traceback if "/specdeploy/" in f.filename or "/kopf/" in f.filename]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[:4]) or str(stat.traceback[0])
        print(f"{stat.size / 2**20:7.2f} MiB {stat.count:8d}  {stat.traceback[0].filename.split('site-packages/')[-1]}:{stat.traceback[0].lineno}  [{where}]")


def main() -> None:
    out = Path(os.environ["BENCH_TRACE_DIR"])
    counter = itertools.count()
    tracemalloc.start(FRAMES)

    def dump(*_: Any) -> None:
        path = out / f"snapshot-{next(counter)}.pickle"
        current, peak = tracemalloc.get_traced_memory()  # the peak since the last snapshot
        (out / f"{path.stem}.txt").write_text(f"current {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB\n")
        tracemalloc.take_snapshot().dump(str(path))
        tracemalloc.reset_peak()

    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["specdeploy", *sys.argv[1:]]
    runpy.run_module("specdeploy.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        _report(sys.argv[2])
    else:
        main()
