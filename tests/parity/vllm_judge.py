"""vLLM's own verdict on a grid case: the preflight judge (`specdeploy/preflight/vllm_judge.py`,
the file the preflight Job runs in the image), asked in this process, then the load checks.

A case becomes the args a pod would get: `<target> --tensor-parallel-size TP
--speculative-config {"method", "model": <draft>, "num_speculative_tokens",
"draft_tensor_parallel_size", ...}`, with each model's config.json in a temporary directory
(the Hub is never contacted: HF_HUB_OFFLINE=1). The judge answers through its load stage: the
image's `vllm serve` parser, `create_engine_config` (ModelConfig, ParallelConfig,
SpeculativeConfig, which builds and verifies the draft's configs), then target and draft built
by vLLM's own classes on the meta device at the case's TP (about 0.1 s of CPU a case).
Kimi-K3's `auto_map` remote
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
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from specdeploy.preflight.vllm_judge import CannotJudgeOnCpu, Judge, Request

LOAD_STAGES = ("args", "config", "load")  # the grid asks whether vLLM can build the pair


@dataclass(frozen=True)
class Verdict:
    ok: bool
    stage: str  # the judge's stage that refused it ("" when ok)
    error: str  # vLLM's own error text

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error}


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
        """The judge through its load stage: config, then target and draft built on the meta device."""
        with _arctic_inference_present():
            try:
                verdict = self._judge.judge(request, stages=LOAD_STAGES)
            except CannotJudgeOnCpu as exc:  # a layer only a GPU builds: no verdict here
                return Verdict(True, "", f"not judged at load on CPU: {exc}")
        return Verdict(verdict.ok, verdict.stage or "", verdict.error or "")
