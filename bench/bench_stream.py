"""Whole-process time of `specdeploy plan -f` on a stream of N SpeculativeDeployments (default
100), as `kustomize build` of a large GitOps repo would print them: the repository's examples
repeated under distinct names, each with its configs inline or in a ConfigMap of the stream.

Usage: python bench/bench_stream.py [--count 100] [--runs 5]
Prints one Markdown row: wall time, CPU time (user + sys of the process: what a quiet
machine's wall time approaches, and less sensitive to other load), the load average; bench/RESULTS.md records a run on the project's 2-core machine."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
EAGLE_DRAFT = ROOT / "tests" / "fixtures" / "model-configs" / "specforge__llama3-8B-eagle3.json"


def stream(count: int) -> str:
    """`count` CRs cycling through the examples, plus the one ConfigMap an example references."""
    templates = [d for p in EXAMPLES for d in yaml.safe_load_all(p.read_text()) if d and d.get("kind") == "SpeculativeDeployment"]
    documents = []
    for index in range(count):
        cr = json.loads(json.dumps(templates[index % len(templates)]))
        cr["metadata"]["name"] = f"{cr['metadata']['name'][:40]}-{index}"
        documents.append(cr)
    documents.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-70b-eagle3-draft"},
                      "data": {"config.json": EAGLE_DRAFT.read_text()}})
    return yaml.safe_dump_all(documents, sort_keys=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stream.yaml"
        path.write_text(stream(args.count))
        size_kib = path.stat().st_size // 1024
        times, cpu, code, summary = [], [], 0, ""
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            result = subprocess.run([sys.executable, "-m", "specdeploy.cli", "plan", "-f", str(path), "-o", "json"],
                                    capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            code, summary = result.returncode, json.loads(result.stdout).get("summary", result.stderr)
    print(f"| plan -f, {args.count} CRs ({size_kib} KiB) | {statistics.median(times):.2f} s "
          f"(median of {args.runs}; min {min(times):.2f} s) | {statistics.median(cpu):.2f} s | {os.getloadavg()[0]:.1f} | exit {code}: {summary} |")


if __name__ == "__main__":
    main()
