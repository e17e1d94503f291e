"""Wall time of the preflight on CPU: the operator's in-image judge on the exact request its Job
gets (`specdeploy preflight --python`), with vLLM's import time shown separately.

Usage: python bench/bench_preflight.py --vllm-python .venv-vllm/bin/python [--runs 2]
Pairs: examples/kimi-k3-dspark-h200.yaml (Kimi-K3 + DSpark, TP 16 over two nodes) and
examples/llama-3.1-70b-eagle3.yaml (Llama-3.1-70B + EAGLE3; the draft's config.json is the
EAGLE3 layout at the 70B's width, as yuhuili/EAGLE3-LLaMA3.3-Instruct-70B has it). Each run is a
fresh process, as in the pod; an `import vllm` process runs before each, so machine load falls
on both alike. Also the judge's peak memory (what spec.preflight.resources.memory must hold).
Prints a Markdown table; bench/RESULTS.md records a run on the project's 2-core machine."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from specdeploy.local_judge import run_judge  # noqa: E402
from specdeploy.stream import plan_stream  # noqa: E402
from specdeploy.preflight.request import judge_request  # noqa: E402

# The 70B EAGLE3 draft: one Llama layer at the target's width (hidden 8192, 64 heads, 8 KV heads).
EAGLE3_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8}


def streams() -> dict[str, str]:
    draft = json.loads((ROOT / "tests/fixtures/model-configs/specforge__llama3-8B-eagle3.json").read_text()) | EAGLE3_70B
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-70b-eagle3-draft"},
                  "data": {"config.json": json.dumps(draft)}}
    return {
        "Kimi-K3 + DSpark (dspark, TP 16, 2 nodes)": (ROOT / "examples/kimi-k3-dspark-h200.yaml").read_text(),
        "Llama-3.1-70B + EAGLE3 (eagle3, TP 4)": (ROOT / "examples/llama-3.1-70b-eagle3.yaml").read_text() + "\n---\n" + json.dumps(config_map),
    }


def request_of(text: str) -> Any:
    (result,) = plan_stream(text, "bench").results
    assert result.judged is not None, [f.to_dict() for f in result.findings]
    spec, plan, target, draft = result.judged
    return judge_request(spec, plan, target.config, draft.config if draft else None)


def import_seconds(python: str) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", "import vllm"], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True, help="a Python with vLLM (it stands for the image)")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print("| pair | vLLM verdict | preflight wall (median) | `import vllm` (median) | the judging itself | judge peak RSS |")
    print("|---|---|---|---|---|---|")
    for name, text in streams().items():
        request = request_of(text)
        walls, imports, verdict = [], [], None
        for _ in range(args.runs):
            imports.append(import_seconds(args.vllm_python))
            run = run_judge(args.vllm_python, request, remote_code=False)
            walls.append(run.seconds)
            verdict = run.verdict
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
        said = "none" if verdict is None else ("accepted" if verdict.ok else f"refused at {verdict.stage}: {verdict.error}")
        wall, imported = statistics.median(walls), statistics.median(imports)
        print(f"| {name} | {said} (vLLM {verdict.vllm_version if verdict else '?'}) | {wall:.1f} s | {imported:.1f} s | "
              f"{wall - imported:.1f} s | {peak_gib:.2f} GiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
