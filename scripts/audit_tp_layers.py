#!/usr/bin/env python3
"""List every layer vLLM splits over tensor parallel in the models specdeploy supports, per release.

Why: a width a model's layer splits over TP that the fast rules do not know is a pod vLLM
accepts at config time and that then fails at model load. Reading model files rule by rule
missed sub-modules (shared experts, vision projectors, MTP layers); this walk does not choose.
From each supported architecture's class (vLLM's own registry) it follows every class and
function the source names in vLLM's model and layer packages, and records:

- sites: each parallel layer built (`ColumnParallelLinear`, `RowParallelLinear`,
  `MergedColumnParallelLinear`, `QKVParallelLinear` and their subclasses,
  `VocabParallelEmbedding`/`ParallelLMHead`, the fused MoE layers), with the expressions of
  the widths it splits and its `disable_tp` argument, and each `divide(x, tp)` or
  `x % tp` a class computes;
- builds: each place a class holding sites is constructed, with its arguments (where a shared
  expert gets `moe_intermediate_size * n_shared_experts`, a projector its widths).

Both at their file and line in the release. The result,
operator/specdeploy/vllm/data/parallel_layers-<version>.json, is what the rules are keyed
from: `specdeploy/vllm/parallel_layers.py` says which rule covers each site and build (or why
none is needed), and tests/unit/test_parallel_layers.py fails when a release brings one that
nothing accounts for. Run with each release's python; only the registry is imported:

    .venv-vllm/bin/python scripts/audit_tp_layers.py           # write data for the installed vLLM
    .venv-vllm/bin/python scripts/audit_tp_layers.py --check   # exit 1 if the data is stale
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from specdeploy.vllm.parallel_layers import AUDITED_ARCHITECTURES, audit_path  # noqa: E402

# The layer classes that split a width over TP, and the arguments (position, keyword) holding
# it (model_executor/layers/linear.py, vocab_parallel_embedding.py, fused_moe/layer.py).
SPLIT_ARGS: dict[str, tuple[tuple[int, str], ...]] = {
    "ColumnParallelLinear": ((1, "output_size"),),
    "RowParallelLinear": ((0, "input_size"),),
    "MergedColumnParallelLinear": ((1, "output_sizes"),),
    "QKVParallelLinear": ((2, "total_num_heads"), (3, "total_num_kv_heads")),
    "VocabParallelEmbedding": ((0, "num_embeddings"),),
    "ParallelLMHead": ((0, "num_embeddings"),),
    "FusedMoE": ((3, "intermediate_size"),),
    "SharedFusedMoE": ((3, "intermediate_size"),),
    "FusedMoEFactory": ((2, "intermediate_size"),),
}
# Files that define the layers themselves: their internals are the layers' business, not a model's.
LAYER_FILES = ("vllm/model_executor/layers/linear.py", "vllm/model_executor/layers/vocab_parallel_embedding.py")
FOLLOWED = ("vllm.model_executor.models", "vllm.models", "vllm.model_executor.layers")
NOT_FOLLOWED = ("vllm.model_executor.layers.fused_moe", "vllm.model_executor.layers.quantization",
                "vllm.model_executor.layers.attention", "vllm.model_executor.layers.linear",
                "vllm.model_executor.layers.vocab_parallel_embedding")
TP_WORDS = ("tp_size", "tp_world_size", "tensor_parallel", "tp_rank_size", "get_tensor_model_parallel_world_size")
NOISE_ARGS = {"prefix", "quant_config", "bias", "return_bias", "params_dtype", "skip_bias_add", "org_num_embeddings",
              "padding_size", "gather_output", "input_is_parallel", "reduce_results"}

Definition = ast.ClassDef | ast.FunctionDef


@dataclass
class Source:
    """One parsed vLLM file: its top-level definitions and what its names import."""

    rel: str
    defs: dict[str, Definition] = field(default_factory=dict)
    assigns: dict[str, ast.AST] = field(default_factory=dict)  # module-level name -> its value (layer tables)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)


class Tree:
    """vLLM's installed source, parsed on demand."""

    def __init__(self) -> None:
        import vllm

        self.root = Path(vllm.__file__).resolve().parent
        self.version = vllm.__version__
        self._sources: dict[str, Source | None] = {}

    def module(self, name: str) -> Source | None:
        """The parsed source of a vllm module (None outside vllm or without a file)."""
        if name not in self._sources:
            self._sources[name] = self._parse(name)
        return self._sources[name]

    def _parse(self, name: str) -> Source | None:
        if not name.startswith("vllm."):
            return None
        path = self.root.joinpath(*name.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if not path.is_file():
            return None
        tree = ast.parse(path.read_text(encoding="utf-8"))
        source = Source(str(path.relative_to(self.root.parent)))
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                source.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                source.assigns.update({t.id: node.value for t in targets if isinstance(t, ast.Name)})
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                for alias in node.names:
                    source.imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    source.imports[alias.asname or alias.name] = (alias.name, "")
        return source

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, Definition] | None:
        """Where `name`, as `module` sees it, is defined (through re-exports)."""
        source = self.module(module)
        if source is None or depth > 8:
            return None
        if name in source.defs:
            return module, source.defs[name]
        if name in source.imports:
            target, original = source.imports[name]
            return self.resolve(target, original, depth + 1) if original else None
        return None

    def module_alias(self, module: str, name: str) -> str | None:
        """The module a local name stands for (`from vllm.models import kimi_k3`), if any."""
        source = self.module(module)
        if source is None or name not in source.imports:
            return None
        target, original = source.imports[name]
        full = f"{target}.{original}" if original else target
        return full if self.module(full) is not None else None


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module an `import from` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _text(node: ast.AST | None, limit: int = 160) -> str:
    text = "" if node is None else " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    named = next((k.value for k in call.keywords if k.arg == keyword), None)
    if named is not None:
        return named
    return call.args[position] if len(call.args) > position and not isinstance(call.args[position], ast.Starred) else None


def _assigned_names(node: Definition) -> dict[int, str]:
    """For each call inside an assignment, the name it is assigned to (`self.gate_up_proj = ...`
    gives gate_up_proj); calls elsewhere are named by their function."""
    names: dict[int, str] = {}
    for inner in ast.walk(node):
        if isinstance(inner, ast.FunctionDef):
            for call in ast.walk(inner):
                names.setdefault(id(call), inner.name)
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Assign, ast.AnnAssign)) and inner.value is not None:
            target = inner.targets[0] if isinstance(inner, ast.Assign) else inner.target
            name = target.attr if isinstance(target, ast.Attribute) else _text(target, 60)
            for call in ast.walk(inner.value):
                names[id(call)] = name
    return names


@dataclass
class Found:
    """What one definition builds: its sites, the followed definitions it names, and which of
    those it calls (with the call, for the builds)."""

    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, tuple[str, str], ast.Call]] = field(default_factory=list)
    names: set[tuple[str, str]] = field(default_factory=set)


class Walk:
    """The definitions reachable from an architecture's class, and what each builds."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.found: dict[tuple[str, str], Found] = {}
        self.nodes: dict[tuple[str, str], Definition] = {}

    def target(self, module: str, func: ast.AST) -> tuple[str, Definition] | None:
        """The followed definition a name or `module.Name` expression refers to."""
        if isinstance(func, ast.Name):
            hit = self.tree.resolve(module, func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            alias = self.tree.module_alias(module, func.value.id)
            hit = self.tree.resolve(alias, func.attr) if alias else None
        else:
            return None
        if hit is None or not hit[0].startswith(FOLLOWED) or hit[0].startswith(NOT_FOLLOWED):
            return None
        return hit

    def split_kind(self, module: str, call: ast.Call, depth: int = 0) -> str | None:
        """The parallel layer a call builds ("Sub(Base)" for a subclass), else None."""
        name = _call_name(call)
        if name in SPLIT_ARGS:
            return name
        hit = self.tree.resolve(module, name) if isinstance(call.func, ast.Name) else None
        return self._subclass_kind(hit, depth) if hit else None

    def _class_disables_tp(self, module: str, call: ast.Call) -> str | None:
        """"True" when a subclass's own __init__ passes disable_tp=True to its base (replicated)."""
        hit = self.tree.resolve(module, _call_name(call)) if isinstance(call.func, ast.Name) else None
        if hit is None or not isinstance(hit[1], ast.ClassDef):
            return None
        fixed = any(isinstance(k.value, ast.Constant) and k.value.value is True
                    for inner in ast.walk(hit[1]) if isinstance(inner, ast.Call) for k in inner.keywords if k.arg == "disable_tp")
        return "True" if fixed else None

    def _subclass_kind(self, hit: tuple[str, Definition], depth: int) -> str | None:
        module, node = hit
        if not isinstance(node, ast.ClassDef) or depth > 6:
            return None
        for base in node.bases:
            name = _text(base).split(".")[-1]
            if name in SPLIT_ARGS:
                return f"{node.name}({name})"
            inner = self.tree.resolve(module, name)
            kind = self._subclass_kind(inner, depth + 1) if inner else None
            if kind:
                return f"{node.name}({kind.split('(', 1)[1][:-1]})"
        return None

    def visit(self, module: str, node: Definition) -> Found:
        """Sites, calls and names of one definition (memoised)."""
        key = (module, node.name)
        if key in self.found:
            return self.found[key]
        found = self.found[key] = Found()
        self.nodes[key] = node
        rel = self.tree.module(module).rel
        names = _assigned_names(node)
        counts: Counter[str] = Counter()
        for inner in ast.walk(node):
            site = self._site(module, inner, names)
            if site is not None:
                where = f"{rel}::{node.name}.{site.pop('attr')}"
                counts[where] += 1
                found.sites[where if counts[where] == 1 else f"{where}#{counts[where]}"] = site
            elif isinstance(inner, ast.Call) and (hit := self.target(module, inner.func)):
                found.calls.append((names.get(id(inner), ""), (hit[0], hit[1].name), inner))
            elif isinstance(inner, (ast.Name, ast.Attribute)) and (hit := self.target(module, inner)):
                found.names.add((hit[0], hit[1].name))
            elif isinstance(inner, ast.Name):
                found.names |= self._table_entries(module, inner.id)
        return found

    def _table_entries(self, module: str, name: str) -> set[tuple[str, str]]:
        """The classes a module-level table names (`ALL_DECODER_LAYER_TYPES = {"mamba": ...}`):
        a model that picks its layer classes from one builds them all."""
        source = self.tree.module(module)
        value = source.assigns.get(name) if source else None
        if value is None:
            return set()
        return {(hit[0], hit[1].name) for inner in ast.walk(value)
                if isinstance(inner, (ast.Name, ast.Attribute)) and (hit := self.target(module, inner))}

    def _site(self, module: str, node: ast.AST, names: dict[int, str]) -> dict[str, Any] | None:
        """A split layer, `divide(x, tp)` or `x % tp` at this node, else None."""
        attr = names.get(id(node), "")
        if isinstance(node, ast.Call):
            kind = self.split_kind(module, node)
            if kind:
                disable_tp = next((k.value for k in node.keywords if k.arg == "disable_tp"), None)
                return {"attr": attr, "line": node.lineno, "layer": kind, "split": _split(kind, node),
                        "disable_tp": _text(disable_tp) or self._class_disables_tp(module, node) or None}
            if _call_name(node) == "divide" and len(node.args) == 2 and _mentions_tp(node.args[1]):
                return {"attr": attr or "divide", "line": node.lineno, "layer": "divide", "split": [_text(node.args[0])],
                        "disable_tp": None}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _mentions_tp(node.right):
            return {"attr": attr or "modulo", "line": node.lineno, "layer": "modulo", "split": [_text(node.left)],
                    "disable_tp": None}
        return None


def _mentions_tp(node: ast.AST) -> bool:
    text = _text(node, 400)
    return any(word in text for word in TP_WORDS)


def _split(kind: str, call: ast.Call) -> list[str]:
    """The expressions of the widths a layer splits (every argument but the noise for a subclass,
    whose own __init__ decides)."""
    base = kind.split("(", 1)[1][:-1] if "(" in kind else kind
    if "(" not in kind:
        return [_text(_argument(call, position, keyword)) for position, keyword in SPLIT_ARGS[base]]
    args = [_text(a) for a in call.args]
    return args + [f"{k.arg}={_text(k.value)}" for k in call.keywords if k.arg and k.arg not in NOISE_ARGS]


def reachable(walk: Walk, module: str, name: str) -> list[tuple[str, str]]:
    """Every definition the architecture's class leads to, in the order first met."""
    start = walk.tree.resolve(module, name)
    if start is None:
        return []
    order, queue = [], [start]
    seen = {(start[0], start[1].name)}
    while queue:
        mod, node = queue.pop(0)
        order.append((mod, node.name))
        found = walk.visit(mod, node)
        bases = {hit for b in getattr(node, "bases", []) if (hit := walk.target(mod, b))}
        for key in sorted(found.names | {(m, n.name) for m, n in bases}):
            if key not in seen:
                seen.add(key)
                queue.append((key[0], walk.tree.resolve(key[0], key[1])[1]))
    return order


def holding(walk: Walk) -> set[tuple[str, str]]:
    """The definitions that build a split layer, themselves or through what they call."""
    held = {key for key, found in walk.found.items() if found.sites}
    changed = True
    while changed:
        changed = False
        for key, found in walk.found.items():
            if key not in held and any(callee in held for _, callee, _ in found.calls):
                held.add(key)
                changed = True
    return held


def _builds(walk: Walk, defs: list[tuple[str, str]], held: set[tuple[str, str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each construction, in `defs`, of a definition that holds split layers, with its arguments."""
    for key in defs:
        rel = walk.tree.module(key[0]).rel
        counts: Counter[str] = Counter()
        for attr, callee, call in walk.found[key].calls:
            if callee not in held or not isinstance(walk.nodes.get(callee), ast.ClassDef):
                continue
            where = f"{rel}::{key[1]}.{attr}->{callee[1]}"
            counts[where] += 1
            args = [_text(a) for a in call.args] + [f"{k.arg}={_text(k.value)}" for k in call.keywords
                                                    if k.arg and k.arg not in NOISE_ARGS]
            yield (where if counts[where] == 1 else f"{where}#{counts[where]}",
                   {"line": call.lineno, "builds": callee[1], "args": args})


def registry() -> dict[str, tuple[str, str]]:
    """Architecture -> (module, class) as the installed vLLM registers it."""
    from vllm.model_executor.models import registry as reg

    models = dict(reg._VLLM_MODELS)  # noqa: SLF001 - the registry's own table
    return {arch: (mod if mod.startswith("vllm.") else f"vllm.model_executor.models.{mod}", cls)
            for arch, (mod, cls) in models.items()}


def audit() -> dict[str, Any]:
    """The release's parallel layers for every supported architecture it registers."""
    tree = Tree()
    walk = Walk(tree)
    known = registry()
    per_arch = {arch: reachable(walk, *known[arch]) for arch in sorted(AUDITED_ARCHITECTURES) if arch in known}
    held = holding(walk)
    sites: dict[str, Any] = {}
    builds: dict[str, Any] = {}
    architectures: dict[str, Any] = {}
    for arch, defs in per_arch.items():
        own = {k: v for key in defs for k, v in walk.found[key].sites.items()}
        made = dict(_builds(walk, defs, held))
        sites.update(own)
        builds.update(made)
        architectures[arch] = {"class": f"{tree.module(known[arch][0]).rel}::{known[arch][1]}",
                               "sites": sorted(own), "builds": sorted(made)}
    return {"vllm_version": tree.version, "generated_by": "scripts/audit_tp_layers.py",
            "architectures": architectures, "sites": dict(sorted(sites.items())), "builds": dict(sorted(builds.items()))}


def render(data: dict[str, Any]) -> str:
    """The committed file's text."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed data differs")
    parser.add_argument("--output", type=Path, help="write here instead of the committed file")
    args = parser.parse_args()
    data = audit()
    path = args.output or audit_path(data["vllm_version"])
    text = render(data)
    if args.check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'up to date' if same else 'STALE (rerun without --check)'}")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}: {len(data['architectures'])} architectures, {len(data['sites'])} sites, "
          f"{len(data['builds'])} builds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
