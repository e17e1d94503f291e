"""One vLLM release's facts, as data generated from its own source (`scripts/refresh_vllm_facts.py`).

The operator never imports vLLM or torch; everything it knows about a release — which
architectures it can load, which methods and SpeculativeConfig keys it takes, which server flags
exist — is read from `data/<version>.json` here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from typing import Any, Iterable

from specdeploy.vllm.release_logic import ReleaseLogic
from specdeploy.vllm.releases import RELEASE_LOGIC


@dataclass(frozen=True)
class ServerFlag:
    """One `vllm serve` flag: its canonical name, every spelling, and how many values follow."""

    name: str
    names: tuple[str, ...]
    nargs: int | str  # 0 (boolean), 1, "?", "+" or "*" as argparse counts them
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BatchDefaults:
    """`vllm serve`'s batch limits on one GPU (engine/arg_utils.py `get_batch_defaults`), and the
    tier of the release's data that gave them, in words."""

    max_num_batched_tokens: int
    max_num_seqs: int
    tier: str


class VllmFacts:
    """What one vLLM release accepts, read from its generated data file."""

    def __init__(self, data: dict[str, Any]):
        self._data = data
        self.version: str = data["vllm_version"]
        # model_types vLLM runs with MLA when kv_lora_rank is set
        # (model_arch_config_convertor.py ModelArchConfigConvertorBase.is_deepseek_mla).
        self.mla_model_types: frozenset[str] = frozenset(data["mla_model_types"])
        # Draft model_types vLLM treats as MTP (config/speculative.py MTPModelTypes).
        self.mtp_model_types: frozenset[str] = frozenset(data["mtp_model_types"])
        # Every `method` SpeculativeConfig accepts (config/speculative.py SpeculativeMethod).
        self.speculative_methods: frozenset[str] = frozenset(data["speculative_methods"])
        # SpeculativeConfig's init fields: type, bounds, choices, default.
        self.speculative_fields: dict[str, dict[str, Any]] = data["speculative_config_fields"]
        # Transformers classes vLLM serves through its Transformers backend (registry.py).
        self.transformers_backend: frozenset[str] = frozenset(data["transformers_backend_architectures"])
        self.logic: ReleaseLogic = RELEASE_LOGIC[self.version]
        # CacheConfig's defaults (config/cache.py): block size, gpu_memory_utilization.
        self.memory_defaults: dict[str, Any] = data["memory_defaults"]
        # `vllm serve`'s batch limits by GPU memory and name (engine/arg_utils.py get_batch_defaults).
        self._batch_tiers: list[dict[str, Any]] = data["batch_defaults"]["tiers"]
        # 0.34.0 on: the per-method SpeculatorConfig classes (v1/worker/gpu/spec_decode/); {} before.
        self._speculators: dict[str, Any] = data.get("speculators", {})

    @classmethod
    def load(cls, version: str) -> "VllmFacts":
        text = resources.files(__package__).joinpath("data", f"{version}.json").read_text(encoding="utf-8")
        return cls(json.loads(text))

    def __repr__(self) -> str:
        return f"VllmFacts({self.version})"

    # -- model registry (vllm/model_executor/models/registry.py) --------------------------
    def _arch(self, arch: str) -> dict[str, Any] | None:
        return self._data["architectures"].get(arch)

    def is_supported_architecture(self, arch: str) -> bool:
        """The registry has this architecture, as a model or as a speculative draft."""
        return self._arch(arch) is not None

    def any_supported(self, architectures: Iterable[str]) -> bool:
        """vLLM tries each listed architecture in turn, then (when none is registered) the first
        through its Transformers backend (registry.py inspect_model_cls)."""
        archs = list(architectures)
        if any(self.is_supported_architecture(a) for a in archs):
            return True
        return bool(archs) and archs[0] in self.transformers_backend

    def supports_pipeline_parallel(self, arch: str) -> bool:
        """The model class implements SupportsPP (ModelConfig.verify_with_parallel_config raises
        NotImplementedError for pipeline_parallel_size > 1 otherwise). Unknown archs: False."""
        info = self._arch(arch)
        return bool(info and info["supports_pp"])

    def is_mla_model_type(self, model_type: str | None) -> bool:
        return model_type in self.mla_model_types

    # -- memory defaults (config/cache.py CacheConfig) ------------------------------------------
    @property
    def default_block_size(self) -> int:
        """CacheConfig.DEFAULT_BLOCK_SIZE: 16 up to 0.33.0, 64 from 0.34.0."""
        return int(self.memory_defaults["block_size"])

    @property
    def default_gpu_memory_utilization(self) -> float:
        """What vLLM uses on a GPU when --gpu-memory-utilization is not given: 0.92, or from 0.34.0
        `resolved_gpu_memory_utilization` with the extensible KV cache, on by default on CUDA and
        ROCm (1.0)."""
        extensible = self.memory_defaults.get("gpu_memory_utilization_extensible_kv_cache")
        if self.logic.extensible_kv_cache_on_gpu and extensible is not None:
            return float(extensible)
        return float(self.memory_defaults["gpu_memory_utilization"])

    def memory_assumptions(self) -> dict[str, Any]:
        """The release's memory defaults a plan assumes, in the plan's words."""
        return {
            "vllmVersion": self.version,
            "defaultBlockSize": self.default_block_size,
            "defaultGpuMemoryUtilization": self.default_gpu_memory_utilization,
            "kvCacheSizing": ("extensible: sized from the memory free after CUDA-graph capture"
                              if self.logic.extensible_kv_cache_on_gpu else "profiled: budget minus the profiled peak"),
        }

    def batch_defaults(self, memory_gib: float, names: Iterable[str] = ()) -> BatchDefaults:
        """The batch limits vLLM picks on a GPU of `memory_gib` whose driver name is one of `names`
        (`get_batch_defaults` tests the lower-cased device name: any A100 keeps the small tier).
        With no name known, memory alone decides: the larger limits, which never count fewer
        tokens in flight than vLLM keeps."""
        lowered = [n.lower() for n in names]
        passed_over: list[str] = []
        upper: int | None = None
        for tier in self._batch_tiers:
            low = tier["min_memory_gib"]
            if memory_gib >= low:
                named = [s for s in tier["unless_name_contains"] if any(s in n for n in lowered)]
                if not named:
                    words = f"{low}-{upper} GiB" if low and upper else f">= {low} GiB" if low else f"< {upper} GiB"
                    return BatchDefaults(tier["max_num_batched_tokens"], tier["max_num_seqs"],
                                         "; ".join([words] + passed_over))
                passed_over.append(f"{named[0]!r} in its name keeps it out of >= {low} GiB")
            upper = low
        raise ValueError(f"vLLM {self.version}'s batch tiers cover no GPU of {memory_gib} GiB")

    # -- speculators (0.34.0: v1/worker/gpu/spec_decode/speculator_config.py) -------------------
    @property
    def plugin_methods(self) -> bool:
        """Plugins may register methods (`register_speculative_method`): a method name this
        release does not know may still be one the image registers."""
        return bool(self._speculators.get("plugin_methods"))

    @property
    def method_specific_options(self) -> tuple[str, ...]:
        """`_METHOD_SPECIFIC_OPTIONS`: keys only a speculator listing them in supported_options takes."""
        return tuple(self._speculators.get("method_specific_options", ()))

    def declared_speculator(self, architectures: Iterable[str]) -> dict[str, Any] | None:
        """The speculator the first registered draft architecture declares
        (`speculator_config_class`; registry.py inspect_model_cls picks the first registered)."""
        for arch in architectures:
            info = self._arch(arch)
            if info is not None:
                name = info.get("speculator")
                return self._speculators["classes"][name] if name else None
        return None

    def speculator(self, method: str, architectures: Iterable[str] = ()) -> dict[str, Any] | None:
        """The SpeculatorConfig vLLM settles on (`get_speculator_config_class`): the one the draft
        declares when it is for this method, else the method's own. None before 0.34.0."""
        if not self._speculators or method not in self._speculators["by_method"]:
            return None
        declared = self.declared_speculator(architectures)
        if declared is not None and declared["base_method"] == method:
            return declared
        return self._speculators["classes"][self._speculators["by_method"][method]]

    def default_k_cap(self, method: str) -> int | None:
        """The most k a method defaults to when k comes from an option (0.34.0 suffix/config.py:
        min(8, suffix_decoding_max_tree_depth)); None: the option's value itself."""
        return self._speculators.get("default_k_caps", {}).get(method)

    # -- the server's CLI (vllm/entrypoints/.../cli_args.py make_arg_parser) ---------------
    @cached_property
    def server_flags(self) -> dict[str, ServerFlag]:
        """Every spelling of every flag -> the flag."""
        out: dict[str, ServerFlag] = {}
        for name, entry in self._data["server_flags"].items():
            flag = ServerFlag(name, tuple(entry["names"]), entry["nargs"],
                              tuple(entry["choices"]) if entry.get("choices") else None)
            for spelling in flag.names:
                out[spelling] = flag
        return out

    def resolve_flag(self, key: str) -> tuple[ServerFlag | None, str | None]:
        """The flag `key` names as FlexibleArgumentParser reads it (vllm/utils/argparse_utils.py:
        underscores as dashes, unique long-flag prefixes), or why none."""
        flags = self.server_flags
        if key.startswith("--"):
            key = "--" + key[2:].replace("_", "-")
        if key in flags:
            return flags[key], None
        if key.startswith("--") and len(key) > 2:
            matches = {flags[n].name for n in flags if n.startswith(key)}
            if len(matches) == 1:
                return flags[matches.pop()], None
            if matches:
                return None, f"is ambiguous in vLLM {self.version}'s CLI (could be {', '.join(sorted(matches))})"
        return None, f"is not a vLLM {self.version} server flag (vllm serve --help lists them)"

    def option_default(self, key: str) -> Any:
        """SpeculativeConfig's default for an option (None when it has none or no such field)."""
        return self.speculative_fields.get(key, {}).get("default")
