"""The speculation cost model (telemetry/cost.py) against vLLM's CPU build: predicted and
measured decode tokens/s of the tiny e2e target (tests/e2e/tiny_models.py), without
speculation and with ngram and a draft model, at batch 1, 4, 16 and 64.

The model is instantiated for this CPU: bandwidth and FLOP/s from a torch micro-benchmark in
the same venv, and the fixed per-step overhead fitted on ONE point (batch 1 without
speculation: measured step time minus the roofline time); every other prediction is out of
sample. Acceptance comes from vLLM's own spec-decode counters of each run.

Time is the engine's CPU time, not wall time: the engine runs in this process on one thread
(VLLM_ENABLE_V1_MULTIPROCESSING=0, the uni executor, VLLM_CPU_OMP_THREADS_BIND=0), so other
processes on the shared cores slow the wall clock but not the CPU seconds a batch costs.

Usage (the vLLM venv, with this checkout first on the path):
  PYTHONPATH=$PWD/operator:$PWD HF_HUB_OFFLINE=1 nice /work/main/.venv-vllm/bin/python bench/bench_cost_model.py
Prints a Markdown table for bench/RESULTS.md. Bounded on purpose (2 shared cores): each run
decodes MAX_TOKENS tokens for each of B prompts, twice (the faster run counts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 4, 16, 64)
MAX_TOKENS = 32
REPEATS = 2
PROMPT = "one two three four five six seven eight nine ten"
RUNS = {  # name -> (method, k, draft is the target's copy)
    "none": (None, 0),
    "ngram-k1": ("ngram", 1),
    "ngram-k3": ("ngram", 3),
    "draft-k3": ("draft_model", 3),
}


def measure(name: str, target: str, draft: str) -> dict[str, Any]:
    """One vLLM engine (this process): tokens/s per batch and the spec-decode counters."""
    from vllm import LLM, SamplingParams

    method, k = RUNS[name]
    spec: dict[str, Any] | None = None
    if method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    elif method == "draft_model":
        spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": k}
    llm = LLM(model=target, speculative_config=spec, max_model_len=512, max_num_seqs=max(BATCHES), dtype="bfloat16",
              enforce_eager=True, disable_log_stats=False, distributed_executor_backend="uni")
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for batch in (1, 4):  # warm-up: first-call compilation (the ngram proposer's numba) is not decoding
        llm.generate([PROMPT] * batch, params, use_tqdm=False)
    out: dict[str, Any] = {"tokensPerS": {}}
    for batch in BATCHES:
        prompts = [f"{PROMPT} {i}" for i in range(batch)]
        best = float("inf")
        for _ in range(REPEATS):  # the cheaper of two
            start = time.process_time()
            results = llm.generate(prompts, params, use_tqdm=False)
            best = min(best, time.process_time() - start)
        out["tokensPerS"][batch] = sum(len(r.outputs[0].token_ids) for r in results) / best
    out["counters"] = {m.name: getattr(m, "values", None) or getattr(m, "value", None) for m in llm.get_metrics()
                       if m.name.startswith("vllm:spec_decode")}
    return out


def micro_benchmark() -> tuple[float, float]:
    """(bytes/s of a large bf16 copy, FLOP/s of bf16 matmuls of the tiny model's shapes)."""
    import torch

    torch.set_num_threads(1)  # as the engine runs: one thread, CPU seconds
    big = torch.empty(64 * 1024 * 1024, dtype=torch.bfloat16)
    dst = torch.empty_like(big)
    start = time.process_time()
    for _ in range(5):
        dst.copy_(big)
    bandwidth = 5 * 2 * big.numel() * 2 / (time.process_time() - start)  # read + write
    a, b = torch.randn(512, 512, dtype=torch.bfloat16), torch.randn(512, 512, dtype=torch.bfloat16)
    start = time.process_time()
    for _ in range(10):
        torch.matmul(a, b)
    flops = 10 * 2 * 512**3 / (time.process_time() - start)
    return bandwidth, flops


def acceptance(counters: dict[str, Any]) -> tuple[float, ...]:
    drafts = float(counters.get("vllm:spec_decode_num_drafts") or 0)
    per_pos = counters.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    return tuple(min(1.0, v / drafts) for v in per_pos) if drafts else ()


def layout(target: Path, draft: Path, method: str | None) -> Any:
    """The planner's compute block for the tiny pair (no GPU product: the CPU's figures are ours)."""
    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate

    block: dict[str, Any] = {"method": method or "ngram", "numSpeculativeTokens": 3}
    if method == "draft_model":
        block["model"] = str(draft)
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": str(target)}, "draft": block})
    config = lambda p: json.loads((p / "config.json").read_text())  # noqa: E731
    evaluation = evaluate(spec, ModelInputs(config(target)), ModelInputs(config(draft)) if method == "draft_model" else None)
    assert evaluation.plan is not None and evaluation.plan.compute is not None, evaluation.findings
    return evaluation.plan.compute


def predict(measured: dict[str, Any], target: Path, draft: Path, bandwidth: float, flops: float) -> dict[str, dict[int, float]]:
    from specdeploy.telemetry.cost import Hardware, Workload, step_time

    base = layout(target, draft, None)
    context = len(PROMPT.split()) + MAX_TOKENS / 2
    probe = Hardware(bandwidth, flops, flops, 1.0, step_overhead_s=0.0, draft_pass_overhead_s=0.0)
    roof = step_time(base.target, probe, tokens=1, sequences=1, context=context, tp=1)
    overhead = max(0.0, 1 / measured["none"]["tokensPerS"][1] - roof)  # the one fitted point
    hw = replace(probe, step_overhead_s=overhead, draft_pass_overhead_s=overhead)
    out: dict[str, dict[int, float]] = {}
    for name, (method, k) in RUNS.items():
        accept = acceptance(measured[name]["counters"]) if k else ()
        work = Workload(layout(target, draft, method) if method else base, hw, method or "ngram", accept or (0.0,) * max(1, k),
                        context=context)
        out[name] = {b: work.tokens_per_s(b, k) for b in BATCHES}
    out["_overhead_ms"] = {1: overhead * 1e3}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", choices=RUNS)
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--out", help="with --measure: where to write the run's JSON (vLLM logs to stdout)")
    parser.add_argument("--heads", type=int, default=0, help="a wider target than the e2e one: heads x 64 hidden (0: the e2e target)")
    parser.add_argument("--layers", type=int, default=8, help="with --heads: the target's layers")
    args = parser.parse_args()
    if args.measure:
        Path(args.out).write_text(json.dumps(measure(args.measure, args.target, args.draft)))
        return
    sys.path.insert(0, str(ROOT))
    from tests.e2e.tiny_models import build_llama, build_pair

    with tempfile.TemporaryDirectory() as tmp:
        target, _ = build_pair(Path(tmp))
        if args.heads:  # per-step overhead then no longer hides the work of a step
            target = Path(tmp) / "wide-target"
            build_llama(target, layers=args.layers, heads=args.heads, kv_heads=args.heads)
        draft = target  # the draft model is the target's copy: it accepts what greedy decoding emits
        load_before = os.getloadavg()
        measured = {}
        for name in RUNS:
            env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "0"}
            out = Path(tmp) / f"{name}.json"
            proc = subprocess.run([sys.executable, __file__, "--measure", name, "--target", str(target), "--draft", str(draft),
                                   "--out", str(out)], capture_output=True, text=True, env=env, timeout=900)
            if proc.returncode:
                sys.exit(f"{name}: {proc.stderr[-3000:]}")
            run = json.loads(out.read_text())
            print(f"{name}: {run}", file=sys.stderr)
            measured[name] = {**run, "tokensPerS": {int(b): v for b, v in run["tokensPerS"].items()}}
        bandwidth, flops = micro_benchmark()
        predicted = predict(measured, target, draft, bandwidth, flops)
    print(f"load average before/after: {load_before} / {os.getloadavg()}; one thread: {bandwidth / 1e9:.1f} GB/s copy, "
          f"{flops / 1e9:.1f} GFLOP/s bf16 matmul; fitted step overhead {predicted['_overhead_ms'][1]:.2f} ms (CPU time)")
    print("| run | acceptance | " + " | ".join(f"B={b} measured / predicted tok per CPU-s" for b in BATCHES) + " |")
    print("|---|---|" + "---|" * len(BATCHES))
    for name in RUNS:
        accept = ", ".join(f"{a:.2f}" for a in acceptance(measured[name]["counters"])) or "-"
        cells = " | ".join(f"{measured[name]['tokensPerS'][b]:.0f} / {predicted[name][b]:.0f}" for b in BATCHES)
        print(f"| {name} | {accept} | {cells} |")


if __name__ == "__main__":
    main()
