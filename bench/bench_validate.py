"""Whole-process time of `specdeploy validate` vs vLLM's own config classes on the same pair.

Usage: python bench/bench_validate.py [--vllm-python .venv-vllm/bin/python] [--runs 7]
Prints a Markdown table; bench/RESULTS.md records a run on the project's 2-core machine."""

from __future__ import annotations

import argparse
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


def median_seconds(command: list[str], runs: int) -> tuple[float, int]:
    times, code = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        code = subprocess.run(command, capture_output=True, text=True).returncode
        times.append(time.perf_counter() - start)
    return statistics.median(times), code


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
    specdeploy = str(Path(sys.executable).parent / "specdeploy")
    print(f"| pair | specdeploy validate (median of {args.runs}) | vLLM ModelConfig+SpeculativeConfig (median of {args.runs}) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, target, draft, method, tp, k in PAIRS:
            ours, our_code = median_seconds([specdeploy, "validate", "--target", str(CONFIGS / target), "--draft", str(CONFIGS / draft),
                                             "--method", method, "--tp", str(tp), "--num-speculative-tokens", str(k), "-o", "json"], args.runs)
            theirs = "not run (no --vllm-python)"
            if args.vllm_python:
                seconds, code = median_seconds([args.vllm_python, "-c", VLLM_CHECK, as_model_dir(CONFIGS / target, Path(tmp)),
                                                as_model_dir(CONFIGS / draft, Path(tmp)), method, str(tp), str(k)], args.runs)
                theirs = f"{seconds:.2f} s (exit {code})"
            print(f"| {label} | {ours:.2f} s (exit {our_code}) | {theirs} |")


if __name__ == "__main__":
    main()
