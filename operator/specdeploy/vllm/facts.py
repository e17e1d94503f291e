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

from specdeploy.vllm.release_logic import RELEASE_LOGIC, ReleaseLogic


@dataclass(frozen=True)
class ServerFlag:
    """One `vllm serve` flag: its canonical name, every spelling, and how many values follow."""

    name: str
    names: tuple[str, ...]
    nargs: int | str  # 0 (boolean), 1, "?", "+" or "*" as argparse counts them
    choices: tuple[str, ...] | None = None


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

    def is_mtp_model_type(self, model_type: str | None) -> bool:
        return model_type in self.mtp_model_types

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

    def speculative_field_choices(self, key: str) -> tuple[str, ...]:
        return tuple(self.speculative_fields.get(key, {}).get("choices", ()))

    def option_default(self, key: str) -> Any:
        """SpeculativeConfig's default for an option (None when it has none or no such field)."""
        return self.speculative_fields.get(key, {}).get("default")
