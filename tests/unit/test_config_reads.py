"""A model's config is read once, into its geometry (issue 34): no module outside geometry/ and
sources/ indexes a raw config. vLLM's per-model layer tables live in vllm/ and are applied to a
config by geometry/ alone (geometry/splits.py, model_geometry.py); planning and the rules read
the geometry's typed fields.

Exempt: preflight/vllm_judge.py, which runs inside the image under its own vLLM and imports
nothing of ours (it reads the configs it is handed, as vLLM will)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specdeploy.geometry.bounds import BOUNDED_KEYS

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "specdeploy"
READERS = {"geometry", "sources", "vllm"}  # vllm/: the tables, applied by geometry/ only
EXEMPT = {"preflight/vllm_judge.py"}
# Sections of a config.json (or of vLLM's config object) that only a reader may open.
RAW_SECTIONS = {"text_config", "vision_config", "llm_config", "hf_config", "hf_text_config", "quantization_config"}
# Keys only a model config has: every key bounds.py checks, the sections, and the count keys.
CONFIG_KEYS = (BOUNDED_KEYS | RAW_SECTIONS | {"model_type", "architectures", "torch_dtype"}) - {"model", "revision"}
# Parameter names by which a vllm/ function says it takes a config.
CONFIG_PARAMETERS = {"config", "text", "text_config", "hf_config", "section", "obj"}


def _key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_config_key(key: str | None) -> bool:
    return key is not None and (key in CONFIG_KEYS or key.startswith("num_"))


def raw_config_reads(tree: ast.AST) -> list[str]:
    """`x["key"]`, `x.get("key")` of a model-config key, and `.text_config`-style sections."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_config_key(_key(node.slice)):
            found.append(f"line {node.lineno}: [{_key(node.slice)!r}]")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault")
              and node.args and _is_config_key(_key(node.args[0]))):
            found.append(f"line {node.lineno}: .{node.func.attr}({_key(node.args[0])!r})")
        elif isinstance(node, ast.Attribute) and node.attr in RAW_SECTIONS:
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


def _config_taking_functions() -> dict[str, set[str]]:
    """Per vllm/ module, the functions that take a config (by their parameters' names)."""
    out: dict[str, set[str]] = {}
    for path in (PACKAGE / "vllm").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                 and {a.arg for a in node.args.args} & CONFIG_PARAMETERS}
        out[f"specdeploy.vllm.{path.stem}"] = names
    return out


def config_reader_imports(tree: ast.AST, readers: dict[str, set[str]]) -> list[str]:
    """Imports of a vllm/ function that reads a config (only geometry/ may apply the tables)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in readers:
            found += [f"line {node.lineno}: {node.module}.{a.name}" for a in node.names if a.name in readers[node.module]]
    return found


def _outside_readers() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts
                  and p.relative_to(PACKAGE).parts[0] not in READERS and str(p.relative_to(PACKAGE)) not in EXEMPT)


@pytest.mark.parametrize("path", _outside_readers(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outside_geometry_and_sources_reads_a_raw_config(path: Path) -> None:
    tree = ast.parse(path.read_text())
    found = raw_config_reads(tree) + config_reader_imports(tree, _config_taking_functions())
    assert not found, (f"{path.relative_to(PACKAGE)} reads a model config itself ({'; '.join(found)}): read it once in "
                       f"geometry/ into a typed field of Geometry (or CacheLayout) and use that")


@pytest.mark.parametrize("source", [
    'def f(model):\n    return model.text_config.get("sliding_window", 0)\n',
    'def f(text):\n    return text["num_hidden_layers"]\n',
    'def f(config):\n    return config.get("num_experts")\n',
    'from specdeploy.vllm.hf_config import config_value\n',
    'from specdeploy.vllm.tp_splits import dense_mlp_failures\n',
])
def test_the_check_catches_each_kind_of_raw_read(source: str) -> None:
    """The guard can fail: each way a module could read a config itself is caught."""
    tree = ast.parse(source)
    assert raw_config_reads(tree) + config_reader_imports(tree, _config_taking_functions())


@pytest.mark.parametrize("source", [
    'def f(spec):\n    return spec.draft.speculative_config.get("draft_lm_head_quantization")\n',
    'from specdeploy.vllm.tp_splits import expert_parallel\n',
    'def f(model):\n    return model.layout.sliding_window\n',
])
def test_the_check_lets_typed_reads_and_the_spec_pass(source: str) -> None:
    tree = ast.parse(source)
    assert not raw_config_reads(tree) + config_reader_imports(tree, _config_taking_functions())
