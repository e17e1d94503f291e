"""A speculative method a vLLM general plugin registers is judged by the image's own vLLM: the
preflight judge loads the image's general plugins as `vllm serve` does, so the plugin's own
SpeculatorConfig accepts or refuses. The plugin is a throwaway package written here (a module and
a `*.dist-info` whose entry_points.txt names it in group `vllm.general_plugins`), on the
PYTHONPATH of the judge's process, as an image would carry it in site-packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

from specdeploy.preflight import vllm_judge  # noqa: E402
from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set  # noqa: E402

_release = next((v for v in SUPPORTED_VERSIONS if vllm.__version__.startswith(v)), None)
if _release is None or not rule_set(_release).plugin_methods:
    pytest.skip(f"vLLM {vllm.__version__} lets no plugin register a speculative method "
                "(no register_speculative_method): nothing of a plugin's to judge", allow_module_level=True)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
METHOD = "sdtest_lookup"
MOST_K = 4
# The plugin: the n-gram lookup under its own name, taking at most MOST_K tokens (its own check).
PLUGIN = f'''
from vllm.v1.worker.gpu.spec_decode.ngram.config import NgramSpeculatorConfig
from vllm.v1.worker.gpu.spec_decode.speculator_config import register_speculative_method


class LookupConfig(NgramSpeculatorConfig):
    @classmethod
    def configure(cls, spec):
        if spec.num_speculative_tokens > {MOST_K}:
            raise ValueError("{METHOD} drafts at most {MOST_K} tokens, got " + str(spec.num_speculative_tokens))
        super().configure(spec)


def register():
    register_speculative_method("{METHOD}", LookupConfig)
'''


def _plugin(root: Path) -> Path:
    site = root / "site"
    (site / "sdtest_plugin").mkdir(parents=True)
    (site / "sdtest_plugin" / "__init__.py").write_text(PLUGIN)
    info = site / "sdtest_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sdtest-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nsdtest = sdtest_plugin:register\n")
    return site


def _judge(tmp_path: Path, k: int, *, with_plugin: bool = True) -> tuple[int, dict]:
    model = tmp_path / "target"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((FIXTURES / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    request = tmp_path / "request.json"
    speculative = {"method": METHOD, "num_speculative_tokens": k}
    request.write_text(json.dumps({"args": [TARGET, "--speculative-config", json.dumps(speculative)], "models": {TARGET: str(model)}, "gpu": None}))
    path = [str(_plugin(tmp_path))] if with_plugin else []
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(path + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    done = subprocess.run([sys.executable, vllm_judge.__file__, str(request)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    assert done.stdout.strip(), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_the_images_plugin_method_is_accepted_where_its_config_accepts(tmp_path: Path) -> None:
    code, verdict = _judge(tmp_path, MOST_K)
    assert (code, verdict["ok"], verdict["error"]) == (0, True, None), verdict


def test_the_images_plugin_refuses_in_its_own_words(tmp_path: Path) -> None:
    code, verdict = _judge(tmp_path, MOST_K + 1)
    assert (code, verdict["ok"], verdict["stage"]) == (1, False, "config"), verdict
    assert f"{METHOD} drafts at most {MOST_K} tokens" in verdict["error"]


def test_without_the_plugin_the_same_method_is_unknown_to_vllm(tmp_path: Path) -> None:
    code, verdict = _judge(tmp_path, MOST_K, with_plugin=False)
    assert (code, verdict["ok"], verdict["stage"]) == (1, False, "config"), verdict
    assert f"Unknown speculative method '{METHOD}'" in verdict["error"]
