"""Reading a model config the way vLLM does: `getattr(hf_config, key, None)` on a transformers
config object, or the same key of a raw config.json dict."""

from __future__ import annotations

from typing import Any

# Where a config states its routed experts' count, in the order vLLM's convertor reads them
# (model_arch_config_convertor.py get_num_experts; Ernie and Step write moe_num_experts).
EXPERT_COUNT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")


def config_value(obj: Any, key: str, default: Any = None) -> Any:
    """`obj.key` or `obj[key]`; `default` when absent or null (configs write null for "unset")."""
    value = obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)
    return default if value is None else value


def first_value(obj: Any, keys: tuple[str, ...], default: Any = None) -> Any:
    """The first of `keys` that is set (vLLM's convertors try several names per field)."""
    for key in keys:
        value = config_value(obj, key)
        if value is not None:
            return value
    return default
