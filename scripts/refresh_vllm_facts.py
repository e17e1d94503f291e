#!/usr/bin/env python3
"""Regenerate operator/specdeploy/vllm/data/<version>.json from the installed vLLM itself.

Why: the operator must judge a pair the way the vLLM version in the pod will, without importing
vLLM or torch at run time. So each version's facts are read once, here, from that release's own
model registry, config classes and server CLI, and shipped as data (one file per version).
`tests/parity/test_vllm_facts.py` regenerates the data in memory and fails when the committed
file for the installed vLLM is stale.

Adding a vLLM release: `make vllm-release VERSION=X` (scripts/vllm_release.py) builds its venv,
runs this script there and lists what is left: the release's logic differences for its module
`specdeploy/vllm/releases/v<X>_<Y>_<Z>.py`, and the parity cases that disagree.
    .venv-vllm/bin/python scripts/refresh_vllm_facts.py          # write data/<installed version>.json
    .venv-vllm/bin/python scripts/refresh_vllm_facts.py --check  # exit 1 if stale

Sources (read from the installed release):
- `vllm/model_executor/models/registry.py` `ModelRegistry.models` (+ `_SPECULATIVE_DECODING_MODELS`)
- `vllm/model_executor/models/interfaces.py` `supports_pp` on the imported model class. About a
  hundred (mostly multimodal) modules cannot be imported on the CPU build (no torchvision);
  for those the class's source is read with `ast` and `SupportsPP` is looked for in its bases,
  following base classes through `vllm.model_executor.models` imports (`pp_source: "ast"`).
- `vllm/transformers_utils/model_arch_config_convertor.py` `is_deepseek_mla` (MLA model types)
- `vllm/config/speculative.py` `MTPModelTypes`, `SpeculativeMethod`, and every init field of the
  `SpeculativeConfig` pydantic dataclass with its type, bounds, choices and default
- `vllm/entrypoints/.../cli_args.py` `make_arg_parser`: every flag of the OpenAI server's CLI with
  its spellings and arity (how many values follow it)
- `vllm/config/cache.py` `CacheConfig`: the default block size and `gpu_memory_utilization`
  (0.34.0: 1.0 when the extensible KV cache sizes the cache, read from
  `resolved_gpu_memory_utilization`)
- `vllm/engine/arg_utils.py` `EngineArgs.get_batch_defaults`: `vllm serve`'s max_num_batched_tokens
  and max_num_seqs by GPU memory and device name (A100s keep the small tier), probed as a GPU
- 0.34.0 on: `vllm/v1/worker/gpu/spec_decode/speculator_config.py`, where the per-method logic
  moved out of `SpeculativeConfig.__post_init__` into one `SpeculatorConfig` class per method
  (`<method>/config.py`): each method's class and what it declares (base method, supported
  options, parallel drafting, ...), the speculator each draft architecture declares
  (`SpeculativeDraftModel.speculator_config_class`), the options checked per method
  (`_METHOD_SPECIFIC_OPTIONS`), whether plugins may register methods, and suffix decoding's
  default k (its `configure`, run on a probe)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "operator" / "specdeploy" / "vllm" / "data"
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


def _imported_from(tree: ast.Module, module_name: str) -> dict[str, str]:
    """Local name -> the module it is imported from (`from X import name`), in `module_name`."""
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            if node.level:  # relative import inside vllm.model_executor.models
                pkg = module_name.rsplit(".", node.level)[0]
                base = f"{pkg}.{node.module}" if node.module else pkg
            for alias in node.names:
                imports[alias.asname or alias.name] = base
    return imports


def _sets_supports_pp(class_node: ast.ClassDef) -> bool:
    """Whether the class body says `supports_pp = True` (annotated or not)."""
    for stmt in class_node.body:
        if (
            isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and isinstance(getattr(stmt, "value", None), ast.Constant)
            and stmt.value.value is True
        ):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "supports_pp" for t in targets):
                return True
    return False


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
    imports = _imported_from(tree, module_name)
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        if _sets_supports_pp(node):
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


def _ast_class_attribute(module_name: str, class_name: str, attribute: str) -> tuple[str, str] | None:
    """(module, name) of the class that `class_name.attribute = Name` names in the module's source,
    for a module the CPU build cannot import."""
    path = _module_source_path(module_name)
    if path is None:
        return None
    tree = ast.parse(path.read_text())
    imports = {alias.asname or alias.name: node.module for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name)
                        and any(isinstance(t, ast.Name) and t.id == attribute for t in stmt.targets)):
                    return imports.get(stmt.value.id, module_name), stmt.value.id
    return None


def _declared_speculator(entry: Any, model_cls: type | None) -> type | None:
    """The SpeculatorConfig class a draft architecture declares (0.34.0:
    `SpeculativeDraftModel.speculator_config_class`; SpeculativeConfig checks an explicit method
    against its base_method, speculator_config.py `_resolve_checkpoint_config_class`)."""
    import importlib

    if model_cls is not None:
        return getattr(model_cls, "speculator_config_class", None)
    found = _ast_class_attribute(entry.module_name, entry.class_name, "speculator_config_class")
    return getattr(importlib.import_module(found[0]), found[1]) if found else None


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe_speculator(cls: type, draft_model_cls: type) -> dict[str, Any]:
    """What a SpeculatorConfig class declares that decides a verdict or a plan."""
    return {
        "base_method": cls.base_method,
        "supported_options": sorted(cls.supported_options),
        "parallel_drafting": cls.parallel_drafting,
        "uses_target_hidden_states": cls.uses_target_hidden_states,
        "draft_has_own_vocab": cls.draft_has_own_vocab,
        "loads_checkpoint": issubclass(cls, draft_model_cls),  # a DraftModelSpeculatorConfig
    }


def _suffix_default_k_cap(suffix_cls: type) -> int | None:
    """SuffixSpeculatorConfig.configure's default k with an unbounded tree depth: 0.34.0 takes
    min(8, suffix_decoding_max_tree_depth) (0.33.0 took the depth itself)."""
    from types import SimpleNamespace

    probe = SimpleNamespace(num_speculative_tokens=None, suffix_decoding_max_tree_depth=1 << 30,
                            suffix_decoding_corpus_tokens=0, suffix_decoding_max_cached_requests=0,
                            suffix_decoding_max_spec_factor=0, suffix_decoding_min_token_prob=0)
    suffix_cls.configure(probe)
    k = probe.num_speculative_tokens
    return None if k == probe.suffix_decoding_max_tree_depth else k


def _speculators(declared: dict[str, type]) -> dict[str, Any] | None:
    """0.34.0's per-method SpeculatorConfig classes (None before 0.34.0, where the per-method
    logic lives in SpeculativeConfig.__post_init__ and the data has no such section)."""
    try:
        from vllm.v1.worker.gpu.spec_decode import speculator_config as sc
    except ImportError:
        return None
    from vllm.config import speculative
    from vllm.utils.import_utils import resolve_obj_by_qualname

    by_method = {method: resolve_obj_by_qualname(name) for method, name in sc._CONFIG_BY_METHOD.items()}
    classes = {_qualname(c): _describe_speculator(c, sc.DraftModelSpeculatorConfig)
               for c in [*by_method.values(), *declared.values()]}
    return {
        "by_method": {method: _qualname(c) for method, c in sorted(by_method.items())},
        "classes": dict(sorted(classes.items())),
        "method_specific_options": list(speculative._METHOD_SPECIFIC_OPTIONS),
        "plugin_methods": hasattr(sc, "register_speculative_method"),
        "default_k_caps": {"suffix": _suffix_default_k_cap(by_method["suffix"])},
    }


def _memory_defaults() -> dict[str, Any]:
    """CacheConfig's defaults for what the memory plan assumes (vllm/config/cache.py)."""
    from types import SimpleNamespace

    from pydantic.fields import FieldInfo
    from vllm.config.cache import CacheConfig

    default = CacheConfig.__dataclass_fields__["gpu_memory_utilization"].default
    default = default.default if isinstance(default, FieldInfo) else default
    out: dict[str, Any] = {"block_size": CacheConfig.DEFAULT_BLOCK_SIZE, "gpu_memory_utilization": default}
    resolved = getattr(CacheConfig, "resolved_gpu_memory_utilization", None)
    if default is None and resolved is not None:  # 0.34.0: the default depends on the sizing mode
        for key, extensible in (("gpu_memory_utilization", False), ("gpu_memory_utilization_extensible_kv_cache", True)):
            out[key] = resolved.fget(SimpleNamespace(gpu_memory_utilization=None, enable_extensible_kv_cache=extensible,
                                                     DEFAULT_GPU_MEMORY_UTILIZATION=CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION))
    return out


BATCH_PROBE_MAX_GIB = 1024  # GPU memory sizes probed for `get_batch_defaults`' tiers, in whole GiB


def _batch_probe(memory_gib: int, device_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` defaults to on a GPU of this memory
    and driver name: `EngineArgs.get_batch_defaults` for the OPENAI_API_SERVER usage context,
    run with the platform reporting a GPU of that size and name. The device capability stays the
    CPU platform's (none): 0.33's GB10 exception (capability 12.1 keeps the small tier) is not
    probed, and no catalog product has that capability."""
    from unittest import mock

    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    platform = type(current_platform)
    with mock.patch.object(platform, "is_cpu", lambda *a, **k: False), \
            mock.patch.object(platform, "get_device_total_memory", lambda *a, **k: memory_gib * 1024**3), \
            mock.patch.object(platform, "get_device_name", lambda *a, **k: device_name):
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
    return tokens[UsageContext.OPENAI_API_SERVER], seqs[UsageContext.OPENAI_API_SERVER]


def _batch_name_tests() -> list[str]:
    """The strings `get_batch_defaults` looks for in the device name (`"a100" not in device_name`),
    read from its source."""
    from vllm.engine.arg_utils import EngineArgs

    tree = ast.parse(textwrap.dedent(inspect.getsource(EngineArgs.get_batch_defaults)))
    return sorted({node.left.value for node in ast.walk(tree)
                   if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                   and isinstance(node.left.value, str) and isinstance(node.ops[0], (ast.In, ast.NotIn))
                   and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "device_name"})


def _batch_defaults() -> dict[str, Any]:
    """`vllm serve`'s batch limits per GPU (engine/arg_utils.py `get_batch_defaults`), as tiers
    from the largest memory down: a GPU takes the first tier whose `min_memory_gib` it reaches
    and whose `unless_name_contains` its lower-cased name does not contain. Probed at every whole
    GiB (the thresholds are `N * GiB_bytes`), then with each name the function tests for."""
    values = [_batch_probe(gib, "gpu") for gib in range(BATCH_PROBE_MAX_GIB + 1)]
    tiers: list[dict[str, Any]] = []
    for gib, (tokens, seqs) in enumerate(values):
        if not tiers or (tiers[0]["max_num_batched_tokens"], tiers[0]["max_num_seqs"]) != (tokens, seqs):
            tiers.insert(0, {"min_memory_gib": gib, "unless_name_contains": [],
                             "max_num_batched_tokens": tokens, "max_num_seqs": seqs})
    for i, tier in enumerate(tiers):
        for name in _batch_name_tests():
            got = _batch_probe(tier["min_memory_gib"], f"probe {name} gpu")
            if got == (tier["max_num_batched_tokens"], tier["max_num_seqs"]):
                continue
            below = tiers[i + 1] if i + 1 < len(tiers) else None
            if below is None or got != (below["max_num_batched_tokens"], below["max_num_seqs"]):
                raise RuntimeError("get_batch_defaults changed shape: a name no longer falls to the next tier")
            tier["unless_name_contains"].append(name)
    return {"usage_context": "OPENAI_API_SERVER", "tiers": tiers}


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


def _describe_type(annotation: Any) -> dict[str, Any]:
    """A field's pydantic type as data the operator can check a value against (lax, as vLLM's
    dataclass validates): bool, int, float, str, a choice among literals, list, or object."""
    import enum
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _describe_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        described = [_describe_type(a) for a in members]
        if any(d["type"] == "str" for d in described):
            return {"type": "str"}  # e.g. QuantizationMethods | str: any string
        if len(described) == 1:
            return described[0]
        choices = [c for d in described for c in d.get("choices", [])]
        if choices and all(d["type"] == "choice" for d in described):
            return {"type": "choice", "choices": sorted(set(choices))}
        return {"type": "any"}
    if origin is typing.Literal:
        return {"type": "choice", "choices": sorted(str(c) for c in _flatten_literal(annotation))}
    if origin in (list, tuple, typing.List, typing.Tuple):
        return {"type": "list"}
    if origin in (dict, typing.Dict):
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"type": "choice", "choices": sorted(m.name for m in annotation)}
    for python_type, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if annotation is python_type:
            return {"type": name}
    return {"type": "object"}


def _speculative_fields() -> dict[str, dict[str, Any]]:
    """Every init field of SpeculativeConfig: its type, numeric bounds and default."""
    import typing

    from pydantic.fields import FieldInfo
    from vllm.config.speculative import SpeculativeConfig

    hints = typing.get_type_hints(SpeculativeConfig, include_extras=True)
    out: dict[str, dict[str, Any]] = {}
    for name, field in SpeculativeConfig.__dataclass_fields__.items():
        if not field.init:
            continue
        entry = _describe_type(hints.get(name, Any))
        default = field.default
        if isinstance(default, FieldInfo):
            for meta in default.metadata:
                for bound in ("gt", "ge", "lt", "le"):
                    if getattr(meta, bound, None) is not None:
                        entry[bound] = getattr(meta, bound)
            default = default.default
        if default is None or isinstance(default, (bool, int, float, str)):
            entry["default"] = default
        if "SkipValidation" in str(hints.get(name, "")):
            entry["internal"] = True  # set by vLLM itself (target/draft model and parallel configs)
        out[name] = entry
    return out


def _server_flags() -> dict[str, dict[str, Any]]:
    """The OpenAI server's flags as `vllm serve` parses them: spellings and arity."""
    import importlib

    for module in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.common.cli_args"):  # 0.32, 0.33
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except ImportError:
            continue
    else:
        raise RuntimeError("vLLM's make_arg_parser moved; add its module here")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        nargs = action.nargs
        if nargs is None:
            nargs = 0 if action.const is not None and type(action).__name__.startswith("_Store") and "Const" in type(action).__name__ else 1
        entry: dict[str, Any] = {"names": list(action.option_strings), "nargs": nargs}
        if action.choices is not None and not isinstance(action.choices, dict):
            try:
                choices = [str(c) for c in action.choices]
            except TypeError:
                choices = []
            if 0 < len(choices) <= 64:
                entry["choices"] = sorted(set(choices))
        flags[action.option_strings[0]] = entry
    return flags


def _transformers_backend_architectures() -> list[str]:
    """Transformers model classes vLLM serves through its Transformers backend when its own
    registry lacks the name (registry.py `_try_resolve_transformers`: the class exists in
    transformers and `is_backend_compatible()` or `_can_set_attn_implementation()`). This is how
    a config without `architectures` loads: vLLM names it `MODEL_MAPPING_NAMES[model_type]`
    (transformers_utils/config.py get_config)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    names = {n for mapping in (MODEL_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) for n in mapping.values()
             if isinstance(n, str)}
    accepted = []
    for name in sorted(names):
        try:
            cls = getattr(transformers, name)
            if cls.is_backend_compatible() or cls._can_set_attn_implementation():
                accepted.append(name)
        except Exception:  # noqa: BLE001 - a class that cannot load is not served either
            continue
    return accepted


def collect() -> dict[str, Any]:
    """Everything the operator's rules need to know about the installed vLLM."""
    import vllm
    from vllm.config.speculative import MTPModelTypes, SpeculativeMethod
    from vllm.model_executor.models import registry as reg
    from vllm.model_executor.models.interfaces import supports_pp

    speculative = set(reg._SPECULATIVE_DECODING_MODELS)
    archs: dict[str, dict[str, Any]] = {}
    declared: dict[str, type] = {}
    for arch in sorted(reg.ModelRegistry.models):
        entry = reg.ModelRegistry.models[arch]
        module_name = getattr(entry, "module_name", None)
        class_name = getattr(entry, "class_name", None)
        info: dict[str, Any] = {"speculative": arch in speculative}
        cls = None
        try:
            cls = entry.load_model_cls()
            info["supports_pp"] = bool(supports_pp(cls))
            info["pp_source"] = "import"
        except Exception:  # noqa: BLE001 - CPU build lacks some optional deps
            if module_name is None or class_name is None:
                continue
            info["supports_pp"] = _ast_supports_pp(module_name, class_name, set())
            info["pp_source"] = "ast"
        if (speculator := _declared_speculator(entry, cls)) is not None:
            declared[arch] = speculator
            info["speculator"] = _qualname(speculator)
        archs[arch] = info
    speculators = _speculators(declared)
    return {
        **({"speculators": speculators} if speculators is not None else {}),
        "memory_defaults": _memory_defaults(),
        "batch_defaults": _batch_defaults(),
        "vllm_version": vllm.__version__,
        "generated_by": "scripts/refresh_vllm_facts.py",
        "architectures": archs,
        "mla_model_types": _mla_model_types(),
        "mtp_model_types": sorted(_flatten_literal(MTPModelTypes)),
        "speculative_methods": sorted(_flatten_literal(SpeculativeMethod)),
        "transformers_backend_architectures": _transformers_backend_architectures(),
        "speculative_config_fields": _speculative_fields(),
        "server_flags": _server_flags(),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--output", type=Path, default=None, help="default: data/<installed version>.json")
    args = parser.parse_args(argv)
    data = collect()
    text = render(data)
    args.output = args.output or DATA_DIR / f"{data['vllm_version']}.json"
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
