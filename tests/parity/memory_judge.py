"""vLLM's own KV-cache need for a target (and its draft): the preflight judge
(`specdeploy/preflight/vllm_judge.py`, the file the preflight Job runs in the image) asked
through its load and memory stages, in this process.

A case becomes the server args a pod would get (`<target> --tensor-parallel-size TP
--max-model-len N [--block-size B] [--speculative-config {...}]`), the configs are written to
temporary directories, and the judge answers for a GPU of GPU_MEMORY_BYTES (its batch limits:
max_num_batched_tokens 8192, async scheduling's two batches in flight), at the GPU backend's
block size unless the case sets one. The need is computed without the fit check (the grid
asks for figures, not whether Kimi-K3 fits one GPU); the judge itself confirms it is the
figure vLLM's `get_kv_cache_configs` demands (it passes with it, refuses one byte less)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.preflight.vllm_judge import CannotJudgeOnCpu, Judge, Request

GPU_MEMORY_BYTES = 80 * 1024**3  # an H100: vLLM's "large GPU" batch defaults (engine/arg_utils.py)


@dataclass(frozen=True)
class MemoryVerdict:
    ok: bool
    stage: str  # "" | "config" | "load" | "kv-cache" | "cpu" (a GPU-only layer the CPU build cannot make)
    error: str
    need_bytes: int = 0
    block_size: int = 0  # after the hybrid alignment
    requested_block_size: int = 0  # before it: the GPU backend's (or --block-size)
    in_flight_tokens: int = 0
    mamba_align_mode: bool = False
    mamba_ssm_cache_dtype: str = "auto"
    spec_counts: tuple[tuple[str, int], ...] = ()
    prefill_checkpoint_blocks: int = 0  # per state layer in align mode (MambaSpec.num_prefill_checkpoint_blocks)


class MemoryJudge:
    """One Judge (its stand-ins are process-wide); one temporary directory per case."""

    def __init__(self) -> None:
        self._judge = Judge()
        self._tmp = tempfile.TemporaryDirectory(prefix="specdeploy-memory-")

    def close(self) -> None:
        self._judge.close()
        self._tmp.cleanup()

    def judge(self, name: str, target: dict[str, Any], draft: dict[str, Any] | None, method: str | None,
              k: int, tp: int, max_model_len: int, block_size: int | None = None) -> MemoryVerdict:
        root = Path(tempfile.mkdtemp(dir=self._tmp.name, prefix=name[:40] + "-"))
        models = {"target": _write(target, root / "target")}
        args = ["target", "--tensor-parallel-size", str(tp), "--max-model-len", str(max_model_len)]
        if block_size is not None:
            args += ["--block-size", str(block_size)]
        if method:
            speculative: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
            if draft is not None:
                models["draft"] = _write(draft, root / "draft")
                speculative["model"] = "draft"
            args += ["--speculative-config", json.dumps(speculative)]
        request = Request(args, models, {"memoryBytes": GPU_MEMORY_BYTES, "count": tp})
        try:
            verdict = self._judge.judge(request, fit=False)
        except CannotJudgeOnCpu as exc:
            return MemoryVerdict(False, "cpu", str(exc))
        if not verdict.ok:
            return MemoryVerdict(False, {"memory": "kv-cache"}.get(verdict.stage, verdict.stage), verdict.error or "")
        m = verdict.memory or {}
        return MemoryVerdict(True, "", "", need_bytes=m["kvCacheBytes"], block_size=m["blockSize"],
                             requested_block_size=m["requestedBlockSize"], in_flight_tokens=m["inFlightTokens"],
                             mamba_align_mode=m["mambaAlignMode"], mamba_ssm_cache_dtype=m["mambaSsmCacheDtype"],
                             spec_counts=tuple(m["specs"].items()),
                             prefill_checkpoint_blocks=m["prefillCheckpointBlocks"])


def _write(config: dict[str, Any], directory: Path) -> str:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)
