"""The CLI contract scripts rely on: JSON shape and exit status 0 valid / 1 invalid / 2 usage.

Runs the installed `specdeploy` console script as a user would, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MODEL_CONFIGS, SYNTHETIC

K3 = str(MODEL_CONFIGS / "moonshotai__Kimi-K3.json")
EXE = shutil.which("specdeploy", path=str(Path(sys.executable).parent)) or "specdeploy"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("draft, heads", [("k3-dspark-block5", 12), ("k3-dspark-released", 8)])
def test_validate_json_shows_the_seed_geometry_at_tp8(draft: str, heads: int) -> None:
    result = run("validate", "--target", K3, "--draft", str(SYNTHETIC / f"{draft}.json"), "--method", "dspark",
                 "--tp", "8", "--num-speculative-tokens", "5", "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["ok"] is True
    plan = out["plan"]
    assert (plan["tensorParallelSize"], plan["draftTensorParallelSize"], plan["pipelineParallelSize"]) == (8, 8, 1)
    assert (plan["method"], plan["numSpeculativeTokens"]) == ("dspark", 5)
    assert plan["draft"] == {"attentionHeadsPerGpu": heads, "kvHeadsPerGpu": 1, "headSize": 576, "usesMLA": True, "numExperts": 0}
    assert plan["target"]["attentionHeadsPerGpu"] == 12


@pytest.mark.parametrize("bad", sorted(p.name for p in SYNTHETIC.glob("k3-dspark-bad-*.json")))
def test_each_seed_rejection_exits_1_with_mla_dspark_in_a_finding(bad: str) -> None:
    result = run("validate", "--target", K3, "--draft", str(SYNTHETIC / bad), "--method", "dspark", "--tp", "8", "-o", "json")
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert out["ok"] is False and any("MLA DSpark" in f["message"] for f in out["findings"])


def test_tp5_is_invalid_and_says_which_sizes_are_allowed() -> None:
    result = run("validate", "--target", K3, "--draft", str(SYNTHETIC / "k3-dspark-block5.json"), "--method", "dspark", "--tp", "5", "-o", "json")
    assert result.returncode == 1
    finding = next(f for f in json.loads(result.stdout)["findings"] if f["code"] == "target-heads-tp")
    assert finding["field"] == "spec.parallelism.tensorParallelSize" and "allowed: 1, 2, 3, 4, 6, 8, 12" in finding["message"]


def test_directory_holding_config_json_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((SYNTHETIC / "k3-dspark-released.json").read_text())
    assert run("validate", "--target", K3, "--draft", str(tmp_path), "--method", "dspark", "--tp", "8").returncode == 0


@pytest.mark.parametrize("args", [
    ("validate", "--target", "/nonexistent/config.json", "--method", "ngram"),
    ("validate", "--target", K3, "--method", "ngram", "--tp", "zero"),
    ("plan", "-f", "/nonexistent.yaml"),
    ("validate", "--target", K3, "--method", "eagle9"),
    ("validate", "--target", K3, "--method", "eagle3"),
    ("validate", "--target", K3, "--method", "ngram", "--draft", K3),
])
def test_usage_and_io_errors_exit_2_with_a_message(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2 and result.stderr.strip()


def test_bad_spec_field_exits_1_naming_the_field(tmp_path: Path) -> None:
    cr = tmp_path / "sd.yaml"
    cr.write_text("apiVersion: specdeploy.io/v1alpha1\nkind: SpeculativeDeployment\nmetadata: {name: x}\n"
                  "spec:\n  target: {model: a/b}\n  draft: {method: eagle9, model: c/d}\n  replicas: -1\n")
    result = run("plan", "-f", str(cr), "-o", "json")
    assert result.returncode == 1
    fields = {f["field"] for f in json.loads(result.stdout)["results"][0]["findings"]}
    assert {"spec.draft.method", "spec.replicas"} <= fields


def test_rollout_limits_must_be_counts_or_percentages(tmp_path: Path) -> None:
    cr = tmp_path / "sd.yaml"
    cr.write_text("apiVersion: specdeploy.io/v1alpha1\nkind: SpeculativeDeployment\nmetadata: {name: x}\n"
                  "spec:\n  target: {model: a/b}\n  draft: {method: ngram, numSpeculativeTokens: 3}\n  rollout: {maxSurge: abc}\n")
    result = run("plan", "-f", str(cr), "-o", "json")
    assert result.returncode == 1
    finding = json.loads(result.stdout)["results"][0]["findings"][0]
    assert finding["field"] == "spec.rollout.maxSurge" and "percentage" in finding["message"]


def test_plan_reads_config_maps_from_the_same_stream(tmp_path: Path) -> None:
    """`kubectl create configmap ... --dry-run=client -o yaml` beside the CR, as GitOps repos keep them."""
    example = (Path(__file__).parents[2] / "examples" / "llama-3.1-70b-eagle3.yaml").read_text()
    draft = (MODEL_CONFIGS / "specforge__llama3-8B-eagle3.json").read_text()
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-70b-eagle3-draft"}, "data": {"config.json": draft}}
    stream = tmp_path / "stream.yaml"
    stream.write_text(example + "\n---\n" + json.dumps(configmap))
    result = run("plan", "-f", str(stream), "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [m["kind"] for m in out["results"][0]["manifests"]] == ["Deployment", "Service", "PodDisruptionBudget"]
    without = run("plan", "-f", str(Path(__file__).parents[2] / "examples" / "llama-3.1-70b-eagle3.yaml"))
    assert without.returncode == 2 and "spec.draft.configMapRef" in without.stderr and "llama-70b-eagle3-draft" in without.stderr


def test_run_without_cluster_credentials_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST",)}
    env["KUBECONFIG"] = str(tmp_path / "missing-kubeconfig")
    result = subprocess.run([EXE, "run", "--namespace", "default"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "no Kubernetes credentials" in result.stderr and "Traceback" not in result.stderr
