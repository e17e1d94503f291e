"""`specdeploy validate` with Hub repo ids, against a local Hub stand-in: configs, the
safetensors index size, revisions, the HF_TOKEN header, and which failures are transient."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_config
from tests.integration.fake_hub import FakeHub

EXE = shutil.which("specdeploy", path=str(Path(sys.executable).parent)) or "specdeploy"


@pytest.fixture
def hub(tmp_path: Path):
    with FakeHub() as fake:
        fake.add_json("meta-llama/Llama-3.1-70B-Instruct", "config.json", load_config("meta-llama__Llama-3.1-70B-Instruct"))
        fake.add_json("meta-llama/Llama-3.1-70B-Instruct", "model.safetensors.index.json",
                      {"metadata": {"total_size": 141_107_412_992}, "weight_map": {}})
        fake.add_json("yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "config.json", load_config("specforge__llama3-8B-eagle3"))
        yield fake


def validate(hub: FakeHub, tmp_path: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([EXE, "validate", *args, "-o", "json"], capture_output=True, text=True, env=env, timeout=120)


def test_hub_repo_ids_are_read_and_the_index_size_replaces_the_estimate(hub: FakeHub, tmp_path: Path) -> None:
    result = validate(hub, tmp_path, "--target", "meta-llama/Llama-3.1-70B-Instruct", "--draft", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
                      "--method", "eagle3", "--num-speculative-tokens", "3", "--gpu", "H100-80GB", "--max-model-len", "8192",
                      token="hf_secret_value")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    memory = plan["memory"]
    assert memory["weightsSource"] == "safetensors index"
    assert memory["targetWeightsGiB"] == pytest.approx(141_107_412_992 / plan["tensorParallelSize"] / 2**30, abs=0.01)
    assert any(auth == "Bearer hf_secret_value" for _, _, auth in hub.requests)
    assert "hf_secret_value" not in result.stdout + result.stderr


def test_revision_is_requested(hub: FakeHub, tmp_path: Path) -> None:
    validate(hub, tmp_path, "--target", "meta-llama/Llama-3.1-70B-Instruct", "--revision", "v2", "--method", "ngram",
             "--num-speculative-tokens", "3")
    assert any("/resolve/v2/config.json" in path for _, path, _ in hub.requests)


def test_unknown_repo_is_a_permanent_error_naming_the_field(hub: FakeHub, tmp_path: Path) -> None:
    result = validate(hub, tmp_path, "--target", "nobody/nothing", "--method", "ngram", "--num-speculative-tokens", "3")
    assert result.returncode == 2
    assert "--target" in result.stderr and "not found on the Hub" in result.stderr and "HF_TOKEN" in result.stderr


PROBE = """
import sys
from specdeploy.sources import SourceInvalid, SourceUnavailable, load_model_ref
try:
    load_model_ref(sys.argv[1], field="spec.target.model")
except (SourceInvalid, SourceUnavailable) as exc:
    print(type(exc).__name__, exc.field)
"""


@pytest.mark.parametrize("status, kind", [(503, "SourceUnavailable"), (None, "SourceInvalid")])
def test_outage_is_transient_and_a_missing_repo_is_permanent(hub: FakeHub, tmp_path: Path, status: int | None, kind: str) -> None:
    """The operator retries SourceUnavailable with backoff and stops on SourceInvalid."""
    hub.status_override = status
    repo = "meta-llama/Llama-3.1-70B-Instruct" if status else "nobody/nothing"
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run([sys.executable, "-c", PROBE, repo], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.split() == [kind, "spec.target.model"], result.stderr
