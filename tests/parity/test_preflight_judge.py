"""The preflight judge as its Job runs it (`python vllm_judge.py REQUEST.json --verdict-file PATH`),
under this venv's vLLM release: one case per stage, and an accepted pair with its memory figures.
Its per-release shims are exercised here and, in-process, by the whole parity grid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

from specdeploy.preflight import vllm_judge  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GIB = 1024**3
LLAMA_8B, EAGLE3 = "meta-llama/Llama-3.1-8B-Instruct", "specforge/llama3-8B-eagle3"
CONFIGS = {
    LLAMA_8B: "model-configs/meta-llama__Llama-3.1-8B-Instruct.json",
    EAGLE3: "model-configs/specforge__llama3-8B-eagle3.json",
    "moonshotai/Kimi-K3": "model-configs/moonshotai__Kimi-K3.json",
    "specforge/kimi-k3-dspark": "model-configs/specforge__kimi-k3-dspark.json",
    "Qwen/Qwen2.5-0.5B": "model-configs/Qwen__Qwen2.5-0.5B.json",
}


def _judge(tmp_path: Path, args: list[str], gpu: dict | None) -> tuple[int, dict]:
    models = {}
    for name, fixture in CONFIGS.items():
        directory = tmp_path / "models" / name.replace("/", "__")
        directory.mkdir(parents=True)
        (directory / "config.json").write_text((FIXTURES / fixture).read_text())
        models[name] = str(directory)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"args": args, "models": models, "gpu": gpu}))
    log = tmp_path / "termination-log"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, vllm_judge.__file__, str(request), "--verdict-file", str(log)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.stdout.strip() == log.read_text(), done.stderr[-2000:]
    verdict = json.loads(log.read_text())
    assert verdict["vllmVersion"] == vllm.__version__
    return done.returncode, verdict


def _speculative(method: str, model: str | None = None, k: int = 3) -> list[str]:
    config = {"method": method, "num_speculative_tokens": k, **({"model": model} if model else {})}
    return ["--speculative-config", json.dumps(config)]


def test_an_accepted_pair_with_its_memory_per_gpu(tmp_path: Path) -> None:
    code, verdict = _judge(tmp_path, [LLAMA_8B, "--port", "8000", "--tensor-parallel-size", "2",
                                      "--max-model-len", "32768", *_speculative("eagle3", EAGLE3)],
                           {"memoryBytes": 80 * GIB, "count": 2})
    assert (code, verdict["ok"], verdict["stage"], verdict["error"]) == (0, True, None, None), verdict
    memory = verdict["memory"]
    # 32 target + 1 draft layers of 8/2 heads x 256 x 2 B, 32768 / block tokens + the null block
    assert memory["specs"] == {"FullAttentionSpec": 33}
    block = memory["blockSize"]
    assert memory["kvCacheBytes"] == 33 * 4 * 256 * 2 * block * (32768 // block + 1)
    assert memory["maxNumBatchedTokens"] == 8192 and memory["inFlightTokens"] == 16384
    assert 0 < memory["weightBytes"] < memory["availableKvCacheBytes"] + memory["weightBytes"] <= 80 * GIB


def test_the_gpus_name_sets_vllms_batch_size(tmp_path: Path) -> None:
    """An 80 GiB A100 keeps the small tier (engine/arg_utils.py get_batch_defaults: "a100" in the
    device name), where an 80 GiB GPU of another name gets 8,192."""
    code, verdict = _judge(tmp_path, [LLAMA_8B, "--max-model-len", "8192"],
                           {"memoryBytes": 80 * GIB, "count": 1, "deviceName": "A100-80GB"})
    assert code == 0 and verdict["memory"]["maxNumBatchedTokens"] == 2048, verdict


@pytest.mark.parametrize(("args", "gpu", "stage", "words"), [
    ([LLAMA_8B, "--tensor-parallel-size", "two"], None, "args", "invalid"),
    (["Qwen/Qwen2.5-0.5B", "--tensor-parallel-size", "4"], None, "config", "must be divisible by tensor parallel size"),
    (["moonshotai/Kimi-K3", "--tensor-parallel-size", "8", "--max-model-len", "8192",
      *_speculative("dspark", "specforge/kimi-k3-dspark")], None, "load", "markov_rank"),
    ([LLAMA_8B, "--max-model-len", "131072"], {"memoryBytes": 24 * GIB, "count": 1}, "memory", "KV cache is needed"),
], ids=["args", "config", "load", "memory"])
def test_vllm_refuses_at_its_stage_in_its_own_words(tmp_path: Path, args: list[str], gpu: dict | None,
                                                    stage: str, words: str) -> None:
    code, verdict = _judge(tmp_path, args, gpu)
    assert (code, verdict["ok"], verdict["stage"]) == (1, False, stage), verdict
    assert words in verdict["error"]
