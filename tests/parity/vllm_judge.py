"""vLLM's own verdict on a target/draft/method/TP case, from vLLM's own config classes.

A case is accepted by vLLM when all of these pass (each is what `vllm serve` runs before it
takes a GPU, or what a worker runs while building the model):
1. `ModelConfig(model=<dir with the target's config.json>)` constructs;
2. `target.verify_with_parallel_config(ParallelConfig(tensor_parallel_size=TP,
   distributed_executor_backend="external_launcher"))`;
3. the KV-head split of `QKVParallelLinear` (model_executor/layers/linear.py) at TP for a
   non-MLA target: the real class is constructed, with a tiny hidden size, at a patched
   TP world size;
4. `SpeculativeConfig(target_model_config, target_parallel_config, model=<draft dir>,
   method, num_speculative_tokens, draft_tensor_parallel_size)`; its validators build the
   draft ModelConfig and run `draft.verify_with_parallel_config(draft_parallel_config)`;
5. the same `QKVParallelLinear` KV-head split for a non-MLA draft at the draft's TP.

Configs are written to temporary directories (vLLM reads `config.json` from a local dir; the
Hub is never contacted: HF_HUB_OFFLINE=1). Kimi-K3's `auto_map` remote code is not needed:
vLLM 0.32.0 registers its own `KimiK3Config` (and `K3DSparkConfig`) for those model_types in
`transformers_utils/config.py` `_CONFIG_REGISTRY`, so vLLM parses them without
`trust_remote_code`.

Suffix decoding: vLLM (up to 0.33.0) refuses `method="suffix"` unless the optional `arctic-inference`
package is importable (a packaging fact of the image, not a property of the models; its
sdist needs a native build that the CPU test venv does not do). The judge reports that
package check as passed so that vLLM judges the rest of the suffix configuration.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # 0.33.0 has no CPU build: its platform must be told


@dataclass(frozen=True)
class Verdict:
    ok: bool
    stage: str  # which of the checks above refused it ("" when ok)
    error: str  # vLLM's own error text, first line

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error}


def _first_line(exc: BaseException) -> str:
    """The error in one line; pydantic's ValidationError keeps the validator's message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if type(exc).__name__ == "ValidationError" and len(lines) > 1:
        lines = lines[1:2]
    text = f"{type(exc).__name__}: {' '.join(lines[:1])}"
    return text.split(" [type=")[0][:300]


@contextmanager
def _tp_world(size: int) -> Iterator[None]:
    """Rank 0 of a `size`-way TP group, without initialising torch.distributed: every
    vLLM TP accessor reads `parallel_state.get_tp_group()`."""
    from types import SimpleNamespace

    import vllm.distributed.parallel_state as parallel_state

    group = SimpleNamespace(world_size=size, rank_in_group=0)
    with mock.patch.object(parallel_state, "get_tp_group", return_value=group):
        yield


def qkv_split(total_heads: int, total_kv_heads: int, tp: int) -> None:
    """Construct vLLM's QKVParallelLinear at TP `tp`; raises where vLLM would at load."""
    import vllm.model_executor.layers.linear as linear

    with _tp_world(tp):
        linear.QKVParallelLinear(
            hidden_size=8, head_size=2, total_num_heads=total_heads,
            total_num_kv_heads=total_kv_heads, bias=False,
        )


def _kv_check(model_config: Any, tp: int) -> None:
    if model_config.use_mla:
        return  # MLA: one latent KV head, replicated on every rank; no QKVParallelLinear
    heads = model_config.model_arch_config.total_num_attention_heads
    if heads == 0:
        return  # no attention layers (Medusa heads are MLPs): nothing to split
    qkv_split(heads, model_config.get_total_num_kv_heads(), tp)


def _dspark_markov_rank_missing(draft_cfg: Any) -> str:
    """models/qwen3_dspark.py and gemma4_dspark.py read `config.markov_rank` in __init__;
    the architecture is vLLM's own after SpeculativeConfig's rewrite. The meta-device build
    (tests/parity/test_memory_parity.py) confirms this failure from the real class."""
    archs = set(draft_cfg.architectures or ()) | set(getattr(draft_cfg.hf_config, "architectures", None) or ())
    if archs & {"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel"} and not hasattr(draft_cfg.hf_config, "markov_rank"):
        return f"AttributeError: '{type(draft_cfg.hf_config).__name__}' object has no attribute 'markov_rank'"
    return ""


def _dspark_v4_head_missing(draft_cfg: Any) -> str:
    """models/deepseek_v4/nvidia/dspark.py (the GPU class vLLM builds for `DSparkDraftModel`)
    reads these from the draft's hf_config with no default, in this order; the meta-device
    build (tests/parity/test_memory_parity.py) confirms the AttributeError from the real class."""
    hf = draft_cfg.hf_config
    if "DSparkDraftModel" not in set(getattr(hf, "architectures", None) or ()):
        return ""
    for name in ("hidden_size", "hc_mult", "hc_eps", "rms_norm_eps", "num_hidden_layers", "dspark_target_layer_ids",
                 "vocab_size", "index_topk", "head_dim", "dspark_markov_rank"):
        if not hasattr(hf, name):
            return f"AttributeError: '{type(hf).__name__}' object has no attribute '{name}'"
    return ""


def _arctic_inference_present() -> Any:
    """Report the optional package as installed where the release asks for it (up to 0.33.0;
    0.34.0's suffix speculator is native and has no such check)."""
    import vllm.config.speculative as speculative

    if hasattr(speculative, "has_arctic_inference"):
        return mock.patch.object(speculative, "has_arctic_inference", return_value=True)
    return nullcontext()


class VllmJudge:
    """Holds one temp dir per model and the target ModelConfigs (independent of TP)."""

    def __init__(self, configs: dict[str, dict[str, Any]]):
        self._tmp = tempfile.TemporaryDirectory(prefix="specdeploy-parity-")
        self.dirs: dict[str, str] = {}
        for name, cfg in configs.items():
            d = Path(self._tmp.name) / name
            d.mkdir()
            (d / "config.json").write_text(json.dumps(cfg))
            self.dirs[name] = str(d)
        self._targets: dict[str, Any] = {}

    def close(self) -> None:
        self._tmp.cleanup()

    def _target(self, name: str) -> Any:
        if name not in self._targets:
            from vllm.config import ModelConfig

            try:
                self._targets[name] = ModelConfig(model=self.dirs[name], skip_tokenizer_init=True)
            except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the verdict
                self._targets[name] = exc
        return self._targets[name]

    def judge(self, target: str, draft: str | None, method: str, k: int | None, tp: int,
              draft_tp: int | None, extra: dict[str, Any] | None = None) -> Verdict:
        from vllm.config import ParallelConfig, SpeculativeConfig

        target_cfg = self._target(target)
        if isinstance(target_cfg, BaseException):
            return Verdict(False, "target ModelConfig", _first_line(target_cfg))
        try:
            parallel = ParallelConfig(tensor_parallel_size=tp, distributed_executor_backend="external_launcher")
            target_cfg.verify_with_parallel_config(parallel)
        except Exception as exc:  # noqa: BLE001
            return Verdict(False, "target verify_with_parallel_config", _first_line(exc))
        try:
            _kv_check(target_cfg, tp)
        except Exception as exc:  # noqa: BLE001 - AssertionError from vllm.distributed.utils.divide
            return Verdict(False, "target QKVParallelLinear", _first_line(exc))
        kwargs: dict[str, Any] = dict(
            target_model_config=target_cfg, target_parallel_config=parallel, method=method, **(extra or {}),
        )
        if k is not None:  # omitted, as from a --speculative-config without the key
            kwargs["num_speculative_tokens"] = k
        if draft is not None:
            kwargs["model"] = self.dirs[draft]
        if draft_tp is not None:
            kwargs["draft_tensor_parallel_size"] = draft_tp
        try:
            # Local config files do not change between with_retry's attempts: skip its sleeps.
            with _arctic_inference_present(), mock.patch("vllm.transformers_utils.repo_utils.time.sleep"):
                spec = SpeculativeConfig(**kwargs)
        except Exception as exc:  # noqa: BLE001 - ValueError, NotImplementedError, ZeroDivisionError...
            return Verdict(False, "SpeculativeConfig", _first_line(exc))
        draft_cfg = spec.draft_model_config
        if draft_cfg is not None and draft_cfg is not target_cfg:
            # load_eagle_model / load_dflash_model (v1/worker/gpu/spec_decode/) build these
            # drafts with the target's VllmConfig and TP group, whatever the draft TP says.
            built_tp = tp if method in ("eagle", "eagle3", "mtp", "dflash") else spec.draft_parallel_config.tensor_parallel_size
            try:
                _kv_check(draft_cfg, built_tp)
            except Exception as exc:  # noqa: BLE001
                return Verdict(False, "load: draft QKVParallelLinear", _first_line(exc))
            missing = _dspark_markov_rank_missing(draft_cfg)
            if missing:
                return Verdict(False, "load: draft model", missing)
        missing = _dspark_v4_head_missing(draft_cfg) if draft_cfg is not None else ""
        if missing:
            return Verdict(False, "load: draft model", missing)
        return Verdict(True, "", "")
