"""A real speculative run of the pod the operator renders, on vLLM's CPU build.

For each method: tiny random-weight models are built here, a SpeculativeDeployment points at
them (local paths + inline config), `evaluate` plans it, `render_manifests` renders it, and
the vLLM container's exact args and env are run as
`python -m vllm.entrypoints.openai.api_server --model <args[0]> <args[1:]>` (the image's
entrypoint is `vllm serve <model> ...`). Then /health, one completion, and
`vllm:spec_decode_num_drafts_total > 0` at /metrics: the draft really proposed tokens.

Adapted for the CPU test host, and nothing else:
- `--port`: a free local port instead of the container's 8000 (tests may run side by side);
- `HF_HOME`: a temp dir instead of the pod's model-cache volume mount path;
- `VLLM_CPU_KVCACHE_SPACE=1` (GiB) is added: the CPU build sizes its KV cache from it and
  ignores `--gpu-memory-utilization`, which is passed through unchanged.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tiny_models import build_eagle3_head, build_llama, build_pair

pytest.importorskip("vllm")

STARTUP_TIMEOUT_S = 420
WALL_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    target, draft = build_pair(root)
    other_vocab = root / "tiny-draft-other-vocab"
    build_llama(other_vocab, layers=1, seed=2, vocab_size=640)
    eagle3 = root / "tiny-eagle3"
    build_eagle3_head(eagle3)
    return {"target": target, "draft": draft, "draft_other_vocab": other_vocab, "eagle3": eagle3}


def _config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def _spec(target: Path, draft_block: dict[str, Any]) -> Any:
    from specdeploy.api.spec import SpeculativeDeploymentSpec

    return SpeculativeDeploymentSpec.model_validate({
        "target": {"model": str(target), "config": _config(target)},
        "draft": draft_block,
        "parallelism": {"tensorParallelSize": 1, "pipelineParallelSize": 1},
        "serving": {"maxModelLen": 512},
    })


def _evaluate(spec: Any) -> Any:
    from specdeploy.pipeline import ModelInputs, evaluate

    draft_cfg = spec.draft.config
    return evaluate(spec, ModelInputs(config=spec.target.config),
                    ModelInputs(config=draft_cfg) if draft_cfg is not None else None)


def _container(spec: Any, plan: Any) -> dict[str, Any]:
    """The vLLM container of the rendered workload (Deployment for one node)."""
    from specdeploy.render import render_manifests

    manifests = render_manifests(spec, plan, name="tiny", namespace="e2e")
    workload = manifests[0]
    assert workload["kind"] == "Deployment"
    containers = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "vllm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(args: list[str], port: int) -> list[str]:
    """The image runs `vllm serve <args>`; args[0] is the model."""
    args = list(args)
    i = args.index("--port")
    args[i + 1] = str(port)
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args[0], *args[1:]]


def _env(container: dict[str, Any], home: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var in container.get("env", []):
        assert "valueFrom" not in var, f"e2e spec renders no secret/field refs, got {var}"
        env[var["name"]] = var["value"]
    env.update(HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_CPU_KVCACHE_SPACE="1")
    return env


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


class Server:
    """One vLLM server process started from the rendered container."""

    def __init__(self, container: dict[str, Any], home: Path):
        self.port = _free_port()
        self.log = home / f"vllm-{self.port}.log"
        self.cmd = _command(container["args"], self.port)
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(self.cmd, env=_env(container, home), stdout=self._log_file,
                                     stderr=subprocess.STDOUT, cwd=home, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if _get(self.url + "/health")[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1)
        pytest.fail(f"vLLM not healthy after {STARTUP_TIMEOUT_S}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)  # our own session: the API server and its engine core
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(30)
        self._log_file.close()


def _drafts_total(metrics: str) -> float:
    values = re.findall(r"^vllm:spec_decode_num_drafts_total\{[^}]*\} ([0-9.e+]+)$", metrics, re.M)
    return sum(float(v) for v in values)


def _serve_and_speculate(name: str, spec: Any, tmp_path: Path, prompt: str) -> None:
    result = _evaluate(spec)
    assert result.ok, result.to_dict()["findings"]
    container = _container(spec, result.plan)
    spec_arg = json.loads(container["args"][container["args"].index("--speculative-config") + 1])
    assert spec_arg["method"] == spec.draft.method
    started = time.monotonic()
    server = Server(container, tmp_path)
    try:
        server.wait_healthy()
        out = _post(server.url + "/v1/completions", {
            "model": container["args"][0], "prompt": prompt, "max_tokens": 48, "temperature": 0,
            "ignore_eos": True,
        })
        assert out["choices"][0]["text"], out
        _, metrics = _get(server.url + "/metrics")
        drafts = _drafts_total(metrics)
        assert drafts > 0, f"no speculative drafts proposed:\n{metrics[:2000]}"
    finally:
        server.stop()
        WALL_TIMES[name] = time.monotonic() - started
        print(f"\n[e2e] {name}: {WALL_TIMES[name]:.0f}s wall")


def test_draft_model_serves_rendered_pod(tiny, tmp_path) -> None:
    spec = _spec(tiny["target"], {
        "method": "draft_model", "model": str(tiny["draft"]), "config": _config(tiny["draft"]),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    _serve_and_speculate("draft_model", spec, tmp_path, "the quick brown fox jumps over the lazy dog")


def test_eagle3_serves_rendered_pod(tiny, tmp_path) -> None:
    spec = _spec(tiny["target"], {
        "method": "eagle3", "model": str(tiny["eagle3"]), "config": _config(tiny["eagle3"]),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    _serve_and_speculate("eagle3", spec, tmp_path, "the quick brown fox jumps over the lazy dog")


def test_ngram_serves_rendered_pod(tiny, tmp_path) -> None:
    spec = _spec(tiny["target"], {"method": "ngram", "numSpeculativeTokens": 3})
    prompt = " ".join(["one two three four five six seven eight"] * 6)
    _serve_and_speculate("ngram", spec, tmp_path, prompt)


def test_rejected_pair_is_rejected_by_vllm_at_startup(tiny, tmp_path) -> None:
    """A draft whose vocabulary differs from the target's: specdeploy refuses it, and vLLM,
    given the args the operator renders for that pair, exits before serving."""
    bad = tiny["draft_other_vocab"]
    spec = _spec(tiny["target"], {
        "method": "draft_model", "model": str(bad), "config": _config(bad),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    result = _evaluate(spec)
    assert not result.ok
    assert any("vocab" in f.code for f in result.findings if f.severity == "error"), result.to_dict()
    # The renderer only renders valid plans: take the valid pair's plan and render it with the
    # rejected spec, so the one JSON speculative-config arg names the rejected draft.
    good = _spec(tiny["target"], {
        "method": "draft_model", "model": str(tiny["draft"]), "config": _config(tiny["draft"]),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    good_result = _evaluate(good)
    container = _container(spec, good_result.plan)
    started = time.monotonic()
    server = Server(container, tmp_path)
    try:
        rc = server.proc.wait(STARTUP_TIMEOUT_S)
    finally:
        server.stop()
    WALL_TIMES["rejected"] = time.monotonic() - started
    print(f"\n[e2e] rejected pair: vLLM exited {rc} after {WALL_TIMES['rejected']:.0f}s")
    assert rc != 0
    assert "same vocabulary size" in server.log.read_text(errors="replace"), server.tail()
