"""vLLM's own verdict on a grid case: the preflight judge (`specdeploy/preflight/vllm_judge.py`,
the file the preflight Job runs in the image), asked in this process, then the load checks.

A case becomes the args a pod would get: `<target> --tensor-parallel-size TP
--speculative-config {"method", "model": <draft>, "num_speculative_tokens",
"draft_tensor_parallel_size", ...}`, with each model's config.json in a temporary directory
(the Hub is never contacted: HF_HUB_OFFLINE=1). The judge's args and config stages decide
first: the image's `vllm serve` parser and `create_engine_config` (ModelConfig, ParallelConfig,
SpeculativeConfig, which builds and verifies the draft's configs).

The load stage (target and draft built by vLLM's own classes on the meta device) costs 1-5 s
a case on 2 cores: 843 cases x 3 releases would not fit CI. The grid therefore applies the
load failures the real build produces as cheap checks on the judge's own VllmConfig (the real
`QKVParallelLinear` at the TP the layers read, the DSpark heads' required attributes), and
`test_parity.py::test_load_checks_agree_with_the_meta_build` asks the judge's real load
stage on a bounded sample (every case the checks refuse, and one accepted case per
pair/method) and requires the same verdict. Kimi-K3's `auto_map` remote
code is not needed: vLLM registers its own `KimiK3Config` (and `K3DSparkConfig`) for those
model_types in `transformers_utils/config.py` `_CONFIG_REGISTRY`.

Suffix decoding: vLLM (up to 0.33.0; 0.34.0's suffix is native) refuses `method="suffix"` unless the optional `arctic-inference`
package is importable (a packaging fact of the image, not a property of the models; its
sdist needs a native build that the CPU test venv does not do). Only here, not in the Job,
that package check is reported as passed so that vLLM judges the rest of the suffix
configuration.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

from specdeploy.preflight.vllm_judge import CannotJudgeOnCpu, Judge, Refused, Request, error_text

LOAD_STAGES = ("args", "config", "load")  # the grid asks whether vLLM can build the pair


@dataclass(frozen=True)
class Verdict:
    ok: bool
    stage: str  # the judge's stage that refused it ("" when ok)
    error: str  # vLLM's own error text

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error}


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
    """One temporary directory per model; one Judge for the whole grid."""

    def __init__(self, configs: dict[str, dict[str, Any]]):
        self._tmp = tempfile.TemporaryDirectory(prefix="specdeploy-parity-")
        self.dirs: dict[str, str] = {}
        for name, cfg in configs.items():
            d = Path(self._tmp.name) / name
            d.mkdir()
            (d / "config.json").write_text(json.dumps(cfg))
            self.dirs[name] = str(d)
        self._judge = Judge()

    def close(self) -> None:
        self._judge.close()
        self._tmp.cleanup()

    def request(self, target: str, draft: str | None, method: str, k: int | None, tp: int,
                draft_tp: int | None, extra: dict[str, Any] | None = None) -> Request:
        """The args a pod would get for the case."""
        speculative: dict[str, Any] = {"method": method, **(extra or {})}
        if k is not None:  # omitted, as from a --speculative-config without the key
            speculative["num_speculative_tokens"] = k
        if draft is not None:
            speculative["model"] = draft
        if draft_tp is not None:
            speculative["draft_tensor_parallel_size"] = draft_tp
        args = [target, "--tensor-parallel-size", str(tp), "--speculative-config", json.dumps(speculative)]
        return Request(args, {name: self.dirs[name] for name in (target, draft) if name is not None})

    def judge(self, request: Request) -> Verdict:
        """The judge's args and config stages, then the load checks on its VllmConfig."""
        with _arctic_inference_present():
            try:
                config = self._judge.engine_config(request)
            except Refused as refused:
                return Verdict(False, refused.stage, str(refused))
        tp = config.parallel_config.tensor_parallel_size
        target_cfg, spec = config.model_config, config.speculative_config
        try:
            _kv_check(target_cfg, tp)
        except Exception as exc:  # noqa: BLE001 - AssertionError from vllm.distributed.utils.divide
            return Verdict(False, "load", error_text(exc))
        draft_cfg = spec.draft_model_config if spec is not None else None
        if draft_cfg is not None and draft_cfg is not target_cfg:
            # Every parallel layer reads the global TP group (get_tensor_model_parallel_world_size()),
            # the target's: load_eagle_model builds with the target's VllmConfig, and the draft-TP
            # parallel_config load_dspark_model / StandaloneARSpeculator pass is read by no layer.
            try:
                _kv_check(draft_cfg, tp)
            except Exception as exc:  # noqa: BLE001
                return Verdict(False, "load", error_text(exc))
            missing = _dspark_markov_rank_missing(draft_cfg)
            if missing:
                return Verdict(False, "load", missing)
        missing = _dspark_v4_head_missing(draft_cfg) if draft_cfg is not None else ""
        if missing:
            return Verdict(False, "load", missing)
        return Verdict(True, "", "")

    def built(self, request: Request) -> Verdict:
        """The judge through its real load stage: target and draft built on the meta device."""
        with _arctic_inference_present():
            try:
                verdict = self._judge.judge(request, stages=LOAD_STAGES)
            except CannotJudgeOnCpu as exc:  # a layer only a GPU builds: no verdict here
                return Verdict(True, "", f"not judged at load on CPU: {exc}")
        return Verdict(verdict.ok, verdict.stage or "", verdict.error or "")
