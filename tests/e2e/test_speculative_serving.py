"""A real speculative run of the pod the operator renders, on vLLM's CPU build.

For each method: tiny random-weight models are built here, a SpeculativeDeployment points at
them (local paths + inline config), the operator (kopf, on the kmock API emulator) plans and
renders it, and the vLLM container of the Deployment it wrote is run with its exact args and
env as `python -m vllm.entrypoints.openai.api_server --model <args[0]> <args[1:]>` (the
image's entrypoint is `vllm serve <model> ...`). Then /health, completions, and
`vllm:spec_decode_num_drafts_total > 0` at /metrics: the draft really proposed tokens.

Telemetry: a Pod object like the one kubelet would report (Ready, podIP 127.0.0.1, the
server's port) lets the operator's scraper read the real server's /metrics; status.speculation
must equal what this test computes by hand from the counters it reads itself (by regex, not
the parser under test), and SpeculationEffective must follow: True for ngram on a looping
greedy output, False for a random-weight draft that accepts nothing.

Adapted for the CPU test host, and nothing else:
- `--port`: a free local port instead of the container's 8000 (tests may run side by side);
- `HF_HOME`: a temp dir instead of the pod's model-cache volume mount path;
- `VLLM_CPU_KVCACHE_SPACE=1` (GiB) is added: the CPU build sizes its KV cache from it and
  ignores `--gpu-memory-utilization`, which is passed through unchanged.
"""

from __future__ import annotations

import asyncio
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
pytest.importorskip("kmock")

from tests.integration.conftest import (  # noqa: E402  (fixtures: the operator on kmock, with resourceVersions and generateName)
    DEPLOYMENT, NS, Cluster, Operator, cluster, emulator, eventually, kmock_options, operator, with_identity,
)
from tests.integration.test_telemetry import replica_set  # noqa: E402  (the ReplicaSet the Deployment controller makes)

TELEMETRY_INTERVAL_S = 0.5

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


def _document(target: Path, draft_block: dict[str, Any]) -> dict[str, Any]:
    """A CR for the installed CPU build's release: the default image is the newest supported
    release, which has no CPU build, so the e2e names the release it serves with."""
    import vllm

    return {
        "image": f"vllm/vllm-openai:v{vllm.__version__}",
        "target": {"model": str(target), "config": _config(target)},
        "draft": draft_block,
        "parallelism": {"tensorParallelSize": 1, "pipelineParallelSize": 1},
        "serving": {"maxModelLen": 512},
    }


def _spec(target: Path, draft_block: dict[str, Any]) -> Any:
    from specdeploy.api.spec import SpeculativeDeploymentSpec

    return SpeculativeDeploymentSpec.model_validate(_document(target, draft_block))


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


def _counter(metrics: str, name: str) -> list[float]:
    """One spec-decode counter's samples (per position for the per-position one), by regex."""
    values = re.findall(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} ([0-9.e+]+)$", metrics, re.M)
    return [float(v) for v in values]


def _drafts_total(metrics: str) -> float:
    return sum(_counter(metrics, "num_drafts"))


def _by_hand(before: str, after: str, method: str) -> dict[str, Any]:
    """status.speculation from two /metrics texts, as the README's formulas say."""
    d = {n: sum(_counter(after, n)) - sum(_counter(before, n)) for n in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    per_pos = [a - b for a, b in zip(_counter(after, "num_accepted_tokens_per_pos"), _counter(before, "num_accepted_tokens_per_pos"))]
    drafts, tokens, accepted = d["num_drafts"], d["num_draft_tokens"], d["num_accepted_tokens"]
    cost = 0.0 if method == "ngram" else 0.1  # no GPU in these specs: the stated default cost
    k = len(per_pos)
    return {
        "drafts": drafts, "draftTokens": tokens, "acceptedTokens": accepted,
        "acceptanceRate": round(accepted / tokens, 4), "meanAcceptanceLength": round(1 + accepted / drafts, 4),
        "perPositionAcceptance": [round(p / drafts, 4) for p in per_pos], "numSpeculativeTokens": k,
        "predictedSpeedup": round((1 + sum(per_pos) / drafts) / (1 + cost * k), 3), "draftCost": cost,
    }


def _metrics_gets(server: "Server") -> int:
    return server.log.read_text(errors="replace").count('"GET /metrics HTTP/1.1" 200')


def _pod(name: str, port: int, owner_uid: str) -> dict[str, Any]:
    """The serving pod as kubelet would report it, at the test server's address, owned by the
    Deployment's ReplicaSet (the scraper reads only pods its workload owns)."""
    from specdeploy.render.labels import labels

    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-5d8f", "uid": owner_uid, "controller": True}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": NS, "labels": labels(name), "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "vllm", "image": "vllm", "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }


async def _serve_and_speculate(name: str, document: dict[str, Any], cluster: Cluster, tmp_path: Path,
                               prompt: str, requests: int, max_tokens: int) -> dict[str, Any]:
    """Serve what the operator rendered, send traffic, and return status.speculation once the
    operator's scraper has read the counters this test reads by hand."""
    from specdeploy.api.spec import API_GROUP, API_VERSION, KIND

    body = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": document}
    await cluster.create(with_identity(body, f"uid-{name}"))
    await eventually(lambda: cluster.exists(DEPLOYMENT, name), what="the rendered Deployment")
    containers = cluster.get(DEPLOYMENT, name)["spec"]["template"]["spec"]["containers"]
    container = next(c for c in containers if c["name"] == "vllm")
    spec_arg = json.loads(container["args"][container["args"].index("--speculative-config") + 1])
    assert spec_arg["method"] == document["draft"]["method"]
    started = time.monotonic()
    server = Server(container, tmp_path)
    try:
        await asyncio.to_thread(server.wait_healthy)
        await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
        owner = await replica_set(cluster, name)
        response = await cluster.k.post(f"/api/v1/namespaces/{NS}/pods", json=_pod(name, server.port, owner))
        assert response.status in (200, 201), await response.text()
        await eventually(lambda: _metrics_gets(server) >= 2, what="the scraper's baseline")
        _, before = await asyncio.to_thread(_get, server.url + "/metrics")
        for _ in range(requests):
            out = await asyncio.to_thread(_post, server.url + "/v1/completions", {
                "model": container["args"][0], "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True,
            })
            assert out["choices"][0]["text"], out
        _, after = await asyncio.to_thread(_get, server.url + "/metrics")
        assert _drafts_total(after) > 0, f"no speculative drafts proposed:\n{after[:2000]}"
        expected = _by_hand(before, after, document["draft"]["method"])

        def scraped() -> dict[str, Any] | None:
            got = cluster.sd(name).get("status", {}).get("speculation") or {}
            return got if got.get("drafts") == expected["drafts"] else None

        speculation = await eventually(scraped, what=f"status.speculation with {expected['drafts']} drafts")
        print(f"\n[e2e] {name}: status.speculation {json.dumps({k: speculation.get(k) for k in expected})}")
        assert {k: speculation.get(k) for k in expected} == expected
        assert speculation["pods"] == 1 and speculation["skippedPods"] == []
        return speculation
    finally:
        server.stop()
        WALL_TIMES[name] = time.monotonic() - started
        print(f"\n[e2e] {name}: {WALL_TIMES[name]:.0f}s wall")


@pytest.fixture
def fast_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_TELEMETRY_INTERVAL_S", str(TELEMETRY_INTERVAL_S))


def _effective(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.condition(name, "SpeculationEffective")


async def test_draft_model_serves_rendered_pod(tiny, tmp_path, fast_telemetry, operator: Operator, cluster: Cluster) -> None:
    """A random-weight draft accepts (next to) nothing: SpeculationEffective=False, with a Warning."""
    document = _document(tiny["target"], {
        "method": "draft_model", "model": str(tiny["draft"]), "config": _config(tiny["draft"]),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    speculation = await _serve_and_speculate("tiny-draft-model", document, cluster, tmp_path,
                                             "the quick brown fox jumps over the lazy dog", requests=3, max_tokens=64)
    assert speculation["drafts"] >= 100 and speculation["acceptanceRate"] < 0.05
    effective = _effective(cluster, "tiny-draft-model")
    assert (effective["status"], effective["reason"]) == ("False", "AcceptanceCollapsed"), effective
    await eventually(lambda: any(e.get("type") == "Warning" and e.get("reason") == "AcceptanceCollapsed" for e in cluster.events()),
                     what="the Warning Event")


async def test_eagle3_serves_rendered_pod(tiny, tmp_path, fast_telemetry, operator: Operator, cluster: Cluster) -> None:
    document = _document(tiny["target"], {
        "method": "eagle3", "model": str(tiny["eagle3"]), "config": _config(tiny["eagle3"]),
        "numSpeculativeTokens": 3, "tensorParallelSize": 1,
    })
    speculation = await _serve_and_speculate("tiny-eagle3", document, cluster, tmp_path,
                                             "the quick brown fox jumps over the lazy dog", requests=3, max_tokens=64)
    # The verdict follows the model's rule on these very numbers.
    collapsed = speculation["acceptanceRate"] < 0.05 or speculation["predictedSpeedup"] < 1
    assert _effective(cluster, "tiny-eagle3")["status"] == ("False" if collapsed else "True")


async def test_ngram_serves_rendered_pod(tiny, tmp_path, fast_telemetry, operator: Operator, cluster: Cluster) -> None:
    """ngram on a greedy output that loops: real acceptance, SpeculationEffective=True."""
    document = _document(tiny["target"], {"method": "ngram", "numSpeculativeTokens": 3})
    prompt = " ".join(["one two three four five six seven eight"] * 6)
    speculation = await _serve_and_speculate("tiny-ngram", document, cluster, tmp_path, prompt, requests=3, max_tokens=200)
    assert speculation["drafts"] >= 100 and speculation["acceptanceRate"] > 0.5
    effective = _effective(cluster, "tiny-ngram")
    assert (effective["status"], effective["reason"]) == ("True", "Effective"), effective


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
