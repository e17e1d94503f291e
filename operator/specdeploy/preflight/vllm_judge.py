"""vLLM judges a pod's own server args, on CPU, in the pod's own image: the preflight judge.

Run inside the serving image (standard library and the image's vLLM only; nothing of
specdeploy is imported, so the file can be copied into any image):

    python vllm_judge.py REQUEST.json [--verdict-file PATH]

REQUEST.json: {"args": [the vLLM server argv after the entrypoint], "models": {"<model name
as the args name it>": "<local dir holding its config.json>"}, "gpu": {"memoryBytes": int,
"count": int, "deviceName": str (optional)} or null}. It prints one JSON line, also written to PATH (the pod's
termination log, kept under Kubernetes' 4096 bytes):
{"ok", "stage": "args"|"config"|"load"|"memory"|null, "error", "vllmVersion", "memory"}.
Exit 0: vLLM accepts; 1: vLLM refused at `stage`; 2: the judge could not run.

The stages are what `vllm serve` does before and while it takes a GPU:
- args: the image's own `vllm serve` parser (`make_arg_parser`, as `entrypoints/cli/serve.py`
  builds it) and its `validate_parsed_serve_args`;
- config: `AsyncEngineArgs.from_cli_args(args).create_engine_config()`: ModelConfig,
  ParallelConfig, SpeculativeConfig (which builds and verifies the draft's configs), as on
  the GPU: the batch limits `get_batch_defaults` picks for its memory, and none of the CPU
  platform's own rewrites (`_shim_gpu_platform_config`);
- load: target and draft built by vLLM's own classes on the meta device (no weights, no
  GPU) at the args' TP (a faked TP group of that size, rank 0): `initialize_model`, then
  the method's own draft loader (`v1/worker/gpu/spec_decode/*/utils.py`, or the
  StandaloneARSpeculator's `load_draft_model` for draft models);
- memory: the GPU runner's `attn_utils.get_kv_cache_spec` and vLLM's `get_kv_cache_configs`,
  at the GPU's block size and batch limits: the bytes of KV cache one max_model_len request
  needs per GPU, checked against the GPU's memory after the weights.

What the CPU build lacks, and what stands in for it (none of it changes a config verdict or
a cache spec): empty modules for CUDA-only packages (`cutlass`, `cuda`) and `torchvision`
(image processors of VL wrappers); `torch.cuda.Stream`/`Event` and
`torch.accelerator.empty_cache` no-ops; `quantization_config` stripped for the load and
memory stages (no CPU kernel for these formats; it changes weights, not the KV cache), with
the unquantized MoE backend choice stubbed, except FP8's, built with a GPU's kernel choice
(`_shim_gpu_fp8_kernels`) so that its weight-block checks judge the TP; the GPU's FLASHMLA_SPARSE backend for sparse
MLA (the CPU platform refuses it); `HAS_TRITON` true so vLLM picks its model runner as on a
GPU; the GPU classes of DeepSeek-V4's MTP/DSpark heads (the CPU ones only raise). Multi-node
launch flags are dropped and the executor is `external_launcher` (one process stands for
rank 0). The registry's model inspection runs in this process, where the stand-ins serve.
Differences between releases are the `_shim_*` functions, each naming the releases.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator
from unittest import mock


STAGES = ("args", "config", "load", "memory")
MAX_VERDICT_BYTES = 4096  # Kubernetes keeps this much of a termination message
MAX_ERROR_CHARS = 2000
EXIT_OK, EXIT_REFUSED, EXIT_BROKEN = 0, 1, 2
# Layers the CPU build cannot make at all (a GPU builds them): no verdict on a pod.
CPU_ONLY_FAILURES = ("requires a CUDA device", "is not implemented on CPU", "is supported only for CUDA",
                     "Cannot access accelerator device",  # 0.34's sparse-MLA layers (DeepSeek-V3.2, GLM-5)
                     # The same call under a CUDA build of torch (an image's, PyPI's in the test venvs)
                     # on a machine without a GPU: torch.accelerator initializes CUDA and finds no driver.
                     "Found no NVIDIA driver",
                     # 0.34 config/cache.py: the extensible KV cache (on by default on CUDA/ROCm) checks
                     # the platform it runs on; the CPU build cannot stand for a GPU there.
                     "only supported on CUDA and ROCm",
                     # Expert parallel's expert map (fused_moe determine_expert_map) takes torch.nonzero,
                     # which the meta device cannot compute: no verdict rather than a false refusal.
                     "register_meta function for torch.nonzero()",
                     # draft_lm_head_quantization nvfp4's weight-only kernel (Marlin FP4) needs CUDA
                     # SM75+ (0.33/0.34 marlin_utils_fp4.py is_fp4_marlin_supported): the CPU cannot say.
                     "Marlin FP4 not available")
# Launch flags of a multi-node pod; one process judges rank 0 (render/pod.py adds them).
_LAUNCH_FLAGS = {"--nnodes": 1, "--node-rank": 1, "--master-addr": 1, "--master-port": 1, "--headless": 0,
                 "--distributed-executor-backend": 1}
_SINGLE_RANK_GROUPS = ("_PP", "_DP", "_DCP", "_PCP", "_ETP", "_EPLB", "_INNER_DP_WORLD", "_ENGRAM_DP")
_TP_GROUPS = ("_WORLD", "_TP", "_EP")
# DeepSeek-V4's attention blocks (platforms/cpu.py and the GPU's FlashMLA-sparse kernels: 256 only).
DEEPSEEK_V4_BLOCK_SIZE = 256
GPU_MLA_BLOCK_SIZE = 64  # FlashMLA / FlashInfer-MLA kernel block size (attention/backends/mla/)


class JudgeError(Exception):
    """The judge could not run (bad request, a vLLM it cannot drive): exit 2."""


class CannotJudgeOnCpu(JudgeError):
    """A layer only a GPU can build (DeepSeek-V4's attention asserts a CUDA device): the CPU
    judge has no verdict on it, which is not vLLM's refusal."""


class Refused(Exception):
    """vLLM refused at `stage` with its own message."""

    def __init__(self, stage: str, error: BaseException | str, memory: dict[str, Any] | None = None) -> None:
        super().__init__(error if isinstance(error, str) else error_text(error))
        self.stage, self.memory = stage, memory


@dataclass
class Verdict:
    ok: bool
    stage: str | None
    error: str | None
    vllm_version: str
    memory: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error, "vllmVersion": self.vllm_version,
                "memory": self.memory}

    def to_json(self) -> str:
        """One line, under MAX_VERDICT_BYTES: the error is cut first, then the memory figures."""
        line = json.dumps(self.to_dict(), separators=(",", ":"))
        if len(line.encode()) <= MAX_VERDICT_BYTES:
            return line
        short = Verdict(self.ok, self.stage, (self.error or "")[:MAX_ERROR_CHARS // 2] + " [truncated]",
                        self.vllm_version, self.memory)
        line = json.dumps(short.to_dict(), separators=(",", ":"))
        if len(line.encode()) <= MAX_VERDICT_BYTES:
            return line
        short.memory = {k: v for k, v in (self.memory or {}).items() if not isinstance(v, (dict, list))}
        return json.dumps(short.to_dict(), separators=(",", ":"))[:MAX_VERDICT_BYTES]


def error_text(exc: BaseException) -> str:
    """vLLM's own message: pydantic keeps a validator's message on its second line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if type(exc).__name__ == "ValidationError" and len(lines) > 1:
        lines = lines[1:]
    text = f"{type(exc).__name__}: {' '.join(lines)}".split(" [type=")[0]
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " [truncated]"


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


@contextmanager
def _stand_ins(finder: _StandIn) -> Iterator[None]:
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _group(size: int) -> SimpleNamespace:
    """Rank 0 of a `size`-way group, without torch.distributed."""
    group = SimpleNamespace(world_size=size, rank_in_group=0, rank=0, ranks=list(range(size)), local_rank=0,
                            cpu_group=None, is_first_rank=True, is_last_rank=True, first_rank=0,
                            last_rank=size - 1, unique_name="specdeploy-meta", use_custom_op_call=False)
    group.size = lambda: size
    group.device_group = SimpleNamespace(size=lambda: size, rank=lambda: 0)
    return group


# ---------------------------------------------------------------- per-release shims


def _shim_argument_parser() -> type:
    """FlexibleArgumentParser: `vllm.utils.argparse_utils` since 0.11, `vllm.utils` before."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # pragma: no cover - releases before 0.11
        from vllm.utils import FlexibleArgumentParser
    return FlexibleArgumentParser


def _shim_serve_cli_args() -> tuple[Callable[..., Any], Callable[[argparse.Namespace], None]]:
    """`make_arg_parser` and `validate_parsed_serve_args`, which `vllm serve` uses
    (entrypoints/cli/serve.py): in `entrypoints/common/cli_args.py` from 0.33,
    `entrypoints/launchers/cli_args.py` in 0.32, `entrypoints/openai/cli_args.py` before.
    Imported from there, not through serve.py, which imports the whole API server."""
    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                   "vllm.entrypoints.openai.cli_args"):
        try:
            cli_args = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not module.startswith(str(exc.name)):
                raise
            continue
        return cli_args.make_arg_parser, cli_args.validate_parsed_serve_args
    raise JudgeError("this vLLM has no serve argument parser the judge knows (entrypoints/*/cli_args.py)")


def _shim_need_and_check(config: Any, specs: dict[str, Any]) -> tuple[int, Callable[[int], Any]]:
    """vLLM's need for one max_model_len request (null block included) and its own check.

    0.32 keeps grouping and the check in `v1/core/kv_cache_utils.py`; 0.33 and later move them
    to `v1/core/kv_cache_planning.py` behind a `KVCacheConfigBuilder` and group the layers once,
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


def _shim_gpu_block_size(config: Any) -> int:
    """The block size a GPU's attention backend gives this model when `--block-size` is not
    set: DeepSeek-V4's kernels take 256 only; the MLA kernels 64; otherwise the release's
    `CacheConfig.DEFAULT_BLOCK_SIZE` (16 up to 0.33, 64 from 0.34)."""
    from vllm.config.cache import CacheConfig

    model = config.model_config
    if "deepseek_v4" in str(getattr(model.hf_text_config, "model_type", "")):
        return DEEPSEEK_V4_BLOCK_SIZE
    if model.use_mla:
        return max(GPU_MLA_BLOCK_SIZE, CacheConfig.DEFAULT_BLOCK_SIZE)
    return CacheConfig.DEFAULT_BLOCK_SIZE


@contextmanager
def _shim_gpu_kernel_blocks() -> Iterator[None]:
    """The CPU attention kernel takes blocks in multiples of 32 (cpu_attn.py
    get_supported_kernel_block_sizes); a GPU's FlashAttention in multiples of 16
    (flash_attn.py), which sliding-window layers and the hybrid alignment step by."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backend import MultipleOf

    with mock.patch.object(CPUAttentionBackend, "get_supported_kernel_block_sizes",
                           staticmethod(lambda kv_cache_spec=None: [MultipleOf(16)])):
        yield


@contextmanager
def _shim_gpu_platform_config() -> Iterator[None]:
    """Undo what the CPU platform's `check_and_update_config` (platforms/cpu.py) rewrites and a
    GPU keeps: async scheduling (VllmConfig decides it before the platform; it doubles the
    tokens in flight), chunked prefill, prefix caching and max_num_batched_tokens (turned off,
    and raised to max_model_len, for MLA: VllmConfig would then refuse a hybrid MLA model's
    own Mamba block size, "--mamba-block-size can only be set with --enable-prefix-caching")
    and the SSM state dtype (float32 for the CPU's GatedDeltaNet kernels). From 0.34 the CPU
    platform also refuses an x86 CPU without triton-cpu, which a GPU image does not have
    ("vLLM on x86 CPUs requires Triton (triton-cpu)"): Triton is reported present."""
    import vllm.triton_utils as triton_utils
    from vllm.platforms import current_platform

    platform = type(current_platform)
    original = platform.check_and_update_config.__func__

    def as_gpu(cls, vllm_config):
        scheduler, cache = vllm_config.scheduler_config, vllm_config.cache_config
        kept = [(config, name, getattr(config, name)) for config, names in (
            (scheduler, ("async_scheduling", "max_num_batched_tokens", "enable_chunked_prefill")),
            (cache, ("enable_prefix_caching", "mamba_ssm_cache_dtype"))) for name in names]
        original(cls, vllm_config)
        for config, name, value in kept:
            setattr(config, name, value)

    with mock.patch.object(platform, "check_and_update_config", classmethod(as_gpu)), \
            mock.patch.object(triton_utils, "HAS_TRITON", True):
        yield


@contextmanager
def _shim_cuda_kv_cache_sizing() -> Iterator[None]:
    """0.34: `VllmConfig._resolve_extensible_kv_cache` turns the extensible KV cache (sized from
    the memory free after CUDA-graph capture, `gpu_memory_utilization` defaulting to 1.0:
    `CacheConfig.resolved_gpu_memory_utilization`) on where `is_cuda_alike()`; decided as on a
    CUDA pod. Releases before 0.34 have no such mode."""
    from vllm.config import VllmConfig
    from vllm.platforms import current_platform

    original = getattr(VllmConfig, "_resolve_extensible_kv_cache", None)
    if original is None:
        yield
        return

    def as_cuda(self):
        with mock.patch.object(type(current_platform), "is_cuda_alike", lambda *a: True):
            return original(self)

    with mock.patch.object(VllmConfig, "_resolve_extensible_kv_cache", as_cuda):
        yield


@contextmanager
def _shim_gpu_batch_defaults(gpu_memory_bytes: int, device_name: str = "gpu") -> Iterator[None]:
    """`EngineArgs.get_batch_defaults` as on a GPU of this memory and name (engine/arg_utils.py
    picks max_num_batched_tokens and max_num_seqs by device memory, and keeps any device named
    "a100" on the small tier; the CPU platform's own are 2048 x world size). Without a name, an
    A100 80GB is judged as an H100."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    original = EngineArgs.get_batch_defaults.__func__
    platform = type(current_platform)

    def as_gpu(cls, world_size):
        with mock.patch.object(platform, "is_cpu", lambda self=None: False), \
                mock.patch.object(platform, "get_device_total_memory", lambda *a, **k: gpu_memory_bytes), \
                mock.patch.object(platform, "get_device_name", lambda *a, **k: device_name):
            return original(cls, world_size)

    with mock.patch.object(EngineArgs, "get_batch_defaults", classmethod(as_gpu)):
        yield


@contextmanager
def _shim_gpu_fp8_kernels() -> Iterator[None]:
    """FP8 checkpoints are built with their quantization, as on a GPU: every shape check of
    `Fp8LinearMethod.create_weights` (`validate_fp8_block_shape`) and `Fp8MoEMethod.create_weights`
    (`validate_fp8_block_shape_moe`, the refined MoE block of fused_moe/oracle/fp8.py) runs as
    vLLM wrote it. Only the kernel choice stands in for a GPU's: the CPU build's block-FP8 linear
    kernels need AMX ("Failed to find a kernel that can implement the ScaledMM linear layer"),
    where CUDA lists Triton's block kernel, which takes any shape those checks admit; the MoE
    backend is Triton's, which the GPU's oracle keeps for refined blocks. Same in 0.32-0.34."""
    import vllm.model_executor.layers.quantization.fp8 as fp8
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    with mock.patch.object(fp8, "init_fp8_linear_kernel", lambda **_config: mock.MagicMock()), \
            mock.patch.object(fp8, "select_fp8_moe_backend",
                              lambda *_a, **_k: (Fp8MoeBackend.TRITON, mock.MagicMock())):
        yield


# ---------------------------------------------------------------- the judge


@dataclass
class Request:
    args: list[str]
    models: dict[str, str]
    gpu: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any, base: Path | None = None) -> "Request":
        """`base`: the directory a relative model directory is read from (the request file's: the
        Job's request names the mounted `models/<role>` next to it, wherever it is mounted)."""
        if not isinstance(data, dict):
            raise JudgeError("request: a JSON object with 'args', 'models' and 'gpu' is required")
        args, models, gpu = data.get("args"), data.get("models", {}), data.get("gpu")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise JudgeError("request.args: a list of strings (vLLM's server argv) is required")
        if not isinstance(models, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in models.items()):
            raise JudgeError("request.models: an object of model name -> local directory is required")
        if gpu is not None and not (isinstance(gpu, dict) and isinstance(gpu.get("memoryBytes"), int)
                                    and isinstance(gpu.get("count", 1), int) and gpu["memoryBytes"] > 0
                                    and isinstance(gpu.get("deviceName", ""), str)):
            raise JudgeError("request.gpu: null or {'memoryBytes': int > 0, 'count': int, 'deviceName': str}")
        models = {name: str((base or Path()) / directory) for name, directory in models.items()}
        for name, directory in models.items():
            if not (Path(directory) / "config.json").is_file():
                raise JudgeError(f"request.models[{name!r}]: no config.json in {directory}")
        return cls(args, models, gpu)


@dataclass
class _Built:
    config: Any
    specs: dict[str, Any] = field(default_factory=dict)
    weight_bytes: int = 0
    requested_block_size: int = 0


def _judging_environment() -> None:
    """Before vLLM is imported: no Hub, vLLM's CPU platform, its logs on stderr. Set by the
    Judge, not at import, so a process that only imports this file keeps its environment."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # a CUDA image without a GPU: vLLM's CPU platform
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries the verdict only
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def _load_general_plugins() -> None:
    """The image's vLLM general plugins (entry point group `vllm.general_plugins`), loaded as
    `vllm serve` loads them before it parses the args (engine/arg_utils.py
    AsyncEngineArgs.add_cli_args and EngineArgs.create_engine_config call
    `vllm.plugins.load_general_plugins()`): where the release has `register_speculative_method`,
    a plugin may register a speculative method, which the image's vLLM then judges like its own."""
    from vllm.plugins import load_general_plugins

    load_general_plugins()


class Judge:
    """One process-wide set of stand-ins; `judge()` per request. The parity suite keeps one
    Judge for its whole grid; the preflight Job makes one for its one request."""

    def __init__(self) -> None:
        _judging_environment()
        import torch
        import vllm
        import vllm.config.vllm as config_vllm
        from vllm.platforms import current_platform

        self.version = vllm.__version__
        self._torch = torch
        _load_general_plugins()
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
        self._build_stand_in = _StandIn("cutlass", "cuda", "torchvision")
        self._config_stand_in = _StandIn("torchvision")  # tvm_ffi, imported with the engine config, probes `cuda`
        self._gpu_deepseek_v4_heads()
        self._tmp = tempfile.TemporaryDirectory(prefix="specdeploy-judge-")
        _forget_failed_lookups()

    def _gpu_deepseek_v4_heads(self) -> None:
        """The CPU build's DeepSeek-V4 DSpark and MTP classes (models/deepseek_v4/cpu/) only raise
        NotImplementedError; the GPU's (models/deepseek_v4/nvidia/) are what a pod builds."""
        try:
            import vllm.models.deepseek_v4 as deepseek_v4
        except ImportError:  # a release without DeepSeek-V4
            return
        with _stand_ins(self._build_stand_in):
            from vllm.models.deepseek_v4.nvidia import dspark, mtp
        deepseek_v4.DSparkDeepseekV4ForCausalLM = dspark.DSparkDeepseekV4ForCausalLM
        deepseek_v4.DeepSeekV4MTP = mtp.DeepSeekV4MTP

    def close(self) -> None:
        self._tmp.cleanup()

    def judge(self, request: Request, stages: tuple[str, ...] = STAGES, fit: bool = True) -> Verdict:
        """vLLM's verdict on the request, through `stages` (a prefix of STAGES). `fit`: check the
        KV cache against the GPU's memory after the weights (else only compute the need)."""
        self._fit = fit
        try:
            memory = self._run(request, stages)
        except Refused as refused:
            return Verdict(False, refused.stage, str(refused), self.version, refused.memory)
        return Verdict(True, None, None, self.version, memory)

    def engine_config(self, request: Request) -> Any:
        """The args and config stages: the VllmConfig `vllm serve` builds from the request's args
        on the request's GPU (raises Refused at "args" or "config")."""
        return self._engine_config(parse_server_args(request.args), request, strip_quantization=False)

    def _run(self, request: Request, stages: tuple[str, ...]) -> dict[str, Any] | None:
        args = parse_server_args(request.args)
        if "config" not in stages:
            return None
        config = self._engine_config(args, request, strip_quantization=False)
        if "load" not in stages:
            return None
        quantized = _has_quantization(request, args)
        if quantized:  # the same config with weights CPU kernels can make
            config = self._engine_config(args, request, strip_quantization=True)
        built = self._load(config)
        if "memory" not in stages:
            return None
        return self._memory(built, request, quantized)

    def _engine_config(self, args: argparse.Namespace, request: Request, *, strip_quantization: bool) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext

        args = self._local_models(args, request, strip_quantization)
        engine_args = AsyncEngineArgs.from_cli_args(args)
        engine_args.skip_tokenizer_init = True  # the Job holds configs, not tokenizers
        engine_args.load_format = "dummy"
        engine_args.distributed_executor_backend = "external_launcher"

        def build() -> Any:
            with ExitStack() as stack:
                stack.enter_context(mock.patch("vllm.transformers_utils.repo_utils.time.sleep"))
                stack.enter_context(_stand_ins(self._config_stand_in))
                stack.enter_context(mock.patch("vllm.model_executor.models.registry._run_in_subprocess",
                                               lambda fn: fn()))
                gpu = request.gpu or {}
                stack.enter_context(_shim_gpu_batch_defaults(gpu.get("memoryBytes", 0), gpu.get("deviceName") or "gpu"))
                stack.enter_context(_shim_gpu_platform_config())
                stack.enter_context(_shim_cuda_kv_cache_sizing())
                return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        try:
            return _inspected(build)
        except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the verdict
            if any(s in str(exc) for s in CPU_ONLY_FAILURES):
                raise CannotJudgeOnCpu(f"config: {error_text(exc)}") from exc
            raise Refused("config", exc) from exc

    def _local_models(self, args: argparse.Namespace, request: Request, strip_quantization: bool) -> argparse.Namespace:
        """The args with each model name replaced by its local directory (a copy without
        quantization_config for the load stage)."""
        args = argparse.Namespace(**vars(args))
        dirs = {name: self._model_dir(d) if strip_quantization else d for name, d in request.models.items()
                if name in _used_models(args)}
        if args.model in dirs:
            args.model = dirs[args.model]
        spec = getattr(args, "speculative_config", None)
        if isinstance(spec, dict) and spec.get("model") in dirs:
            args.speculative_config = {**spec, "model": dirs[spec["model"]]}
        if getattr(args, "tokenizer", None) in dirs:
            args.tokenizer = dirs[args.tokenizer]
        return args

    def _model_dir(self, directory: str) -> str:
        """A copy of the model's directory (links to its files) whose config.json has no
        quantization_config but FP8's."""
        root = Path(tempfile.mkdtemp(dir=self._tmp.name))
        for entry in Path(directory).iterdir():
            if entry.name != "config.json":
                (root / entry.name).symlink_to(entry.resolve())
        config = json.loads((Path(directory) / "config.json").read_text())
        (root / "config.json").write_text(json.dumps(_built_quantization(config)))
        return str(root)

    def _load(self, config: Any) -> _Built:
        try:
            return _inspected(lambda: self._build(config))
        except Exception as exc:  # noqa: BLE001
            if any(s in str(exc) for s in CPU_ONLY_FAILURES):
                raise CannotJudgeOnCpu(f"load: {error_text(exc)}") from exc
            raise Refused("load", exc) from exc

    def _build(self, config: Any) -> _Built:
        """Target and draft on the meta device at the config's TP; their KV-cache specs."""
        import vllm.distributed.parallel_state as parallel_state
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.utils import initialize_model
        from vllm.platforms import current_platform
        from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

        tp = config.parallel_config.tensor_parallel_size
        for name in _SINGLE_RANK_GROUPS + _TP_GROUPS:
            if hasattr(parallel_state, name):
                setattr(parallel_state, name, _group(tp if name in _TP_GROUPS else 1))
        with ExitStack() as stack:
            stack.enter_context(_stand_ins(self._build_stand_in))
            # Draft loaders re-validate copies of the config (dataclasses.replace): as on the GPU too.
            stack.enter_context(_shim_gpu_platform_config())
            stack.enter_context(set_current_vllm_config(config))
            stack.enter_context(self._torch.device("meta"))
            for target in ("torch.cuda.Stream", "torch.cuda.Event"):
                stack.enter_context(mock.patch(target, mock.MagicMock()))
            stack.enter_context(mock.patch("torch.accelerator.empty_cache"))
            stack.enter_context(_shim_gpu_fp8_kernels())
            stack.enter_context(mock.patch(
                "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method.select_unquantized_moe_backend",
                return_value=(mock.MagicMock(), mock.MagicMock())))
            with _default_dtype(self._torch, config.model_config.dtype):
                model = initialize_model(vllm_config=config)
            draft = _load_draft(model, config, stack)
            cache = config.cache_config
            if not cache.user_specified_block_size:  # the GPU backend's, not the CPU's
                cache.block_size, cache.user_specified_block_size = _shim_gpu_block_size(config), True
            built = _Built(config, weight_bytes=_weight_bytes(model, draft), requested_block_size=cache.block_size)
            stack.enter_context(_shim_gpu_kernel_blocks())
            with mock.patch.object(type(current_platform), "_check_aligned_block_size"):
                # the CPU MLA backend refuses hybrid-aligned block sizes; the GPU's accept them
                current_platform.update_block_size_for_backend(config)
            built.specs = get_kv_cache_spec(config)
        return built

    def _memory(self, built: _Built, request: Request, quantized: bool) -> dict[str, Any]:
        from vllm.config import set_current_vllm_config
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout

        config, specs = built.config, built.specs
        counts: dict[str, int] = {}
        for spec in specs.values():
            counts[type(spec).__name__] = counts.get(type(spec).__name__, 0) + 1
        cache = config.cache_config
        figures: dict[str, Any] = {
            "kvCacheBytes": None, "blockSize": cache.block_size, "requestedBlockSize": built.requested_block_size,
            "maxModelLen": config.model_config.max_model_len,
            "maxNumBatchedTokens": config.scheduler_config.max_num_batched_tokens,
            "maxNumSeqs": config.scheduler_config.max_num_seqs,
            "inFlightTokens": getattr(config, "max_in_flight_tokens", None),
            "mambaAlignMode": getattr(cache, "mamba_cache_mode", None) == "align",
            "mambaSsmCacheDtype": str(getattr(cache, "mamba_ssm_cache_dtype", "auto")),
            "gpuMemoryUtilization": _gpu_memory_utilization(cache),
            "extensibleKvCache": bool(getattr(cache, "enable_extensible_kv_cache", False)),
            "weightBytes": None if quantized else built.weight_bytes, "availableKvCacheBytes": None,
            "specs": dict(sorted(counts.items())),
            "prefillCheckpointBlocks": max((getattr(spec, "num_prefill_checkpoint_blocks", 0)
                                            for spec in specs.values()), default=0),
        }
        try:
            with set_current_vllm_config(config):
                layouts = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(config))]
                resolve_kv_cache_layout(config, [layouts], list(specs.values()))
                need, check = _shim_need_and_check(config, specs)
                _confirm_need(need, check)
                figures["kvCacheBytes"] = need
                gpu_memory = (request.gpu or {}).get("memoryBytes", 0)
                if self._fit and gpu_memory and figures["weightBytes"] is not None:
                    available = int(gpu_memory * figures["gpuMemoryUtilization"]) - built.weight_bytes
                    figures["availableKvCacheBytes"] = available
                    check(max(available, 0))
        except JudgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - vLLM's "KV cache is needed" ValueError
            raise Refused("memory", exc, figures) from exc
        return figures


def _gpu_memory_utilization(cache: Any) -> float:
    """The fraction of GPU memory vLLM sizes against: 0.34 resolves an unset value by sizing mode."""
    resolved = getattr(cache, "resolved_gpu_memory_utilization", None)
    return float(resolved if resolved is not None else cache.gpu_memory_utilization)


def _confirm_need(need: int, check: Callable[[int], Any]) -> None:
    """vLLM's own check passes with `need` bytes and refuses one byte less; otherwise the
    judge has mis-read this release's KV-cache planning."""
    check(need)
    try:
        check(need - 1)
    except ValueError as exc:
        if "KV cache is needed" in str(exc):
            return
        raise
    raise JudgeError(f"vLLM accepted {need - 1} bytes of KV cache: its need is lower than the judge computed")


def _load_draft(model: Any, config: Any, stack: ExitStack) -> Any:
    """The draft as the method's own loader builds it (`v1/worker/gpu/spec_decode/`), with
    `get_model` reduced to `initialize_model` (weights are not the question)."""
    spec = config.speculative_config
    if spec is None or spec.draft_model_config is None:
        return None
    import vllm.model_executor.model_loader as model_loader
    from vllm.model_executor.model_loader.utils import initialize_model

    def build(*, vllm_config, model_config=None, prefix="", **_load_options):  # 0.34 adds load_config
        import torch

        with _default_dtype(torch, (model_config or vllm_config.model_config).dtype):
            return initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)

    # The order of v1/worker/gpu/spec_decode/__init__.py init_speculator, by vLLM's own predicates.
    if spec.use_dflash() or spec.use_dspark() or spec.use_eagle():
        import vllm.v1.worker.gpu.spec_decode.dflash.utils as dflash_utils
        import vllm.v1.worker.gpu.spec_decode.eagle.utils as eagle_utils
        from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model

        for module in (eagle_utils, dflash_utils, model_loader):
            stack.enter_context(mock.patch.object(module, "get_model", build))
        stack.enter_context(_shim_gpu_own_lm_head(eagle_utils))
        if spec.use_dflash():
            return dflash_utils.load_dflash_model(model, config)
        if spec.use_dspark():
            return load_dspark_model(model, config)
        return eagle_utils.load_eagle_model(model, config)  # EAGLE, EAGLE-3, MTP
    if spec.uses_draft_model():
        import vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator as standalone

        stack.enter_context(mock.patch.object(standalone, "get_model", build))
        speculator = SimpleNamespace(speculative_config=spec, vllm_config=config, draft_model_config=spec.draft_model_config)
        return standalone.StandaloneARSpeculator.load_draft_model(speculator, model, set())
    return None  # heads without a KV cache of their own, built by the target's runner


def _shim_gpu_own_lm_head(eagle_utils: Any) -> Any:
    """On a GPU the draft's weights load before it shares the target's lm_head, and a checkpoint
    holding an lm_head sets has_own_lm_head (models/utils.py process_eagle_weight); the meta build
    loads no weights. An LM head of another vocabulary than the target's is the checkpoint's own,
    which `_should_share` (0.33/0.34 v1/worker/gpu/spec_decode/eagle/utils.py) keeps: the
    judge says so where the weights would. 0.32 has no such function."""
    original = getattr(eagle_utils, "_should_share", None)
    if original is None:
        return contextlib.nullcontext()

    def should_share(eagle: Any, flag: str, draft: Any, target: Any) -> bool:
        sizes = {getattr(head, "org_vocab_size", None) for head in (draft, target)}
        if flag == "has_own_lm_head" and draft is not None and target is not None and len(sizes) > 1:
            return False
        return original(eagle, flag, draft, target)

    return mock.patch.object(eagle_utils, "_should_share", should_share)


@contextmanager
def _default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    """Parameters in the model's dtype, as vLLM's loaders build them
    (model_loader/base_loader.py `set_default_torch_dtype` around `initialize_model`)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _weight_bytes(*models: Any) -> int:
    """Parameter bytes on one GPU (the meta tensors are the rank's shards); a draft sharing
    the target's embedding or lm_head counts it once."""
    seen: set[int] = set()
    total = 0
    for model in models:
        if model is None:
            continue
        for parameter in model.parameters():
            if id(parameter) not in seen:
                seen.add(id(parameter))
                total += parameter.numel() * parameter.element_size()
    return total


def _without_quantization(config: dict[str, Any]) -> dict[str, Any]:
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    if isinstance(config.get("text_config"), dict):
        config["text_config"] = {k: v for k, v in config["text_config"].items() if k != "quantization_config"}
    return config


def _built_quantization(config: dict[str, Any]) -> dict[str, Any]:
    """The config the load stage builds: FP8 kept (`_shim_gpu_fp8_kernels`: its shape checks are
    part of the verdict), other formats stripped (no CPU kernel to build them with)."""
    quantization = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config")
    fp8 = isinstance(quantization, dict) and str(quantization.get("quant_method", "")).lower() == "fp8"
    # DeepSeek-V4's `expert_dtype: fp4` makes its experts MXFP4 (models/deepseek_v4/quant_config.py),
    # a backend the CPU build cannot choose either: stripped.
    if fp8 and config.get("expert_dtype", "fp8") == "fp8":
        return config
    return _without_quantization(config)


def _used_models(args: argparse.Namespace) -> set[str]:
    """The model names the args load: the served model and the speculative config's draft."""
    spec = getattr(args, "speculative_config", None)
    return {args.model} | ({spec["model"]} if isinstance(spec, dict) and spec.get("model") else set())


def _has_quantization(request: Request, args: argparse.Namespace) -> bool:
    for name, directory in request.models.items():
        if name not in _used_models(args):
            continue
        config = json.loads((Path(directory) / "config.json").read_text())
        if config != _without_quantization(config):
            return True
    return False


def _forget_failed_lookups() -> None:
    """vLLM's registry caches a failed model-class import or inspection for the process
    (`_try_inspect_model_cls`, `_try_load_model_cls` are lru_caches), e.g. a VL class
    imported before the torchvision stand-in."""
    from vllm.model_executor.models import registry

    registry._try_inspect_model_cls.cache_clear()
    registry._try_load_model_cls.cache_clear()


def _inspected(build: Callable[[], Any]) -> Any:
    """`build()`, once more if vLLM's registry failed to inspect the architecture (a cached or
    transient failure); a failure that repeats is vLLM's verdict, with the inspection's own
    error (logged by the registry) in the message."""
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
                errors.append(error_text(record.exc_info[1]))

    handler = Collect(logging.ERROR)
    logging.getLogger(registry.__name__).addHandler(handler)
    try:
        return build()
    except ValueError as exc:
        if errors:
            raise ValueError(f"{error_text(exc)} (inspection: {errors[-1]})") from exc
        raise
    finally:
        logging.getLogger(registry.__name__).removeHandler(handler)


@functools.lru_cache(maxsize=1)
def _serve_parser() -> tuple[argparse.ArgumentParser, Callable[[argparse.Namespace], None]]:
    """`vllm serve`'s parser (hundreds of flags: built once per process) and its validation."""
    make_arg_parser, validate = _shim_serve_cli_args()
    return make_arg_parser(_shim_argument_parser()(prog="vllm serve")), validate


def parse_server_args(argv: list[str]) -> argparse.Namespace:
    """The args as `vllm serve` parses and validates them (entrypoints/cli/serve.py), minus
    the multi-node launch flags; raises Refused("args") with argparse's or vLLM's message."""
    parser, validate = _serve_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(_single_rank(argv))
        if getattr(args, "model_tag", None) is not None:  # ServeSubcommand.cmd: the positional model wins
            args.model = args.model_tag
        validate(args)
    except SystemExit as exc:
        lines = [ln for ln in errors.getvalue().splitlines() if ln.strip()]
        raise Refused("args", lines[-1] if lines else f"argument parsing exited with {exc.code}") from None
    except Exception as exc:  # noqa: BLE001 - validate_parsed_serve_args' TypeError/ValueError
        raise Refused("args", exc) from exc
    return args


def _single_rank(argv: list[str]) -> list[str]:
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in _LAUNCH_FLAGS:
            skip = _LAUNCH_FLAGS[name] if "=" not in arg else 0
            continue
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", help="REQUEST.json: args, models, gpu")
    parser.add_argument("--verdict-file", help="also write the verdict here (the pod's termination log)")
    options = parser.parse_args(argv)
    version = "unknown"
    try:
        request = Request.from_dict(json.loads(Path(options.request).read_text()), Path(options.request).parent)
        with contextlib.redirect_stdout(sys.stderr):  # vLLM prints; stdout is the verdict's
            judge = Judge()
            version = judge.version
            try:
                verdict = judge.judge(request)
            finally:
                judge.close()
        code = EXIT_OK if verdict.ok else EXIT_REFUSED
    except Exception as exc:  # noqa: BLE001 - the judge could not run: say why, exit 2
        verdict = Verdict(False, None, error_text(exc), version)
        code = EXIT_BROKEN
    line = verdict.to_json()
    print(line, flush=True)
    if options.verdict_file:
        Path(options.verdict_file).write_text(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
