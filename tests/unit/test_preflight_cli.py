"""`specdeploy preflight`: the installed console script, as a user runs it, in a subprocess.

The run that needs vLLM uses the repository's vLLM venv (.venv-vllm, built by `make test`)
and is skipped, saying so, without it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from specdeploy.vllm import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("specdeploy"))
LLAMA = ROOT / "examples" / "llama-3.1-8b-eagle3.yaml"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "preflight", *args], capture_output=True, text=True, timeout=timeout)


def test_render_prints_the_job_and_config_map_the_operator_creates() -> None:
    result = run("-f", str(LLAMA), "--render", "-o", "yaml")
    assert result.returncode == 0, result.stderr
    config_map, job = yaml.safe_load_all(result.stdout)
    assert (config_map["kind"], job["kind"]) == ("ConfigMap", "Job")
    kubernetes_validate.validate(job, "1.35.0", strict=True)
    kubernetes_validate.validate(config_map, "1.35.0", strict=True)
    cr = yaml.safe_load(LLAMA.read_text())
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == cr["spec"].get("image", DEFAULT_IMAGE)
    assert "def main" in config_map["data"]["vllm_judge.py"]  # the judge itself, readable
    assert json.loads(config_map["data"]["request.json"])["args"][0] == cr["spec"]["target"]["model"]


def test_a_plugin_method_plan_does_not_judge_is_what_the_preflight_judges(tmp_path: Path) -> None:
    """`plan -f` gives no manifests for it (exit 2): the preflight is the way to a verdict."""
    cr = yaml.safe_load(LLAMA.read_text())
    cr["spec"]["draft"]["method"] = "team_tree_drafter"
    path = tmp_path / "plugin.yaml"
    path.write_text(yaml.safe_dump(cr))
    result = run("-f", str(path), "--render", "-o", "yaml")
    assert result.returncode == 0, result.stderr
    config_map, job = yaml.safe_load_all(result.stdout)
    args = json.loads(config_map["data"]["request.json"])["args"]
    assert json.loads(args[args.index("--speculative-config") + 1])["method"] == "team_tree_drafter"
    assert job["kind"] == "Job"


@pytest.mark.parametrize("flags", [[], ["--render", "--python", "python3"]])
def test_exactly_one_of_python_and_render(flags: list[str]) -> None:
    result = run("-f", str(LLAMA), *flags)
    assert result.returncode == 2 and "--python" in result.stderr and "--render" in result.stderr


def test_a_python_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    result = run("-f", str(LLAMA), "--python", str(tmp_path / "no-python"), "-o", "json")
    assert result.returncode == 2 and "--python" in result.stderr
    assert json.loads(result.stdout)["ok"] is False


def test_a_spec_the_fast_rules_refuse_is_not_judged(tmp_path: Path) -> None:
    cr = yaml.safe_load(LLAMA.read_text())
    cr["spec"]["parallelism"] = {"tensorParallelSize": 5}  # 32 heads: no
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cr))
    result = run("-f", str(path), "--python", sys.executable, "-o", "json")
    assert result.returncode == 2
    (only,) = json.loads(result.stdout)["results"]
    assert only["ok"] is False and only["stage"] is None and "specdeploy plan -f" in only["error"]


@pytest.mark.needs_vllm_venv
def test_the_images_vllm_refuses_what_the_newest_rules_accept(tmp_path: Path) -> None:
    """A tag that names no release: the fast rules judge with their newest rule set, which knows
    a speculative-config key that this vLLM's SpeculativeConfig refuses."""
    cr = yaml.safe_load(LLAMA.read_text())
    cr = copy.deepcopy(cr)
    cr["spec"]["image"] = "registry.example/team/vllm:fast-build"
    cr["spec"]["draft"]["speculativeConfig"] = {"disable_lookahead_block_hashes": True}
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(cr))
    result = run("-f", str(path), "--python", str(VLLM_PYTHON), "-o", "json", timeout=600)
    assert result.returncode == 1, result.stderr
    (only,) = json.loads(result.stdout)["results"]
    assert (only["name"], only["ok"], only["stage"]) == (cr["metadata"]["name"], False, "config")
    assert "disable_lookahead_block_hashes" in only["error"] and only["vllmVersion"]


# The options whose rules vLLM 0.34.0 changed (issue 30), under an image whose tag names no
# release: the newest rules guess, refuse each, and only the image's own vLLM may say otherwise.
CUSTOM_IMAGE = "registry.example/team/vllm:fast-build"
GUESSED: dict[str, tuple[str, dict[str, object]]] = {
    "ngram-parallel": ("qwen3-8b-ngram.yaml", {"parallel_drafting": True}),
    "eagle3-parallel": ("llama-3.1-8b-eagle3.yaml", {"parallel_drafting": True}),
    "ngram-unpadded": ("qwen3-8b-ngram.yaml", {"disable_padded_drafter_batch": True}),
    "draft-hetero": ("qwen3-32b-draft-model.yaml", {"use_heterogeneous_vocab": True}),
    "eagle3-hetero": ("llama-3.1-8b-eagle3.yaml", {"use_heterogeneous_vocab": True}),  # 0.32.0: draft_model only
}


def guessed_stream(tmp_path: Path) -> Path:
    docs = []
    for name, (example, options) in GUESSED.items():
        cr = yaml.safe_load((ROOT / "examples" / example).read_text())
        cr["metadata"]["name"] = name
        cr["spec"]["image"] = CUSTOM_IMAGE
        cr["spec"]["draft"].setdefault("speculativeConfig", {}).update(options)
        docs.append(cr)
    path = tmp_path / "guessed.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_a_guessed_refusal_renders_the_job_for_the_images_own_plan(tmp_path: Path) -> None:
    result = run("-f", str(guessed_stream(tmp_path)), "--render", "-o", "json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    assert [i["kind"] for i in items] == ["ConfigMap", "Job"] * len(GUESSED)
    args = json.loads(items[0]["data"]["request.json"])["args"]
    assert json.loads(args[args.index("--speculative-config") + 1])["parallel_drafting"] is True


def test_the_text_report_names_the_guess_beside_the_images_answer(tmp_path: Path) -> None:
    """A Python with no vLLM: the judge cannot run, and the guess stays a guess, said as one."""
    cr = yaml.safe_load((ROOT / "examples" / "qwen3-8b-ngram.yaml").read_text())
    cr["spec"]["image"] = CUSTOM_IMAGE
    cr["spec"]["draft"]["speculativeConfig"]["parallel_drafting"] = True
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(cr))
    result = run("-f", str(path), "--python", sys.executable)
    assert result.returncode == 2, result.stderr
    verdict, guess = result.stdout.splitlines()
    assert verdict.startswith(f"default/{cr['metadata']['name']}: NOT JUDGED: the judge could not run")
    assert guess.startswith("  the rules guessed for the image refused it: spec.draft.speculativeConfig.parallel_drafting: vLLM 0.34.0")


@pytest.mark.needs_vllm_venv
def test_a_custom_tagged_images_own_vllm_decides(tmp_path: Path) -> None:
    """A 0.32.0-based image (the vLLM venv): each spec the guessed 0.34.0 rules refuse gets that
    vLLM's own verdict, with the guess named beside it."""
    result = run("-f", str(guessed_stream(tmp_path)), "--python", str(VLLM_PYTHON), "-o", "json", timeout=900)
    assert result.returncode == 1, result.stderr  # one refusal: the image's own
    results = {r["name"]: r for r in json.loads(result.stdout)["results"]}
    for name in ("ngram-parallel", "eagle3-parallel", "ngram-unpadded", "draft-hetero"):
        assert (results[name]["ok"], results[name]["vllmVersion"]) == (True, "0.32.0"), results[name]
        assert "0.34.0" in results[name]["guess"] and next(iter(GUESSED[name][1])) in results[name]["guess"]
    refused = results["eagle3-hetero"]
    assert (refused["ok"], refused["stage"], refused["vllmVersion"]) == (False, "config", "0.32.0")
    assert "use_heterogeneous_vocab only works with method='draft_model'" in refused["error"]
