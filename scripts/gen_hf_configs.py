#!/usr/bin/env python3
"""Regenerate operator/specdeploy/vllm/data/hf_configs.json from the installed transformers.

Why: the verdict reads each config.json through the config class vLLM's loader uses (its
defaults, attribute map, sub-configs and validators). Importing transformers to get them costs
most of a `specdeploy validate` process (its package `__init__` scans every model folder), so
what the rules need from each class is read here, once per release, and shipped as data that
`specdeploy.geometry.hf_classes` applies. `tests/unit/test_hf_classes.py` checks the data
against transformers (stale file, and the same verdict through both for every fixture).

    .venv/bin/python scripts/gen_hf_configs.py          # write the data file
    .venv/bin/python scripts/gen_hf_configs.py --check  # exit 1 if stale

Read per config class (transformers/configuration_utils.py and each configuration_*.py):
- `dataclasses.fields(cls)`: each field's default (JSON values only; a field whose default is
  not JSON, or is computed in `__post_init__`, is left to the rules' own fallbacks)
- the `interval(min, max)` validators on fields (utils/type_validators.py)
- `attribute_map`, `sub_configs` (a class, or AutoConfig: chosen by the sub-dict's model_type),
  `default_rope_type`, whether the class takes RoPE parameters
- the fields `__post_init__` derives when unset (a default instance against the declared
  defaults): a formula where one fits and a probe confirms it, else the field is listed as
  opaque and a config that leaves it unset is parsed by transformers itself
- the layer types `validate_layer_type` allows, and the field types its @strict check enforces
- whether its `validate_architecture` refuses a hidden size that heads do not divide (probed)
- PretrainedConfig's methods, read-only properties and class-level tables: a config key of
  that name replaces them on the instance (geometry/bounds.py refuses those keys)
- transformers' base model class per model_type (MODEL_MAPPING_NAMES), which vLLM names
  as the architecture of a config without `architectures`
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # some classes' defaults name a Hub checkpoint (timm)
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "operator" / "specdeploy" / "vllm" / "data" / "hf_configs.json"


def _json_value(value: Any) -> tuple[bool, Any]:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, json.loads(text)


def _default(field: dataclasses.Field) -> tuple[bool, Any]:
    if field.default is not dataclasses.MISSING:
        return _json_value(field.default)
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        try:
            return _json_value(field.default_factory())  # type: ignore[misc]
        except Exception:
            return False, None
    return False, None


def type_tree(annotation: Any) -> Any:
    """A field's annotation as JSON for hf_classes.check_type, which mirrors huggingface_hub's
    strict `type_validator` (the check transformers' @strict config classes run on each value)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is typing.Any or isinstance(annotation, (str, typing.ForwardRef)):
        return "any"
    if annotation is None or annotation is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return ["union", [type_tree(a) for a in args], repr(args)]
    if origin is typing.Literal:
        return ["literal", [a for a in args if _json_value(a)[0]], repr(args)]
    if origin in (list, typing.List):
        return ["list", type_tree(args[0]) if args else "any"]
    if origin in (dict, typing.Dict):
        return ["dict", type_tree(args[0]), type_tree(args[1])] if len(args) == 2 else ["dict", "any", "any"]
    if origin in (tuple, set, frozenset) or annotation in (tuple, set, frozenset):
        return "never"  # a JSON value is never a tuple or set
    if origin is not None and getattr(origin, "__name__", "") == "Sequence":
        return ["sequence", type_tree(args[0]) if args else "any"]
    if isinstance(annotation, type):
        if annotation in (bool, int, float, str, dict, list):
            return annotation.__name__
        return "never"  # a class (a TypedDict, a config class): no JSON value is an instance
    return "any"


def _interval(field: dataclasses.Field) -> list[Any] | None:
    """[min, max, exclude_min, exclude_max] of an `interval` validator, from its closure."""
    for validator in field.metadata.get("validator", []) or []:
        if getattr(validator, "__qualname__", "").startswith("interval."):
            bound = inspect.getclosurevars(validator).nonlocals
            low, high = bound.get("min"), bound.get("max")
            return [None if low is None or math.isinf(low) else low, None if high is None or math.isinf(high) else high,
                    bool(bound.get("exclude_min", False)), bool(bound.get("exclude_max", False))]
    return None


def _divides_heads(cls: type) -> bool:
    """Whether the class refuses a hidden size its head count does not divide (LlamaConfig's
    validate_architecture and its many copies)."""
    try:
        probe = cls()
        heads = int(getattr(probe, "num_attention_heads"))
        hidden = int(getattr(probe, "hidden_size"))
    except Exception:
        return False
    if heads < 2:
        return False
    try:
        cls(hidden_size=hidden + 1, head_dim=hidden // heads) if "head_dim" in {f.name for f in dataclasses.fields(cls)} else cls(hidden_size=hidden + 1)
    except Exception as exc:
        return "not a multiple of the number of attention" in str(exc)
    return False


def _instance(cls: type, **kwargs: Any) -> dict[str, Any] | None:
    try:
        return cls(**kwargs).to_dict()
    except Exception:
        return None


def _confirms(cls: type, key: str, candidate: list[Any], probe: dict[str, Any]) -> bool:
    """Whether the class, with one input changed, derives what the formula says."""
    changed = _instance(cls, **probe)
    if changed is None:
        return False
    kind, *inputs = candidate
    values = [changed[name] for name in inputs]
    expected = values[0] if kind == "copy" else values[0] // values[1] if kind == "floordiv" else values[0] + values[1]
    return changed.get(key) == expected


def _formula(cls: type, key: str, value: Any, made: dict[str, Any]) -> list[Any] | None:
    """How `__post_init__` derives `key` when the config does not set it, where one of a few
    shapes fits and a probe that changes its inputs confirms it: a copy of another field,
    a // b, a + b, or a constant. None: not derivable here (the class is then parsed by
    transformers itself, see hf_classes.needs_transformers)."""
    ints = {k: v for k, v in made.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0 and k != key}
    candidates: list[list[Any]] = []
    if isinstance(value, int) and not isinstance(value, bool):
        candidates += [["copy", a] for a, v in ints.items() if v == value]
        candidates += [["floordiv", a, b] for a, va in ints.items() for b, vb in ints.items() if a != b and va // vb == value and va >= vb > 1]
        candidates += [["sum", a, b] for a, va in ints.items() for b, vb in ints.items() if a < b and va + vb == value]
    for candidate in candidates:
        inputs = candidate[1:]
        if all(_confirms(cls, key, candidate, {name: made[name] * 2}) for name in inputs):
            return candidate
    ok, constant = _json_value(value)
    if ok and not isinstance(value, (list, dict)):
        probe = {name: v * 2 for name, v in ints.items() if name in ("hidden_size", "num_hidden_layers", "num_attention_heads")}
        changed = _instance(cls, **probe)
        if changed is not None and changed.get(key) == value:
            return ["const", constant]
    return None


# Bookkeeping every instance carries; no rule reads them.
_BOOKKEEPING = {"_name_or_path", "transformers_version", "output_attentions", "model_type", "id2label", "label2id", "dtype",
                "torch_dtype", "rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"}


def _derived(cls: type, fields: dict[str, Any], base: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Fields `__post_init__` fills when the config leaves them unset: {field: formula} for those
    derivable here, and the names of those that are not."""
    made = _instance(cls)
    if made is None:
        return {}, ["<class cannot be built with its defaults>"]
    formulas: dict[str, Any] = {}
    opaque: list[str] = []
    for key, value in made.items():
        if key in _BOOKKEEPING or key in getattr(cls, "sub_configs", {}):
            continue
        declared = fields.get(key, base.get(key, "<absent>"))
        if declared == value or (isinstance(value, (dict, list)) and declared == value):
            continue
        formula = _formula(cls, key, value, made)
        if formula is None:
            opaque.append(key)
        else:
            formulas[key] = formula
    return formulas, sorted(opaque)


def describe(cls: type, base_fields: set[str], base: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    intervals: dict[str, Any] = {}
    types_: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        types_[field.name] = type_tree(field.type)
        if field.name in base_fields:
            continue
        ok, value = _default(field)
        if ok:
            fields[field.name] = value
        bounds = _interval(field)
        if bounds:
            intervals[field.name] = bounds
    subs = {key: ("AutoConfig" if sub.__name__ == "AutoConfig" else sub.__name__) for key, sub in (getattr(cls, "sub_configs", {}) or {}).items()}
    names = {f.name for f in dataclasses.fields(cls)}
    derived, opaque = _derived(cls, fields, base)
    return {"model_type": getattr(cls, "model_type", "") or "", "fields": fields, "types": types_, "derived": derived, "opaque": opaque, "intervals": intervals,
            "attribute_map": dict(getattr(cls, "attribute_map", {}) or {}), "sub_configs": subs,
            "rope": "rope_parameters" in names, "default_rope_type": getattr(cls, "default_rope_type", "default"),
            "default_theta": _json_value(getattr(cls, "default_theta", None))[1],
            "rope_ignore_keys": sorted(getattr(cls, "ignore_keys_at_rope_validation", None) or ()),
            "divides_heads": _divides_heads(cls)}


def generate() -> dict[str, Any]:
    import transformers
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    base_fields = {f.name for f in dataclasses.fields(PretrainedConfig)}
    base: dict[str, Any] = {}
    for field in dataclasses.fields(PretrainedConfig):
        ok, value = _default(field)
        if ok:
            base[field.name] = value
    classes: dict[str, Any] = {}
    model_types: dict[str, str] = {}
    queue: list[type] = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:
            continue
        model_types[model_type] = cls.__name__
        queue.append(cls)
    from transformers import DeepseekV3Config
    queue.append(DeepseekV3Config)
    while queue:
        cls = queue.pop()
        if cls.__name__ in classes or not dataclasses.is_dataclass(cls):
            continue
        classes[cls.__name__] = describe(cls, base_fields, base)
        queue.extend(sub for sub in (getattr(cls, "sub_configs", {}) or {}).values() if sub.__name__ != "AutoConfig")
    reserved = set()
    for name in dir(PretrainedConfig):
        attribute = inspect.getattr_static(PretrainedConfig, name)
        if isinstance(attribute, property):
            if attribute.fset is None:
                reserved.add(name)
        elif callable(attribute) or isinstance(attribute, (classmethod, staticmethod, dict, set, list)):
            reserved.add(name)
    base_models = {t: n for t, n in MODEL_MAPPING_NAMES.items() if isinstance(n, str)}
    from transformers.configuration_utils import ALLOWED_ATTN_LAYER_TYPES, ALLOWED_MLP_LAYER_TYPES
    return {"transformers_version": transformers.__version__, "base_fields": base, "model_types": model_types,
            "base_models": base_models, "reserved_names": sorted(reserved),
            "allowed_layer_types": {"layer_types": sorted(ALLOWED_ATTN_LAYER_TYPES), "mlp_layer_types": sorted(ALLOWED_MLP_LAYER_TYPES)}, "classes": dict(sorted(classes.items()))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = json.dumps(generate(), sort_keys=True, separators=(",", ":")) + "\n"
    if args.check:
        stale = not OUT.exists() or OUT.read_text() != text
        print(f"{OUT.name}: {'stale' if stale else 'up to date'}")
        return 1 if stale else 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
