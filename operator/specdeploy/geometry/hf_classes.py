"""A config.json read the way its transformers config class reads it, without importing transformers.

Importing transformers costs most of a `specdeploy validate` process (its package `__init__`
scans every model folder), so `scripts/gen_hf_configs.py` reads what the rules need from each
config class once per release into `vllm/data/hf_configs.json`, and this module applies it:

- defaults: the class's dataclass field defaults under the config's own values;
- `attribute_map`: an aliased key (`n_head`) sets the attribute it names, and reads as it;
- sub-configs: `text_config`, `vision_config`, ... built with their own class (AutoConfig:
  the class of the sub-dict's `model_type`), a default one when absent;
- RoPE: `rope_scaling` becomes `rope_parameters` with `rope_theta` moved in
  (modeling_rope_utils.py `convert_rope_params_to_dict`, `standardize_rope_params`);
- the validators that refuse a config: `interval` bounds on fields, a hidden size the heads do
  not divide (`validate_architecture`), RoPE parameters missing a key their type requires or
  an odd fully-rotated head (`validate_rope`).

`tests/unit/test_hf_classes.py` checks the data file against the installed transformers and the
verdict of every fixture through both."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "vllm" / "data" / "hf_configs.json"

# modeling_rope_utils.py `_validate_<type>_rope_parameters`: the keys each RoPE type requires.
ROPE_REQUIRED_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset({"rope_type"}),
    "axial": frozenset({"rope_type"}),
    "linear": frozenset({"rope_type", "factor"}),
    "dynamic": frozenset({"rope_type", "factor"}),
    "yarn": frozenset({"rope_type", "factor", "original_max_position_embeddings"}),
    "longrope": frozenset({"rope_type", "short_factor", "long_factor", "original_max_position_embeddings"}),
    "llama3": frozenset({"rope_type", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
                         "rope_theta"}),
    "proportional": frozenset({"rope_type", "rope_theta"}),
}
# standardize_rope_params: these types carry the pretraining length inside their parameters.
_ROPE_WITH_ORIGINAL_LENGTH = ("llama3", "yarn", "longrope")
_TEXT_CONFIG_NAMES = ("text_encoder", "decoder", "generator", "text_config")


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The generated per-class data (read once per process)."""
    return json.loads(DATA.read_text())


def class_for(model_type: Any) -> str | None:
    """The config class transformers registers for `model_type`, or None."""
    return table()["model_types"].get(model_type) if isinstance(model_type, str) else None


def base_model(model_type: str) -> str | None:
    """transformers' base model class for `model_type` (MODEL_MAPPING_NAMES)."""
    return table()["base_models"].get(model_type)


class HFConfig(dict):
    """A config as its class reads it: a dict of every attribute (so the rules' dict reads work),
    which knows its class and its text part."""

    class_name: str = ""

    def get_text_config(self) -> HFConfig:
        """PretrainedConfig.get_text_config(): the one text sub-config set, else the config itself."""
        found = [name for name in _TEXT_CONFIG_NAMES if isinstance(self.get(name), HFConfig)]
        if len(found) > 1:
            raise ValueError(f"Multiple valid text configs were found in the model config: {found}")
        return self[found[0]] if found else self

    def to_dict(self) -> dict[str, Any]:
        return {key: value.to_dict() if isinstance(value, HFConfig) else copy.deepcopy(value) for key, value in self.items()}


def needs_transformers(class_name: str, raw: Any) -> bool:
    """Whether this config leaves unset a field its class derives in a way the data does not
    capture (a layer-type list, a sub-config built from top-level keys): then only transformers'
    own class gives the same answer (`build_with_transformers`)."""
    spec = table()["classes"].get(class_name)
    if spec is None or not isinstance(raw, dict):
        return True
    if any(raw.get(key) is None for key in spec["opaque"]):
        return True
    for key, formula in spec["derived"].items():
        if formula[0] == "const" and raw.get(key) is not None and raw[key] != formula[1]:
            return True  # a field the class sets itself (Qwen2's sliding_window): transformers decides
    for key, sub in spec["sub_configs"].items():
        value = raw.get(key)
        if not isinstance(value, dict):
            return True
        name = class_for(value.get("model_type")) if sub == "AutoConfig" else sub
        if name is not None and needs_transformers(name, value):
            return True
    return False


def parse(class_name: str, raw: dict[str, Any]) -> HFConfig:
    """`cls(**raw)`: from the generated data where it decides every field, else by transformers."""
    return build_with_transformers(raw) if needs_transformers(class_name, raw) else build(class_name, raw)


def build_with_transformers(raw: dict[str, Any]) -> HFConfig:
    """transformers' own class for `raw["model_type"]` (imported only here: seconds of import)."""
    from transformers import CONFIG_MAPPING

    return from_transformers(CONFIG_MAPPING[raw["model_type"]](**copy.deepcopy(raw)))


def from_transformers(config: Any) -> HFConfig:
    """A transformers config as `build` gives it: a dict of every attribute, sub-configs as their own."""
    plain = HFConfig(config.to_dict())
    plain.class_name = type(config).__name__
    for key in list(plain):
        value = getattr(config, key, None)
        if hasattr(value, "to_dict") and hasattr(value, "attribute_map"):
            plain[key] = from_transformers(value)
    for alias in type(config).attribute_map:
        plain[alias] = getattr(config, alias, None)
    for name in dir(type(config)):  # properties (NemotronH's num_hidden_layers) are not in to_dict()
        if name not in plain and not name.startswith("_") and isinstance(getattr(type(config), name, None), property):
            try:
                value = getattr(config, name)
            except Exception:
                continue
            if value is None or isinstance(value, (bool, int, float, str, list, dict)):
                plain[name] = value
    return plain


def build(class_name: str, raw: dict[str, Any]) -> HFConfig:
    """`cls(**raw)` for the class named `class_name`, from its generated data; raises
    ValueError/KeyError/AttributeError where the class would (the caller names the key at fault)."""
    spec = table()["classes"][class_name]
    given = copy.deepcopy(raw)  # transformers fills nested dicts in place; never the caller's
    for alias, target in spec["attribute_map"].items():
        if alias in given:
            given[target] = given.pop(alias)
    config = HFConfig({**table()["base_fields"], **spec["fields"], "model_type": spec["model_type"]})
    config.class_name = class_name
    config.update(given)
    config["model_type"] = spec["model_type"] or config.get("model_type")  # a class attribute in transformers
    for key, sub in spec["sub_configs"].items():
        config[key] = _sub_config(sub, config.get(key), key)
    for key, formula in spec["derived"].items():
        if config.get(key) is None:
            config[key] = _derive(formula, config)
    for key, value in given.items():
        if key in spec["types"] and key not in spec["sub_configs"]:
            check_type(key, value, spec["types"][key])
    if spec["rope"]:
        _standardize_rope(config, spec, given)
    _validate(config, spec)
    for alias, target in spec["attribute_map"].items():
        config[alias] = config.get(target)
    return config


def _derive(formula: list[Any], config: HFConfig) -> Any:
    kind, *inputs = formula
    if kind == "const":
        return inputs[0]
    values = [config.get(name) for name in inputs]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    if kind == "copy":
        return values[0]
    if kind == "sum":
        return values[0] + values[1]
    return values[0] // values[1]  # floordiv: by zero raises, as the class's __post_init__ does


def _sub_config(sub: str, value: Any, key: str) -> Any:
    if isinstance(value, HFConfig):
        return value
    if sub == "AutoConfig":
        name = class_for(value.get("model_type")) if isinstance(value, dict) else None
        return parse(name, value) if name else value
    if value is None:
        return build(sub, {})
    if isinstance(value, dict):
        return parse(sub, value)
    raise AttributeError(f"'{type(value).__name__}' object has no attribute 'to_dict' ({key})")


def _standardize_rope(config: HFConfig, spec: dict[str, Any], given: dict[str, Any]) -> None:
    """convert_rope_params_to_dict + standardize_rope_params, for a flat (not per-layer) dict."""
    params = given.pop("rope_scaling", None) or config.get("rope_parameters") or {}
    config.pop("rope_scaling", None)
    if not isinstance(params, dict):
        raise AttributeError(f"'{type(params).__name__}' object has no attribute 'setdefault'")
    labels = config.get("layer_types") or ()
    nested = [key for key in params if isinstance(labels, (list, tuple)) and key in labels]
    theta = given.get("rope_theta", config.get("rope_theta", spec["default_theta"]))
    partial = config.get("partial_rotary_factor")
    groups = [params[key] for key in nested if isinstance(params[key], dict)] or ([params] if not nested else [])
    for group in groups:
        group.setdefault("rope_theta", theta)
        if partial is not None:
            group.setdefault("partial_rotary_factor", partial)
        if not (group.get("rope_type") or group.get("type")) and not (params or theta):
            continue
        group.setdefault("rope_type", group.get("type", "default"))
        if spec["default_rope_type"] != "default" and group["rope_type"] == "default":
            group["rope_type"] = spec["default_rope_type"]
        if group["rope_type"] in _ROPE_WITH_ORIGINAL_LENGTH:
            if "original_max_position_embeddings" in config and config.get("original_max_position_embeddings") is not None:
                group["original_max_position_embeddings"] = config["original_max_position_embeddings"]
            elif "max_position_embeddings" not in config:
                raise AttributeError(f"'{config.class_name}' object has no attribute 'max_position_embeddings'")
            else:
                group.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
    config["rope_parameters"] = params
    config.pop("rope_theta", None) if "rope_theta" not in spec["fields"] else None
    config["_rope_ignore"] = sorted(set(spec["rope_ignore_keys"]) | ({"partial_rotary_factor"} if partial is not None else set()))


_SIMPLE = {"bool": bool, "int": int, "float": float, "str": str, "dict": dict, "list": list}


def check_type(name: str, value: Any, tree: Any) -> None:
    """huggingface_hub's strict `type_validator` over a JSON value (its messages, its rules: an
    int is not a bool, a float field refuses an int), from the tree gen_hf_configs.type_tree wrote."""
    if tree == "any":
        return
    if tree == "null":
        if value is not None:
            raise TypeError(f"Field '{name}' expected None, got {type(value).__name__}")
        return
    if isinstance(tree, str):
        expected = _SIMPLE.get(tree)
        if expected is None or (expected is int and isinstance(value, bool)) or not isinstance(value, expected):
            raise TypeError(f"Field '{name}' expected {tree}, got {type(value).__name__} (value: {value!r})")
        return
    kind = tree[0]
    if kind == "union":
        errors = []
        for member in tree[1]:
            try:
                return check_type(name, value, member)
            except TypeError as exc:
                errors.append(str(exc))
        raise TypeError(f"Field '{name}' with value {value!r} doesn't match any type in {tree[2]}. Errors: {'; '.join(errors)}")
    if kind == "literal":
        if value not in tree[1] or any(value == v and type(value) is not type(v) for v in tree[1] if isinstance(v, bool) or isinstance(value, bool)):
            raise TypeError(f"Field '{name}' expected one of {tree[2]}, got {value}")
        return
    _check_container(name, value, tree)


def _check_container(name: str, value: Any, tree: list[Any]) -> None:
    kind = tree[0]
    if kind in ("list", "sequence"):
        if not isinstance(value, list) and not (kind == "sequence" and isinstance(value, str)):
            raise TypeError(f"Field '{name}' expected a {'list' if kind == 'list' else 'Sequence'}, got {type(value).__name__}")
        for i, item in enumerate(value):
            check_type(f"{name}[{i}]", item, tree[1])
    elif kind == "dict":
        if not isinstance(value, dict):
            raise TypeError(f"Field '{name}' expected a dict, got {type(value).__name__}")
        for key, item in value.items():
            check_type(f"{name}.key", key, tree[1])
            check_type(f"{name}[{key!r}]", item, tree[2])


def _validate(config: HFConfig, spec: dict[str, Any]) -> None:
    for name, (low, high, exclude_low, exclude_high) in spec["intervals"].items():
        value = config.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if low is not None and (value < low or (exclude_low and value == low)):
                raise ValueError(f"Value for {name} must be greater {'than' if exclude_low else 'or equal to'} {low}, got {value}")
            if high is not None and (value > high or (exclude_high and value == high)):
                raise ValueError(f"Value for {name} must be smaller {'than' if exclude_high else 'or equal to'} {high}, got {value}")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if spec["divides_heads"] and isinstance(hidden, int) and isinstance(heads, int) and hidden % heads:  # 0 heads: ZeroDivisionError, as there
        raise ValueError(f"The hidden size ({hidden}) is not a multiple of the number of attention heads ({heads}).")
    _validate_layer_types(config)
    ignore = set(config.pop("_rope_ignore", ()))
    if spec["rope"]:
        _validate_rope(config, ignore)


def _validate_layer_types(config: HFConfig) -> None:
    """PretrainedConfig.validate_layer_type: known layer types, one per layer (its early return
    when `layer_types` is unset skips `mlp_layer_types` too)."""
    for key, allowed in table()["allowed_layer_types"].items():
        layers = config.get(key)
        if layers is None or "num_hidden_layers" not in config:
            return
        if not isinstance(layers, list) or not all(isinstance(t, str) and t in allowed for t in layers):
            raise ValueError(f"The `{key}` entries must be in {set(allowed)} but got {layers}")
        if config["num_hidden_layers"] is not None and config["num_hidden_layers"] != len(layers):
            raise ValueError(f"`num_hidden_layers` ({config['num_hidden_layers']}) must be equal to the number of `{key}` ({len(layers)})")


def _validate_rope(config: HFConfig, ignore: set[str]) -> None:
    """RotaryEmbeddingConfigMixin.validate_rope: required keys per type, even rotary dimension."""
    params = config.get("rope_parameters")
    if not params:
        return
    labels = config.get("layer_types") or ()
    nested = [key for key in params if isinstance(labels, (list, tuple)) and key in labels]
    groups = {key: params[key] for key in nested} if nested else {"full_attention": params}
    head_dim = config.get("head_dim")
    for layer_type, group in groups.items():
        if group is None:
            continue
        rope_type = group.get("rope_type", group.get("type", "default"))
        group["rope_type"] = rope_type
        required = set(ROPE_REQUIRED_KEYS.get(rope_type, ()))
        received = set(group) - {"type"} - ignore
        missing = required - received
        if missing:
            raise KeyError(f"Missing required keys in `rope_parameters` for 'rope_type'='{rope_type}': {missing}")
        partial = group.get("partial_rotary_factor", 1.0)
        if isinstance(head_dim, int) and head_dim > 4 and head_dim % 2 and isinstance(partial, (int, float)) and int(head_dim * partial) == head_dim:
            raise ValueError(f"RoPE requires an even rotary dimension, but got `head_dim`={head_dim} with "
                             f"`partial_rotary_factor`={partial} for `{layer_type}`.")
