"""The plan's KV-cache need on a named GPU equals vLLM's own `get_kv_cache_configs` at that GPU's
batch size, for models whose layers hold KV for the tokens in flight.

vLLM picks max_num_batched_tokens from the device's memory and name (engine/arg_utils.py
`get_batch_defaults`): 16,384 on a B200 or an MI300X, 8,192 on an H100, 2,048 on any A100, and
sliding-window (gpt-oss) and chunked-local (Llama-4) layers keep blocks for two such batches.
Ours: `evaluate` on a spec naming the GPU (weights set small so every layout fits), then the
request its preflight Job would send (`preflight.request.judge_request`: the pod's exact args,
the GPU's memory and name); vLLM's: the preflight judge on that request, in this process. Runs
under every release venv there is (0.32, 0.33, 0.34), each with its own rule set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

from specdeploy.api.spec import SpeculativeDeploymentSpec  # noqa: E402
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate  # noqa: E402
from specdeploy.planning.gpus import lookup_gpu  # noqa: E402
from specdeploy.planning.placement import example_image  # noqa: E402
from specdeploy.preflight.request import judge_request  # noqa: E402
from specdeploy.preflight.vllm_judge import Judge, Request  # noqa: E402

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"
GPUS = ("B200-180GB", "MI300X-192GB", "H100-80GB", "A100-80GB")
# (target, draft, method, tp). ngram_gpu, not ngram: 0.32 turns async scheduling off for CPU
# ngram (config/vllm.py), where the plan counts one batch more than vLLM keeps.
ROWS = (
    ("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", "eagle3", 2),  # sliding window
    ("meta-llama__Llama-4-Scout-17B-16E-Instruct", None, "ngram_gpu", 4),  # chunked local
    ("Qwen__Qwen3.5-122B-A10B", None, "mtp", 4),  # hybrid: GatedDeltaNet state + full attention
)
MAX_MODEL_LEN = 32768
K = 3


def _config(name: str) -> dict[str, Any]:
    return json.loads((REAL / f"{name}.json").read_text())


def _evaluate(target: str, draft: str | None, method: str, tp: int, gpu: str) -> tuple[SpeculativeDeploymentSpec, Evaluation]:
    product = lookup_gpu(gpu)
    accelerator = "rocm" if product.vendor == "amd" else "cuda"
    image = example_image(accelerator).rsplit(":", 1)[0] + f":v{vllm.__version__}"
    draft_spec: dict[str, Any] = {"method": method, "numSpeculativeTokens": K, **({"model": f"org/{draft}"} if draft else {})}
    if draft:
        draft_spec["weightsGiB"] = 1
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": f"org/{target}", "weightsGiB": 1}, "draft": draft_spec, "image": image,
        "parallelism": {"tensorParallelSize": tp, "pipelineParallelSize": 1},
        "resources": {"gpu": {"product": gpu}}, "serving": {"maxModelLen": MAX_MODEL_LEN}})
    return spec, evaluate(spec, ModelInputs(_config(target)), ModelInputs(_config(draft)) if draft else None)


@pytest.fixture(scope="module")
def judge():
    judge = Judge()
    yield judge
    judge.close()


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize(("target", "draft", "method", "tp"), ROWS, ids=[r[0] for r in ROWS])
def test_the_plans_need_is_vllms_at_the_gpus_batch_size(judge: Judge, tmp_path: Path, target: str, draft: str | None,
                                                        method: str, tp: int, gpu: str) -> None:
    spec, evaluation = _evaluate(target, draft, method, tp, gpu)
    assert evaluation.ok and evaluation.plan is not None, [f.message for f in evaluation.findings]
    plan, configs = evaluation.plan, {"target": _config(target), **({"draft": _config(draft)} if draft else {})}
    request = judge_request(spec, plan, configs["target"], configs.get("draft"))
    dirs = {}
    for role, config in request.configs.items():
        (tmp_path / role).mkdir()
        (tmp_path / role / "config.json").write_text(json.dumps(config))
        dirs[role] = str(tmp_path / role)
    verdict = judge.judge(Request.from_dict(request.to_json(dirs)), fit=False)
    assert verdict.ok, verdict.error
    vllms, ours = verdict.memory, plan.memory
    assert vllms["maxNumBatchedTokens"] == ours.batch.max_num_batched_tokens, ours.batch.source
    assert vllms["maxNumSeqs"] == ours.batch.max_num_seqs
    assert vllms["inFlightTokens"] == ours.in_flight_tokens
    assert vllms["kvCacheBytes"] == ours.kv_cache_bytes, f"vLLM {vllms['kvCacheBytes']:,} vs ours {ours.kv_cache_bytes:,}"


def test_the_gpus_batch_sizes_differ_and_the_need_follows_them() -> None:
    """The rows above would pass at one batch size for every GPU; they do not: vLLM's own figures
    for gpt-oss differ between a B200, an H100 and an A100."""
    needs = {gpu: _evaluate(*ROWS[0], gpu)[1].plan.memory for gpu in ("B200-180GB", "H100-80GB", "A100-80GB")}
    assert [m.batch.max_num_batched_tokens for m in needs.values()] == [16384, 8192, 2048]
    assert needs["B200-180GB"].kv_cache_bytes > needs["H100-80GB"].kv_cache_bytes > needs["A100-80GB"].kv_cache_bytes
