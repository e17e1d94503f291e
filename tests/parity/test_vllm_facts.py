"""The facts the operator reads for the installed vLLM release must be that release's own.

Regenerates the data from the installed vLLM with the refresh script, in a process of its own
(the memory judge's stand-ins in this one make modules importable that are not on the CPU
build, e.g. `torchvision`, which would change `pp_source`), and compares it with the committed `specdeploy/vllm/data/<version>.json`: a release whose data is
stale, or that has no data file at all, fails here. Runs once per vLLM venv of the matrix."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "refresh_vllm_facts.py"

vllm = pytest.importorskip("vllm")


def _load_script():
    spec = importlib.util.spec_from_file_location("refresh_vllm_facts", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict:
    output = tmp_path_factory.mktemp("facts") / "fresh.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--output", str(output)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(output.read_text())


def test_the_installed_release_has_a_rule_set() -> None:
    from specdeploy.vllm import SUPPORTED_VERSIONS

    assert vllm.__version__ in SUPPORTED_VERSIONS, f"vLLM {vllm.__version__} has no rule set: run {SCRIPT.name} and add it"


def test_committed_facts_are_fresh(fresh: dict) -> None:
    script = _load_script()
    path = script.DATA_DIR / f"{fresh['vllm_version']}.json"
    committed = json.loads(path.read_text())
    for key in fresh:
        if key == "architectures":
            missing = sorted(set(fresh[key]) - set(committed[key]))
            extra = sorted(set(committed[key]) - set(fresh[key]))
            assert not missing and not extra, f"registry changed (+{missing} -{extra}): rerun {SCRIPT.name}"
        assert committed[key] == fresh[key], f"{key} is stale for vLLM {fresh['vllm_version']}: rerun {SCRIPT.name}"
    assert script.render(fresh) == path.read_text()


def test_facts_answer_what_vllm_answers_live() -> None:
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.models.registry import ModelRegistry

    from specdeploy.vllm import rule_set

    facts = rule_set(vllm.__version__)
    assert facts.version == vllm.__version__
    assert all(facts.is_supported_architecture(a) for a in ModelRegistry.get_supported_archs())
    assert not facts.is_supported_architecture("KimiK3DSpark5MLADraftModel")
    assert set(facts.speculative_fields) == {f.name for f in SpeculativeConfig.__dataclass_fields__.values() if f.init}


def test_batch_defaults_are_what_vllm_picks_on_each_catalog_gpu() -> None:
    """Each catalog product's batch limits from the release data equal vLLM's own
    `EngineArgs.get_batch_defaults` (engine/arg_utils.py) on a platform reporting that product's
    memory and each name the driver may give it (`vllm serve`: the OPENAI_API_SERVER context)."""
    from unittest import mock

    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    from specdeploy.planning.batch import gpu_names
    from specdeploy.planning.gpus import CATALOG
    from specdeploy.vllm import rule_set

    facts, platform = rule_set(vllm.__version__), type(current_platform)
    for product in CATALOG.values():
        for name in gpu_names(product):
            with mock.patch.object(platform, "is_cpu", lambda *a, **k: False), \
                    mock.patch.object(platform, "get_device_total_memory", lambda *a, **k: int(product.memory_gib * 1024**3)), \
                    mock.patch.object(platform, "get_device_name", lambda *a, n=name, **k: n):
                tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
            ours = facts.batch_defaults(product.memory_gib, [name])
            theirs = (tokens[UsageContext.OPENAI_API_SERVER], seqs[UsageContext.OPENAI_API_SERVER])
            assert (ours.max_num_batched_tokens, ours.max_num_seqs) == theirs, f"{product.key} as {name!r}"
