"""vLLM's own KV-cache need for a target (and its draft), from its own model classes on the
meta device (no weights, no GPU).

For one case:
1. `EngineArgs(model=<dir>, speculative_config=..., tensor_parallel_size=TP,
   distributed_executor_backend="external_launcher", load_format="dummy",
   max_model_len=...).create_engine_config()` - the VllmConfig a worker gets;
2. vLLM's parallel groups are made to report size TP (rank 0), without torch.distributed;
3. `initialize_model(vllm_config)` under `torch.device("meta")` builds the target; the
   draft is built by the method's own loader (`load_eagle_model` for eagle/eagle3/mtp,
   `load_dflash_model`, `load_dspark_model`) with `get_model` reduced to
   `initialize_model` (weights are not the question);
4. `current_platform.update_block_size_for_backend` (the hybrid block alignment the
   executor runs), then the GPU runner's `attn_utils.get_kv_cache_spec`,
   `resolve_kv_cache_layout`, `kv_cache_utils.get_kv_cache_groups`; the need is
   `_max_memory_usage_bytes_from_groups` + `_pool_bytes_per_block` (the null block), the
   figure `get_kv_cache_configs` hands `_check_enough_kv_cache_memory`. The judge also
   calls `get_kv_cache_configs` with exactly that many bytes (passes) and one byte less
   (must raise vLLM's "KV cache is needed" error), so the figure is vLLM's verdict.

What the CPU build lacks, and what stands in for it (none of it touches a cache spec):
- `cutlass`/`cuda` (CUTLASS DSL kernels imported while building Kimi-K3) and `torchvision`
  (the image processors the Qwen3.5 and Llama-4 VL wrappers import): empty modules; the
  registry's model inspection, which vLLM runs in a subprocess, runs in this process so
  that it sees them;
- `torch.cuda.Stream`/`Event`, `torch.accelerator.empty_cache`: no-ops;
- MoE and fp8 kernels: no CPU kernel for these formats, so the judge strips
  `quantization_config` (it changes weights, not the KV cache) and stubs the unquantized
  MoE backend choice;
- sparse MLA: the CPU platform refuses `use_sparse`; the GPU's FLASHMLA_SPARSE backend
  class is selected instead, as on a GPU;
- `HAS_TRITON` is reported true so vLLM picks its model runner as on a GPU (V2 where it
  supports the method; DSpark needs it);
- the CPU MLA backend refuses hybrid-aligned block sizes (`_check_aligned_block_size`);
  GPU MLA backends accept them, so that check is skipped.
CPU facts that do change the figure are read from the VllmConfig and handed to our side
explicitly: block size (128 for CPU attention, 16 for CPU MLA), max_num_batched_tokens
(sliding-window caps), the SSM state dtype (the CPU platform stores GatedDeltaNet's recurrent
state in float32; a GPU keeps the model dtype), and the Mamba cache mode (CPU turns prefix caching off for MLA,
so hybrid MLA models are judged with prefix caching off: Mamba mode "none" instead of the
GPU's "align")."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Nemotron-H's relu2 MLP (is_act_and_mul=False) has no CPU kernel.
CPU_ONLY_FAILURES = ("requires a CUDA device", "is not implemented on CPU", "is supported only for CUDA")
_GROUPS = ("_WORLD", "_TP", "_PP", "_DP", "_EP", "_DCP", "_PCP", "_ETP", "_EPLB", "_INNER_DP_WORLD", "_ENGRAM_DP")


@dataclass(frozen=True)
class MemoryVerdict:
    ok: bool
    stage: str  # "" | "config" | "load" | "kv-cache" | "cpu" (a GPU-only layer the CPU build cannot make)
    error: str
    need_bytes: int = 0
    block_size: int = 0  # after the hybrid alignment
    requested_block_size: int = 0  # before it: the backend's (or the CacheConfig's) block size
    in_flight_tokens: int = 0
    mamba_align_mode: bool = False
    mamba_ssm_cache_dtype: str = "auto"
    spec_counts: tuple[tuple[str, int], ...] = ()


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for CUDA-only packages that vLLM imports while building a model."""

    def __init__(self, *roots: str) -> None:
        self.roots = frozenset(roots)

    def find_spec(self, name, path, target=None):  # noqa: ARG002
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module):  # noqa: ARG002
        return None


def _group(size: int) -> SimpleNamespace:
    group = SimpleNamespace(world_size=size, rank_in_group=0, rank=0, ranks=list(range(size)), local_rank=0,
                            cpu_group=None, is_first_rank=True, is_last_rank=True, first_rank=0,
                            last_rank=size - 1, unique_name="specdeploy-meta", use_custom_op_call=False)
    group.size = lambda: size
    group.device_group = SimpleNamespace(size=lambda: size, rank=lambda: 0)
    return group


def _inspected(build: Any) -> Any:
    """`build()`, once more if vLLM's registry failed to inspect or load the architecture. The
    registry caches a failed lookup for the process (`_try_inspect_model_cls` and
    `_try_load_model_cls` are lru_caches), so one failure outside the judge (another test's
    ModelConfig importing a VL class without the torchvision stand-in) or a transient one (an
    import starved of memory on a loaded machine) would turn every later case of that
    architecture into a refusal. A failure that repeats is vLLM's
    verdict, with the inspection's own error (logged by the registry) in the message."""
    import logging

    from vllm.model_executor.models import registry

    try:
        return build()
    except ValueError as exc:
        if "failed to be inspected" not in str(exc):
            raise
    _forget_failed_lookups()
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                errors.append(_first_line(record.exc_info[1]))

    handler = Collect(logging.ERROR)
    logging.getLogger(registry.__name__).addHandler(handler)
    try:
        return build()
    except ValueError as exc:
        if errors:
            raise ValueError(f"{_first_line(exc)} (inspection: {errors[-1]})") from exc
        raise
    finally:
        logging.getLogger(registry.__name__).removeHandler(handler)


def _forget_failed_lookups() -> None:
    """Clear the registry's per-process caches of model-class imports and inspections, which
    also keep failures (a None)."""
    from vllm.model_executor.models import registry

    registry._try_inspect_model_cls.cache_clear()
    registry._try_load_model_cls.cache_clear()


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if type(exc).__name__ == "ValidationError" and len(lines) > 1:
        lines = lines[1:2]
    return f"{type(exc).__name__}: {' '.join(lines[:1])}".split(" [type=")[0][:300]


def _write(config: dict[str, Any], root: Path, name: str) -> str:
    config = dict(config)
    config.pop("quantization_config", None)
    if isinstance(config.get("text_config"), dict):
        config["text_config"] = {k: v for k, v in config["text_config"].items() if k != "quantization_config"}
    directory = root / name
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def _need_and_check(config: Any, specs: dict[str, Any]) -> tuple[int, Any]:
    """vLLM's need for one max_model_len request (null block included) and its own check.

    0.32 keeps grouping and the check in `v1/core/kv_cache_utils.py`; 0.33 moves them to
    `v1/core/kv_cache_planning.py` behind a `KVCacheConfigBuilder` and groups the layers once,
    before the check (`v1/engine/core.py`: `get_global_kv_cache_groups`, then
    `get_kv_cache_configs(..., global_kv_cache_groups)`)."""
    try:
        from vllm.v1.core import kv_cache_planning as planning
        from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    except ImportError:
        from vllm.v1.core import kv_cache_utils

        groups = kv_cache_utils.get_kv_cache_groups(config, dict(specs))
        need = (kv_cache_utils._max_memory_usage_bytes_from_groups(config, groups)
                + kv_cache_utils._pool_bytes_per_block(config, groups))
        return need, lambda available: kv_cache_utils.get_kv_cache_configs(config, [specs], [available])
    groups = planning.get_global_kv_cache_groups(config, [specs])
    builder = get_kv_cache_config_builder(config)
    need = (planning._max_memory_usage_bytes_from_groups(builder, config, groups)
            + planning._pool_bytes_per_block_from_builder(builder, config, groups))
    return need, lambda available: planning.get_kv_cache_configs(config, [specs], [available], groups)


class MemoryJudge:
    """One process-wide set of stand-ins; one temporary directory per judged case."""

    def __init__(self) -> None:
        import torch
        import vllm.config.vllm as config_vllm
        from vllm.platforms import current_platform

        self._torch = torch
        config_vllm.HAS_TRITON = True
        original = type(current_platform).get_attn_backend_cls.__func__

        def select(cls, selected_backend, attn_selector_config, num_heads=None):
            if attn_selector_config.use_sparse:
                from vllm.v1.attention.backends.registry import AttentionBackendEnum

                return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()
            return original(cls, selected_backend, attn_selector_config=attn_selector_config, num_heads=num_heads)

        type(current_platform).get_attn_backend_cls = classmethod(select)
        from vllm.v1.worker.workspace import init_workspace_manager

        init_workspace_manager(torch.device("meta"))
        self._stand_in = _StandIn("cutlass", "cuda", "torchvision")
        self._vision = _StandIn("torchvision")  # tvm_ffi, imported with the engine config, probes `cuda`
        self._gpu_deepseek_v4_heads()
        self._tmp = tempfile.TemporaryDirectory(prefix="specdeploy-memory-")
        _forget_failed_lookups()  # e.g. a VL class that failed to import earlier in this process, before the stand-ins

    def _gpu_deepseek_v4_heads(self) -> None:
        """The CPU build's DeepSeek-V4 DSpark and MTP classes (models/deepseek_v4/cpu/) only raise
        NotImplementedError; the GPU's (models/deepseek_v4/nvidia/) are what a pod builds, and
        their __init__ reads the draft config as it will there."""
        import vllm.models.deepseek_v4 as deepseek_v4

        with self._stand_ins(self._stand_in):
            from vllm.models.deepseek_v4.nvidia import dspark, mtp
        deepseek_v4.DSparkDeepseekV4ForCausalLM = dspark.DSparkDeepseekV4ForCausalLM
        deepseek_v4.DeepSeekV4MTP = mtp.DeepSeekV4MTP

    def close(self) -> None:
        self._tmp.cleanup()

    def judge(self, name: str, target: dict[str, Any], draft: dict[str, Any] | None, method: str | None,
              k: int, tp: int, max_model_len: int, block_size: int | None = None) -> MemoryVerdict:
        """`block_size`: CacheConfig's, as `--block-size` sets it (None: the platform's default)."""
        from vllm.engine.arg_utils import EngineArgs

        root = Path(tempfile.mkdtemp(dir=self._tmp.name, prefix=name[:40] + "-"))
        speculative = None
        if method:
            speculative = {"method": method, "num_speculative_tokens": k}
            if draft is not None:
                speculative["model"] = _write(draft, root, "draft")
        model = _write(target, root, "target")

        def engine_config(prefix_caching: bool | None) -> Any:
            # The registry inspects a model class in a subprocess (to keep CUDA out of this
            # one); here it runs in-process, where the stand-ins serve the VL models' imports.
            with mock.patch("vllm.transformers_utils.repo_utils.time.sleep"), self._stand_ins(self._vision), \
                    mock.patch("vllm.model_executor.models.registry._run_in_subprocess", lambda fn: fn()):
                return EngineArgs(model=model, skip_tokenizer_init=True, speculative_config=speculative,
                                  tensor_parallel_size=tp, distributed_executor_backend="external_launcher",
                                  load_format="dummy", max_model_len=max_model_len, block_size=block_size,
                                  enable_prefix_caching=prefix_caching).create_engine_config()
        try:
            try:
                config = _inspected(lambda: engine_config(None))
            except Exception as exc:  # noqa: BLE001
                # CPU only: the CPU platform turns prefix caching off for MLA after the hybrid
                # config set Mamba `align` mode, and VllmConfig then refuses its own mamba block
                # size. Without prefix caching (Mamba mode "none") the build is judged as is.
                if "--mamba-block-size can only be set" not in str(exc):
                    raise
                config = _inspected(lambda: engine_config(False))
        except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the verdict
            return MemoryVerdict(False, "config", _first_line(exc))
        try:
            specs = _inspected(lambda: self._build_and_collect(config, tp, method))
        except Exception as exc:  # noqa: BLE001
            # A GPU-only layer (DeepSeek-V4 attention asserts a CUDA device) is no verdict on a pod.
            cpu_only = any(s in str(exc) for s in CPU_ONLY_FAILURES)
            return MemoryVerdict(False, "cpu" if cpu_only else "load", _first_line(exc))
        return self._need(config, specs)

    @contextmanager
    def _stand_ins(self, finder: _StandIn) -> Iterator[None]:
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)

    def _build_and_collect(self, config: Any, tp: int, method: str | None) -> dict[str, Any]:
        import vllm.distributed.parallel_state as parallel_state
        import vllm.model_executor.model_loader as model_loader
        import vllm.v1.worker.gpu.spec_decode.dflash.utils as dflash_utils
        import vllm.v1.worker.gpu.spec_decode.eagle.utils as eagle_utils
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.utils import initialize_model
        from vllm.platforms import current_platform
        from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

        for name in _GROUPS:
            setattr(parallel_state, name, _group(1 if name in ("_PP", "_DP", "_DCP", "_PCP", "_ETP", "_EPLB", "_INNER_DP_WORLD", "_ENGRAM_DP") else tp))

        def build(*, vllm_config, model_config=None, prefix=""):
            return initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)

        with ExitStack() as stack:
            # Only while building: tvm_ffi (imported with the engine config) probes `cuda`.
            stack.enter_context(self._stand_ins(self._stand_in))
            stack.enter_context(set_current_vllm_config(config))
            stack.enter_context(self._torch.device("meta"))
            for target in ("torch.cuda.Stream", "torch.cuda.Event"):
                stack.enter_context(mock.patch(target, mock.MagicMock()))
            stack.enter_context(mock.patch("torch.accelerator.empty_cache"))
            stack.enter_context(mock.patch(
                "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method.select_unquantized_moe_backend",
                return_value=(mock.MagicMock(), mock.MagicMock())))
            model = initialize_model(vllm_config=config)
            if method in ("eagle", "eagle3", "mtp", "dflash", "dspark"):
                from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model

                loader = {"dflash": dflash_utils.load_dflash_model, "dspark": load_dspark_model}.get(method, eagle_utils.load_eagle_model)
                for module in (eagle_utils, dflash_utils, model_loader):
                    stack.enter_context(mock.patch.object(module, "get_model", build))
                loader(model, config)
            self._requested_block_size = config.cache_config.block_size
            with mock.patch.object(type(current_platform), "_check_aligned_block_size"):
                current_platform.update_block_size_for_backend(config)
            return get_kv_cache_spec(config)

    def _need(self, config: Any, specs: dict[str, Any]) -> MemoryVerdict:
        from vllm.config import set_current_vllm_config
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout

        counts: dict[str, int] = {}
        for spec in specs.values():
            counts[type(spec).__name__] = counts.get(type(spec).__name__, 0) + 1
        common = dict(block_size=config.cache_config.block_size, requested_block_size=self._requested_block_size,
                      in_flight_tokens=config.max_in_flight_tokens,
                      mamba_align_mode=config.cache_config.mamba_cache_mode == "align",
                      mamba_ssm_cache_dtype=str(config.cache_config.mamba_ssm_cache_dtype),
                      spec_counts=tuple(sorted(counts.items())))
        try:
            with set_current_vllm_config(config):
                layouts = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(config))]
                resolve_kv_cache_layout(config, [layouts], list(specs.values()))
                need, configs = _need_and_check(config, specs)
                configs(need)
                try:
                    configs(need - 1)
                except ValueError as exc:
                    if "KV cache is needed" not in str(exc):
                        raise
                else:
                    raise AssertionError(f"vLLM accepted {need - 1} bytes: the need is lower than computed")
        except Exception as exc:  # noqa: BLE001
            return MemoryVerdict(False, "kv-cache", _first_line(exc), **common)
        return MemoryVerdict(True, "", "", need_bytes=need, **common)
