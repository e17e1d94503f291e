#!/usr/bin/env python3
"""Regenerate operator/specdeploy/validation/vllm_architectures.json from vLLM itself.

Why: the operator must say "vLLM cannot load this draft" (and "this model has no pipeline
parallelism") without importing vLLM or torch at run time. So the facts are read once, here,
from the pinned vLLM release's own model registry and config code, and shipped as data.
`tests/parity/test_vllm_architectures.py` regenerates the data in memory and fails when the
committed file is stale for the installed vLLM.

Run it in the vLLM venv (`make vllm-venv`):
    .venv-vllm/bin/python scripts/refresh_vllm_architectures.py          # rewrite the file
    .venv-vllm/bin/python scripts/refresh_vllm_architectures.py --check  # exit 1 if stale

Sources (vLLM 0.32.0):
- `vllm/model_executor/models/registry.py` `ModelRegistry.models` (+ `_SPECULATIVE_DECODING_MODELS`)
- `vllm/model_executor/models/interfaces.py` `supports_pp` on the imported model class. About a
  hundred (mostly multimodal) modules cannot be imported on the CPU build (no torchvision);
  for those the class's source is read with `ast` and `SupportsPP` is looked for in its bases,
  following base classes through `vllm.model_executor.models` imports (`pp_source: "ast"`).
- `vllm/transformers_utils/model_arch_config_convertor.py` `is_deepseek_mla` (MLA model types)
- `vllm/config/speculative.py` `MTPModelTypes`, `SpeculativeMethod`
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "operator" / "specdeploy" / "validation" / "vllm_architectures.json"
MODELS_PKG = "vllm.model_executor.models"


def _flatten_literal(tp: Any) -> list[str]:
    """Literal[...] members, nested Literals flattened (SpeculativeMethod nests several)."""
    out: list[str] = []
    for arg in get_args(tp):
        out.extend(_flatten_literal(arg) if get_args(arg) else [arg])
    return out


def _module_source_path(module_name: str) -> Path | None:
    spec = importlib.util.find_spec(module_name)
    return Path(spec.origin) if spec and spec.origin else None


def _ast_supports_pp(module_name: str, class_name: str, seen: set[tuple[str, str]]) -> bool:
    """Does `class_name` in `module_name` derive from SupportsPP (or set supports_pp = True)?

    Used only where the module cannot be imported on the CPU build."""
    if (module_name, class_name) in seen:
        return False
    seen.add((module_name, class_name))
    path = _module_source_path(module_name)
    if path is None:
        return False
    tree = ast.parse(path.read_text())
    imports: dict[str, str] = {}  # local name -> module it comes from
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            if node.level:  # relative import inside vllm.model_executor.models
                pkg = module_name.rsplit(".", node.level)[0]
                base = f"{pkg}.{node.module}" if node.module else pkg
            for alias in node.names:
                imports[alias.asname or alias.name] = base
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and isinstance(getattr(stmt, "value", None), ast.Constant)
                and stmt.value.value is True
            ):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == "supports_pp" for t in targets):
                    return True
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if name is None:
                continue
            if name == "SupportsPP":
                return True
            origin = imports.get(name, module_name)
            if origin.startswith("vllm") and _ast_supports_pp(origin, name, seen):
                return True
        return False
    return False


def _mla_model_types() -> list[str]:
    """The model_type tuple inside ModelArchConfigConvertorBase.is_deepseek_mla, read from
    its source and then confirmed by calling the function on a probe config per type."""
    from types import SimpleNamespace

    from vllm.transformers_utils.model_arch_config_convertor import (
        ModelArchConfigConvertorBase,
    )

    fn = ast.parse(inspect.getsource(ModelArchConfigConvertorBase.is_deepseek_mla).strip())
    candidates: list[str] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Tuple):
            elts = node.comparators[0].elts
            candidates = [e.value for e in elts if isinstance(e, ast.Constant)]
            break
    confirmed = []
    for model_type in candidates:
        probe = SimpleNamespace(model_type=model_type, kv_lora_rank=512)
        if ModelArchConfigConvertorBase(probe, probe).is_deepseek_mla():
            confirmed.append(model_type)
    if not confirmed:
        raise RuntimeError("is_deepseek_mla changed shape; update _mla_model_types()")
    return sorted(confirmed)


def collect() -> dict[str, Any]:
    """Everything the operator's rules need to know about the installed vLLM."""
    import vllm
    from vllm.config.speculative import MTPModelTypes, SpeculativeMethod
    from vllm.model_executor.models import registry as reg
    from vllm.model_executor.models.interfaces import supports_pp

    speculative = set(reg._SPECULATIVE_DECODING_MODELS)
    archs: dict[str, dict[str, Any]] = {}
    for arch in sorted(reg.ModelRegistry.models):
        entry = reg.ModelRegistry.models[arch]
        module_name = getattr(entry, "module_name", None)
        class_name = getattr(entry, "class_name", None)
        info: dict[str, Any] = {"speculative": arch in speculative}
        try:
            cls = entry.load_model_cls()
            info["supports_pp"] = bool(supports_pp(cls))
            info["pp_source"] = "import"
        except Exception:  # noqa: BLE001 - CPU build lacks some optional deps
            if module_name is None or class_name is None:
                continue
            info["supports_pp"] = _ast_supports_pp(module_name, class_name, set())
            info["pp_source"] = "ast"
        archs[arch] = info
    return {
        "vllm_version": vllm.__version__,
        "generated_by": "scripts/refresh_vllm_architectures.py",
        "architectures": archs,
        "mla_model_types": _mla_model_types(),
        "mtp_model_types": sorted(_flatten_literal(MTPModelTypes)),
        "speculative_methods": sorted(_flatten_literal(SpeculativeMethod)),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render(collect())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale; rerun {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
