"""Whole-process time of `specdeploy validate` vs vLLM's own config classes on the same pair,
and the floor any verdict through transformers' config classes pays (importing them).

Usage: python bench/bench_validate.py [--vllm-python .venv-vllm/bin/python] [--runs 5]
The three commands run interleaved (ours, floor, vLLM, ours, ...) so that load from other
processes on the machine falls on all three alike. Prints a Markdown table; bench/RESULTS.md
records a run on the project's 2-core machine."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "fixtures"
PAIRS = [
    ("Llama-3.1-70B + Llama-3.2-1B, draft_model, TP 8", "model-configs/meta-llama__Llama-3.1-70B-Instruct.json",
     "model-configs/meta-llama__Llama-3.2-1B-Instruct.json", "draft_model", 8, 4),
    ("Kimi-K3 + K3 DSpark Block5 (96 heads), dspark, TP 8", "model-configs/moonshotai__Kimi-K3.json",
     "synthetic/k3-dspark-block5.json", "dspark", 8, 5),
]

VLLM_CHECK = """
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target_dir, draft_dir, method, tp, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
target = ModelConfig(model=target_dir, skip_tokenizer_init=True)
parallel = ParallelConfig(tensor_parallel_size=tp, distributed_executor_backend="external_launcher")
target.verify_with_parallel_config(parallel)
SpeculativeConfig(target_model_config=target, target_parallel_config=parallel, model=draft_dir,
                  method=method, num_speculative_tokens=k, draft_tensor_parallel_size=tp)
"""
# What every verdict that parses configs with transformers' classes pays before any rule runs.
FLOOR = "import transformers.models.llama.configuration_llama"


def seconds(command: list[str]) -> tuple[float, float, int]:
    """Wall and CPU (user + sys) seconds of one fresh process, and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.run(command, capture_output=True, text=True).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, code


def as_model_dir(config: Path, parent: Path) -> str:
    folder = parent / config.stem
    folder.mkdir(exist_ok=True)
    shutil.copy(config, folder / "config.json")
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-python", default=None)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"| pair | specdeploy validate | floor: `{FLOOR}` | vLLM ModelConfig+SpeculativeConfig | vLLM / ours (wall; CPU) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, target, draft, method, tp, k in PAIRS:
            ours_cmd = [sys.executable, "-m", "specdeploy.cli", "validate", "--target", str(CONFIGS / target), "--draft", str(CONFIGS / draft),
                        "--method", method, "--tp", str(tp), "--num-speculative-tokens", str(k), "-o", "json"]
            floor_cmd = [sys.executable, "-c", FLOOR]
            vllm_cmd = ([args.vllm_python, "-c", VLLM_CHECK, as_model_dir(CONFIGS / target, Path(tmp)), as_model_dir(CONFIGS / draft, Path(tmp)),
                         method, str(tp), str(k)] if args.vllm_python else None)
            times: dict[str, list[float]] = {"ours": [], "floor": [], "vllm": []}
            cpu: dict[str, list[float]] = {"ours": [], "floor": [], "vllm": []}
            codes: dict[str, int] = {}
            for _ in range(args.runs):
                for name, command in (("ours", ours_cmd), ("floor", floor_cmd), ("vllm", vllm_cmd)):
                    if command is not None:
                        elapsed, used, codes[name] = seconds(command)
                        times[name].append(elapsed)
                        cpu[name].append(used)
            med = {name: statistics.median(values) for name, values in times.items() if values}
            mcpu = {name: statistics.median(values) for name, values in cpu.items() if values}
            theirs = f"{med['vllm']:.2f} s, CPU {mcpu['vllm']:.2f} s (exit {codes['vllm']})" if "vllm" in med else "not run (no --vllm-python)"
            ratio = (f"{med['vllm'] / med['ours']:.1f}x; {mcpu['vllm'] / mcpu['ours']:.1f}x (floor: {med['vllm'] / med['floor']:.1f}x; "
                     f"{mcpu['vllm'] / mcpu['floor']:.1f}x)") if "vllm" in med else "-"
            print(f"| {label} | {med['ours']:.2f} s, CPU {mcpu['ours']:.2f} s (exit {codes['ours']}) | {med['floor']:.2f} s, CPU {mcpu['floor']:.2f} s | {theirs} | {ratio} |")
    print(f"\nmedians of {args.runs} interleaved runs each; load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
