"""The flow DESIGN.md draws, as an import rule: each layer imports only the layers below it, the
pure core imports nothing lazily (no cycle hidden inside a function), and only `specdeploy.vllm`
names a vLLM release."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from specdeploy.vllm.methods import accepted_names

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "specdeploy"
# Bottom first. A module may import its own layer and the layers below it, never above.
LAYERS: list[set[str]] = [
    {"findings", "finding_codes"},
    {"vllm"},
    {"api"},
    {"geometry"},
    {"validation"},
    {"planning"},
    {"render"},
    {"pipeline"},
    {"preflight"},  # the in-image judge's request, Job and verdict (its vllm_judge.py imports nothing of ours)
    {"telemetry"},  # pods' /metrics -> status.speculation: pure, beside the flow, under the shell
    {"rollout"},  # draft canaries: both arms' counters -> promote or roll back; the arms' workloads
    {"sources"},
    # stream: plan -f's shell over sources + pipeline; local_judge: the preflight judge under a local Python
    {"controller", "cli", "demo", "emulator", "__main__", "stream", "local_judge"},
]
PURE_CORE = {"findings", "finding_codes", "vllm", "api", "geometry", "validation", "planning", "render", "pipeline", "preflight", "telemetry", "rollout"}
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "__init__"


def _imports(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specdeploy"):
            out.append((node.module, node))
        elif isinstance(node, ast.Import):
            out += [(alias.name, node) for alias in node.names if alias.name.startswith("specdeploy")]
    return out


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_its_own_layer_and_below(path: Path) -> None:
    layer = _layer(path)
    if layer == "__init__":
        return
    assert layer in RANK, f"{layer}/ is not placed in LAYERS: say where it sits in the flow"
    tree = ast.parse(path.read_text())
    for module, node in _imports(tree):
        parts = module.split(".")
        target = parts[1] if len(parts) > 1 else "__init__"
        if target == "__init__":
            continue
        assert target in RANK, f"{module} is not placed in LAYERS"
        assert RANK[target] <= RANK[layer], f"{path.name} ({layer}) imports {module}, a layer above it"


@pytest.mark.parametrize("path", [p for p in _modules() if _layer(p) in PURE_CORE], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_pure_core_imports_at_module_level_only(path: Path) -> None:
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    for _, node in _imports(tree):
        assert id(node) in top_level, f"{path.name}:{node.lineno} imports inside a function (a hidden cycle?)"


def test_only_the_vllm_layer_names_a_vllm_release() -> None:
    release = re.compile(r"(?<![\w.])v?0\.[0-9]{2}\.[0-9]+\b")
    offenders = [str(p.relative_to(PACKAGE)) for p in _modules()
                 if _layer(p) != "vllm" and release.search(p.read_text())]
    assert offenders == []


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    """Every str constant but docstrings."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_only_the_vllm_layer_names_a_speculative_method() -> None:
    """A method's behaviour is a query of specdeploy.vllm.methods, never `method == "<name>"`
    elsewhere: adding a method then touches the table, not every layer."""
    names = set(accepted_names())
    offenders = [f"{p.relative_to(PACKAGE)}:{node.lineno} {node.value!r}" for p in _modules() if _layer(p) != "vllm"
                 for node in _string_constants(ast.parse(p.read_text())) if node.value in names]
    assert offenders == []


def test_planning_gets_the_layout_rules_from_the_pipeline() -> None:
    """The planner searches layouts; which layouts vLLM accepts is validation's to say, handed
    in by `pipeline.evaluate` (planner.LayoutRules). Planning importing validation would make the
    two one layer again."""
    offenders = [f"{p.relative_to(PACKAGE)}: {module}" for p in _modules() if _layer(p) == "planning"
                 for module, _ in _imports(ast.parse(p.read_text())) if module.startswith("specdeploy.validation")]
    assert offenders == []
