"""The config classes' generated data (geometry/hf_classes.py) against transformers itself: the
data file is what the installed transformers gives, every fixture config reads the same through
both, and `specdeploy validate` of a pair whose classes the data decides never imports transformers."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specdeploy.geometry import model_geometry
from specdeploy.geometry.hf_classes import DATA, class_for, needs_transformers, table
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import FIXTURES
from tests.hf_reference import as_hf_config, reference_class, reference_parse

ROOT = Path(__file__).resolve().parents[2]
FACTS = rule_set(DEFAULT_VERSION)
# Bookkeeping every transformers instance carries and no rule reads; partial_rotary_factor is
# copied out of rope_parameters by some classes and read by no rule either.
IGNORED = {"_name_or_path", "transformers_version", "output_attentions", "id2label", "label2id", "dtype", "torch_dtype",
           "partial_rotary_factor"}
CONFIGS = sorted(p for p in FIXTURES.rglob("*.json") if p.parent.name in ("model-configs", "held-out", "synthetic"))


_LAST: list[Any] = [None]  # the transformers object behind the last reference parse


def _properties(section: str) -> set[str]:
    """Property names of the transformers class behind `section` of the last reference parse."""
    config = _LAST[0]
    if not hasattr(config, "get_text_config"):
        return set()
    sub = config.get_text_config() if section == "text_config" else getattr(config, section, None)
    cls = type(sub)
    return {name for name in dir(cls) if isinstance(getattr(cls, name, None), property)} if sub is not None else set()


def _reference(raw: dict[str, Any]) -> Any:
    """The parse the verdict made before the data: transformers' class, refusals as ConfigRejected."""
    cls = reference_class(raw.get("model_type"))
    try:
        _LAST[0] = reference_parse(raw)
        return as_hf_config(_LAST[0])
    except Exception as exc:
        raise model_geometry.ConfigRejected(cls.__name__, model_geometry._reason(exc)) from exc


def _read(raw: dict[str, Any], parse: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    model_geometry._MEMO.clear()
    monkeypatch.setattr(model_geometry, "parse_config", parse)
    geometry, findings = model_geometry._read_geometry(raw, "spec.target.config", FACTS)
    return geometry, [f.message.split(": ", 1)[-1] for f in findings]


def _plain(section: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in section.items() if key not in IGNORED}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_fixture_reads_the_same_through_the_data_and_through_transformers(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        pytest.skip("not a config object")
    _LAST[0] = None
    ours, our_findings = _read(raw, model_geometry.parse_config, monkeypatch)
    theirs, their_findings = _read(raw, _reference, monkeypatch)
    assert our_findings == their_findings
    if ours is None:
        return
    for field in dataclasses.fields(ours):
        mine, reference = getattr(ours, field.name), getattr(theirs, field.name)
        if field.name in ("text_config", "vision_config"):
            # from_transformers (the fallback, and the reference) adds the properties of transformers'
            # object, as getattr on it saw them; the data has the fields only
            properties = _properties(field.name)
            assert ({k: v for k, v in _plain(mine).items() if k not in properties}
                    == {k: v for k, v in _plain(reference).items() if k not in properties}), field.name
        elif field.name == "text_config_keys":  # the keys of text_config above, compared the same way
            properties = _properties("text_config") | set(IGNORED)
            assert mine - properties == reference - properties, field.name
        else:
            assert mine == reference, field.name


def test_the_pairs_the_benchmark_times_are_decided_by_the_data_alone() -> None:
    """Llama's head_dim/num_key_value_heads and DeepseekV3's MLA dimensions are derived by the
    data's formulas; a Qwen3 config without layer_types needs transformers' own class."""
    for name in ("model-configs/meta-llama__Llama-3.1-70B-Instruct", "model-configs/meta-llama__Llama-3.2-1B-Instruct",
                 "synthetic/k3-dspark-block5"):
        raw = json.loads((FIXTURES / f"{name}.json").read_text())
        assert not needs_transformers(class_for(raw["model_type"]) or "DeepseekV3Config", raw), name
    qwen3 = json.loads((FIXTURES / "model-configs" / "Qwen__Qwen3-8B.json").read_text())
    assert needs_transformers("Qwen3Config", {k: v for k, v in qwen3.items() if k != "layer_types"})


def test_validate_does_not_import_transformers() -> None:
    """The whole process: the CLI's verdict for a Llama pair and the Kimi-K3 DSpark pair."""
    script = ("import sys, runpy; sys.argv = ['specdeploy'] + sys.argv[1:]\n"
              "try:\n    runpy.run_module('specdeploy.cli', run_name='__main__')\n"
              "except SystemExit as exit:\n    print('TRANSFORMERS' if 'transformers' in sys.modules else 'CLEAN', exit.code)\n")
    for target, draft, method in (("model-configs/meta-llama__Llama-3.1-70B-Instruct", "model-configs/meta-llama__Llama-3.2-1B-Instruct", "draft_model"),
                                  ("model-configs/moonshotai__Kimi-K3", "synthetic/k3-dspark-block5", "dspark")):
        result = subprocess.run([sys.executable, "-c", script, "validate", "--target", str(FIXTURES / f"{target}.json"),
                                 "--draft", str(FIXTURES / f"{draft}.json"), "--method", method, "--tp", "8",
                                 "--num-speculative-tokens", "4", "-o", "json"], capture_output=True, text=True, cwd=ROOT)
        assert result.stdout.strip().splitlines()[-1] == "CLEAN 0", result.stdout[-500:] + result.stderr[-2000:]


def test_the_data_file_is_what_the_installed_transformers_gives() -> None:
    """Stale data (transformers upgraded, generator changed) fails here: rerun scripts/gen_hf_configs.py."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_hf_configs
    finally:
        sys.path.pop(0)
    assert json.loads(json.dumps(gen_hf_configs.generate())) == json.loads(DATA.read_text())
    assert table()["transformers_version"] == __import__("transformers").__version__


MUTATED = ("meta-llama__Llama-3.1-8B-Instruct", "openai__gpt-oss-120b", "deepseek-ai__DeepSeek-V2-Lite",
           "mistralai__Mixtral-8x22B-Instruct-v0.1", "moonshotai__Kimi-K2-Instruct")
VALUES = ("x", 5, 2.5, True, None, [1], {}, -1, 0)


@pytest.mark.parametrize("name", MUTATED)
def test_the_data_refuses_what_transformers_refuses(name: str) -> None:
    """Every top-level key of a config the data decides, set in turn to a string, ints, a float, a
    bool, null, a list and an object: the data's classes accept exactly what transformers' accept
    (its @strict types, intervals, architecture and layer-type validators, derivations)."""
    from specdeploy.geometry.hf_classes import parse

    raw = json.loads((FIXTURES / "model-configs" / f"{name}.json").read_text())
    cls = class_for(raw["model_type"])
    disagree = []
    for key in raw:
        for value in VALUES:
            mutated = {**raw, key: value}
            if needs_transformers(cls, mutated):
                continue
            outcomes = []
            for build in (lambda config: parse(cls, config), reference_parse):
                try:
                    build(mutated)
                    outcomes.append(True)
                except Exception:
                    outcomes.append(False)
            if outcomes[0] != outcomes[1]:
                disagree.append((key, value, "accepted by the data only" if outcomes[0] else "accepted by transformers only"))
    assert disagree == []
