"""How far a reader travels following `spec` from the CLI into planning: a call-graph walk.

From an entry function (default: the CLI's `validate`), follow calls depth-first into the
project's own functions (each function once, calls in source order) and keep the calls on a path
that reaches `--into` (default: planning/) plus everything planning itself calls. The files in the
order the walk enters functions are what a reader opens; the walk reports

- stays: runs of consecutive functions in one file (how many times the reader opens a file),
- files: how many distinct files the walk visits,
- climbs back up: stays in a file the reader had already left (going back to it).

Static and approximate on purpose (names resolved through imports and `self.`; no types): the
same approximation before and after a change, so the two figures compare. Usage:

    python3 scripts/callgraph_walk.py [--package DIR] [--entry MODULE:FUNCTION] [--into PREFIX] [-v]
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "specdeploy"
VOCABULARY = ("findings.py", "vllm/")
DEFAULT_ENTRIES = ("specdeploy.cli.validate:_validate", "specdeploy.cli:_validate")  # after, before the cli/ split


@dataclass
class Module:
    """One module: its functions (`name` or `Class.name`) and what its imported names point at."""

    name: str
    path: Path
    functions: dict[str, ast.AST] = field(default_factory=dict)
    names: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # alias -> (module, attr|None)


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _read(path: Path, package: Path) -> Module:
    tree = ast.parse(path.read_text(), str(path))
    module = Module(_module_name(path, package), path)
    package = module.name if path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    module.functions[f"{node.name}.{item.name}"] = item
    for node in ast.walk(tree):  # lazy imports inside functions count too
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                module.names[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module.names[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname else alias.name.split(".")[0], None)
    return module


class Graph:
    """The project's functions and the calls between them, resolved by name."""

    def __init__(self, package: Path = PACKAGE) -> None:
        self.package = package
        self.modules = {m.name: m for m in (_read(p, package) for p in sorted(package.rglob("*.py")))}

    def resolve_name(self, module: str, name: str, depth: int = 0) -> tuple[str, str] | str | None:
        """(module, function) for a function, a module name for a module, None otherwise."""
        mod = self.modules.get(module)
        if mod is None or depth > 8:
            return None
        if name in mod.functions:
            return module, name
        if name not in mod.names:
            return None
        target, attr = mod.names[name]
        if attr is None:
            return target if target in self.modules else None
        if f"{target}.{attr}" in self.modules:
            return f"{target}.{attr}"
        return self.resolve_name(target, attr, depth + 1)

    def callees(self, module: str, function: str) -> list[tuple[str, str]]:
        node = self.modules[module].functions[function]
        owner = function.split(".")[0] if "." in function else None
        calls = sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
        out: list[tuple[str, str]] = []
        for call in calls:
            target = self._call_target(module, owner, call.func)
            if target and target not in out and target != (module, function):
                out.append(target)
        return out

    def _call_target(self, module: str, owner: str | None, func: ast.AST) -> tuple[str, str] | None:
        if isinstance(func, ast.Name):
            found = self.resolve_name(module, func.id)
            return found if isinstance(found, tuple) else None
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
            return None
        if func.value.id in ("self", "cls") and owner:
            key = f"{owner}.{func.attr}"
            return (module, key) if key in self.modules[module].functions else None
        found = self.resolve_name(module, func.value.id)
        if isinstance(found, str):
            hit = self.resolve_name(found, func.attr)
            return hit if isinstance(hit, tuple) else None
        return None

    def file(self, node: tuple[str, str]) -> str:
        return str(self.modules[node[0]].path.relative_to(self.package))


def walk(graph: Graph, entry: tuple[str, str], into: str, vocabulary: tuple[str, ...] = ()) -> list[tuple[str, str, bool]]:
    """(file, function, is_return) per step of the depth-first walk."""
    reaches: dict[tuple[str, str], bool] = {}

    def reaches_into(node: tuple[str, str], stack: frozenset[tuple[str, str]]) -> bool:
        if node in reaches:
            return reaches[node]
        found = graph.file(node).startswith(into) or any(
            reaches_into(c, stack | {node}) for c in graph.callees(*node) if c not in stack)
        reaches[node] = found
        return found

    steps: list[tuple[str, str, bool]] = []
    seen: set[tuple[str, str]] = set()

    def visit(node: tuple[str, str], inside: bool) -> None:
        seen.add(node)
        inside = inside or graph.file(node).startswith(into)
        steps.append((graph.file(node), node[1], False))
        for callee in graph.callees(*node):
            if graph.file(callee).startswith(vocabulary) if vocabulary else False:
                continue
            if callee not in seen and (inside or reaches_into(callee, frozenset({node}))):
                visit(callee, inside)
                steps.append((graph.file(node), node[1], True))

    sys.setrecursionlimit(10000)
    visit(entry, False)
    return steps


def figures(steps: list[tuple[str, str, bool]]) -> tuple[int, int, int]:
    """(stays, files, climbs back up) of the files in the order the walk enters functions."""
    stays = climbs = 0
    previous, seen = None, set()
    for path, _, is_return in steps:
        if is_return:
            continue
        if path != previous:
            stays += 1
            climbs += path in seen
            seen.add(path)
        previous = path
    return stays, len(seen), climbs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", help="MODULE:FUNCTION to start at (default: the CLI's validate)")
    parser.add_argument("--into", default="planning/", help="file prefix under operator/specdeploy/ to follow calls into")
    parser.add_argument("--package", type=Path, default=PACKAGE, help="the specdeploy package to walk (another checkout's, to compare)")
    parser.add_argument("--vocabulary", action="append", default=None, metavar="PREFIX",
                        help="files whose functions are read by name, not followed (default: findings.py and vllm/, the "
                             "Finding constructors and the release facts every layer calls); --vocabulary none follows all")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every stay")
    args = parser.parse_args()
    graph = Graph(args.package.resolve())
    entries = [args.entry] if args.entry else list(DEFAULT_ENTRIES)
    entry = next(((m, f) for m, f in (e.split(":") for e in entries)
                  if m in graph.modules and f in graph.modules[m].functions), None)
    if entry is None:
        parser.error(f"no entry function among {entries}")
    vocabulary = tuple(v for v in (args.vocabulary or VOCABULARY) if v != "none")
    steps = walk(graph, entry, args.into, vocabulary)
    if args.verbose:
        previous = None
        for path, function, is_return in steps:
            if path != previous and not is_return:
                print(f"{path} ({function})")
            previous = path if not is_return else previous
    stays, files, climbs = figures(steps)
    print(f"entry {entry[0]}:{entry[1]} into {args.into}, vocabulary {', '.join(vocabulary) or 'none'}: "
          f"{stays} stays in {files} files, {climbs} climbs back up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
