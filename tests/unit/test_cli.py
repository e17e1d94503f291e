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
import yaml

from tests.conftest import MODEL_CONFIGS, SYNTHETIC

K3 = str(MODEL_CONFIGS / "moonshotai__Kimi-K3.json")
ROOT = Path(__file__).resolve().parents[2]
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
    ("validate", "--target", K3, "--method", "Eagle 9"),
    ("validate", "--target", K3, "--method", "eagle3"),
    ("validate", "--target", K3, "--method", "ngram", "--draft", K3),
])
def test_usage_and_io_errors_exit_2_with_a_message(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2 and result.stderr.strip()


LLAMA8 = str(MODEL_CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json")


def _release(plugins: bool) -> str:
    from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set

    return next(v for v in SUPPORTED_VERSIONS if rule_set(v).plugin_methods is plugins)


def test_a_method_no_release_knows_is_refused_where_no_plugin_may_register_one() -> None:
    result = run("validate", "--target", LLAMA8, "--method", "my_spec", "--num-speculative-tokens", "3",
                 "--vllm-version", _release(False), "-o", "json")
    assert result.returncode == 1, result.stderr
    finding = next(f for f in json.loads(result.stdout)["findings"] if f["code"] == "method-unsupported")
    assert finding["field"] == "spec.draft.method" and "'my_spec'" in finding["message"]
    assert "eagle3" in finding["message"] and "ngram" in finding["message"]


def test_a_plugin_method_is_not_judged_by_validate_or_plan_exit_2_with_the_way_to_judge_it(tmp_path: Path) -> None:
    """Neither valid nor invalid: only the image's vLLM (a preflight) knows what a plugin registers."""
    release = _release(True)
    result = run("validate", "--target", LLAMA8, "--method", "my_spec", "--num-speculative-tokens", "3", "--vllm-version", release)
    assert result.returncode == 2
    assert result.stdout.startswith("NOT JUDGED") and "method-needs-preflight" in result.stdout and "specdeploy preflight" in result.stdout
    cr = tmp_path / "cr.yaml"
    cr.write_text(yaml.safe_dump({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "p"},
                                  "spec": {"image": f"vllm/vllm-openai:v{release}", "target": {"model": "t", "config": json.loads(Path(LLAMA8).read_text())},
                                           "draft": {"method": "my_spec", "numSpeculativeTokens": 3}}}))
    plan = run("plan", "-f", str(cr), "-o", "json")
    assert plan.returncode == 2
    out = json.loads(plan.stdout)["results"][0]
    assert out["verdict"] == "unjudged" and out["manifests"] == [] and out["plan"] is not None
    assert "a plugin in image" in next(f["message"] for f in out["findings"] if f["code"] == "method-needs-preflight")


def test_bad_spec_field_exits_1_naming_the_field(tmp_path: Path) -> None:
    cr = tmp_path / "sd.yaml"
    cr.write_text("apiVersion: specdeploy.io/v1alpha1\nkind: SpeculativeDeployment\nmetadata: {name: x}\n"
                  "spec:\n  target: {model: a/b}\n  draft: {method: Eagle9, model: c/d}\n  replicas: -1\n")
    result = run("plan", "-f", str(cr), "-o", "json")
    assert result.returncode == 1
    findings = json.loads(result.stdout)["results"][0]["findings"]
    assert {"spec.draft.method", "spec.replicas"} <= {f["field"] for f in findings}
    assert {f["stage"] for f in findings} == {"spec"}


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


def _medusa_cr(tmp_path: Path, image: str, **extra: str) -> Path:
    cr = tmp_path / "medusa.yaml"
    draft = json.loads((SYNTHETIC / "medusa-llama3-8b.json").read_text())
    target = json.loads((MODEL_CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    cr.write_text(yaml.safe_dump({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "medusa"},
        "spec": {"image": image, **extra, "target": {"model": "meta-llama/Llama-3.1-8B-Instruct", "config": target},
                 "draft": {"method": "medusa", "model": "org/medusa", "numSpeculativeTokens": 3, "config": draft}}}))
    return cr


@pytest.mark.parametrize(("image", "code", "version"), [
    ("vllm/vllm-openai:v0.32.0", 0, "0.32.0"),
    ("vllm/vllm-openai:v0.33.0", 1, "0.33.0"),
    ("registry.example.com:5000/vllm/vllm-openai:v0.33.0-cu130", 1, "0.33.0"),
    ("vllm/vllm-openai:0.33.0", 1, "0.33.0"),
])
def test_the_image_tag_picks_the_rules_medusa_is_gone_from_0_33(tmp_path: Path, image: str, code: int, version: str) -> None:
    result = run("plan", "-f", str(_medusa_cr(tmp_path, image)), "-o", "json")
    assert result.returncode == code, result.stdout + result.stderr
    (out,) = json.loads(result.stdout)["results"]
    assert out["vllmVersion"] == version
    if code:
        (finding,) = [f for f in out["findings"] if f["severity"] == "error"]
        assert finding["code"] == "method-unsupported" and finding["field"] == "spec.draft.method"
        assert "vLLM 0.33.0" in finding["message"] and finding["stage"] == "pair"
    else:
        assert out["plan"]["vllmVersion"] == "0.32.0"


@pytest.mark.parametrize("image", ["vllm/vllm-openai:latest", "vllm/vllm-openai:nightly", "vllm/vllm-openai@sha256:" + "a" * 64,
                                   "vllm/vllm-openai:v0.99.0"])
def test_an_image_with_no_rule_set_is_judged_by_the_newest_with_a_warning(tmp_path: Path, image: str) -> None:
    from specdeploy.vllm import NEWEST_VERSION

    result = run("plan", "-f", str(_medusa_cr(tmp_path, image)), "-o", "json")
    (out,) = json.loads(result.stdout)["results"]
    assert out["vllmVersion"] == NEWEST_VERSION
    (warning,) = [f for f in out["findings"] if f["code"] == "vllm-version-unknown"]
    assert warning["severity"] == "warning" and warning["field"] == "spec.image" and warning["stage"] == "spec"


def test_vllm_version_overrides_the_image_tag(tmp_path: Path) -> None:
    result = run("plan", "-f", str(_medusa_cr(tmp_path, "my-registry/vllm:prod", vllmVersion="0.32.0")), "-o", "json")
    assert result.returncode == 0, result.stdout
    (out,) = json.loads(result.stdout)["results"]
    assert out["vllmVersion"] == "0.32.0" and not [f for f in out["findings"] if f["code"] == "vllm-version-unknown"]


@pytest.mark.parametrize(("flag", "code"), [(("--vllm-version", "0.32.0"), 1), (("--vllm-version", "0.33.0"), 0),
                                            (("--image", "vllm/vllm-openai:v0.33.0"), 0)])
def test_validate_judges_a_key_only_0_33_has_by_the_chosen_release(tmp_path: Path, flag: tuple[str, str], code: int) -> None:
    """draft_lm_head_quantization is a 0.33.0 SpeculativeConfig key: 0.32.0 refuses it as unknown."""
    cr = tmp_path / "sd.yaml"
    target = json.loads((MODEL_CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    draft = json.loads((MODEL_CONFIGS / "specforge__llama3-8B-eagle3.json").read_text())
    draft["draft_vocab_size"] = target["vocab_size"]  # shares the target's lm_head, which the key needs
    version = flag[1].rsplit("v", 1)[-1]
    cr.write_text(yaml.safe_dump({"spec": {"vllmVersion": version, "target": {"model": "t/t", "config": target},
                                       "draft": {"method": "eagle3", "model": "d/d", "numSpeculativeTokens": 3, "config": draft,
                                                 "speculativeConfig": {"draft_lm_head_quantization": "fp8"}}}}))
    result = run("plan", "-f", str(cr), "-o", "json")
    assert result.returncode == code, result.stdout
    if code:
        assert json.loads(result.stdout)["results"][0]["findings"][0]["field"] == "spec.draft.speculativeConfig.draft_lm_head_quantization"
    target_file, draft_file = tmp_path / "t.json", tmp_path / "d.json"
    target_file.write_text(json.dumps(target))
    draft_file.write_text(json.dumps(draft))
    validated = run("validate", "--target", str(target_file), "--draft", str(draft_file), "--method", "eagle3",
                    "--num-speculative-tokens", "3", *flag, "-o", "json")
    assert json.loads(validated.stdout)["vllmVersion"] == version


@pytest.mark.parametrize("unjudged, status", [(False, 0), (True, 2)])
def test_a_closed_pipe_ends_the_command_quietly_with_its_verdict(tmp_path: Path, unjudged: bool, status: int) -> None:
    """`specdeploy plan -f x | head -1`: no traceback, no error message, and the verdict's exit
    status (a stream it cannot judge, a ConfigMap missing, still fails under pipefail). The stream
    plans to more than a pipe holds, so the reader's close meets a writer still writing."""
    example = (ROOT / "examples" / "qwen3-8b-ngram.yaml").read_text()
    copies = [example.replace("name: qwen3-8b-ngram", f"name: qwen3-8b-ngram-{i}") for i in range(40)]
    if unjudged:
        copies.append((ROOT / "examples" / "llama-3.1-70b-eagle3.yaml").read_text())
    stream = tmp_path / "stream.yaml"
    stream.write_text("\n---\n".join(copies))
    process = subprocess.Popen([EXE, "plan", "-f", str(stream)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does once it has its line
    errors = process.stderr.read().decode()
    assert process.wait(timeout=120) == status
    assert "Traceback" not in errors and "BrokenPipe" not in errors and "Errno 32" not in errors


def test_plan_f_reads_a_directory_as_kubectl_does(tmp_path: Path) -> None:
    """Every .json/.yaml/.yml file directly in it, in name order; other files are not manifests."""
    examples = ROOT / "examples"
    for name in ("qwen3-8b-ngram.yaml", "llama-3.1-8b-eagle3.yaml"):
        shutil.copy(examples / name, tmp_path / name)
    (tmp_path / "README.md").write_text("not a manifest: {")
    result = run("plan", "-f", str(tmp_path), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)["results"]] == ["llama-8b-eagle3", "qwen3-8b-ngram"]
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = run("plan", "-f", str(empty))
    assert refused.returncode == 2 and "holds no .json, .yaml, .yml file" in refused.stderr


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--vllm-version", "latest-ish", "expected a vLLM release as X.Y.Z"),
    ("--num-speculative-tokens", "-3", "--num-speculative-tokens: must be 'auto' or an integer from 1 to 64"),
    ("--image", "bad image", "--image: must not contain whitespace"),
])
def test_a_flag_value_the_spec_refuses_is_a_usage_error_naming_the_flag(flag: str, value: str, words: str) -> None:
    result = run("validate", "--target", K3, "--method", "ngram", flag, value)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "String should match pattern" not in result.stderr


def test_the_readme_says_how_to_get_the_cli_and_that_way_works() -> None:
    """`make venv` puts the console script in .venv/bin (the one these tests run); pipx installs
    the same entry point."""
    root = ROOT
    readme = (root / "README.md").read_text()
    assert ".venv/bin/specdeploy" in readme and "pipx install ." in readme
    import tomllib

    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"] == {"specdeploy": "specdeploy.cli:main"}
    assert Path(EXE).parent == Path(sys.executable).parent and Path(EXE).name == "specdeploy"
    assert run("--version").returncode == 0
