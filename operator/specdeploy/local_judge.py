"""The preflight judge under a local Python that has vLLM (`specdeploy preflight --python`,
bench/bench_preflight.py): the same file and the same request the operator's Job runs, with
the configs written to a temporary directory instead of the Job's ConfigMap mount."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from specdeploy.preflight import JUDGE_FILE
from specdeploy.preflight.outcome import EXIT_ACCEPTED, EXIT_REFUSED, JudgeVerdict, parse_verdict
from specdeploy.preflight.request import JudgeRequest


@dataclass(frozen=True)
class LocalRun:
    """One judge run: its verdict when it gave one, its exit code and its time."""

    verdict: JudgeVerdict | None
    exit_code: int
    seconds: float
    stderr_tail: str

    @property
    def judged(self) -> bool:
        """vLLM gave a verdict (accepted or refused), rather than the judge failing to run."""
        return self.verdict is not None and self.exit_code in (EXIT_ACCEPTED, EXIT_REFUSED)


def run_judge(python: str, request: JudgeRequest, *, env: Mapping[str, str] | None = None, remote_code: bool = False,
              timeout_s: float = 1800) -> LocalRun:
    """Run the judge file under `python` on `request`. The Hub is off unless a model needs
    remote code (as in the Job). Raises OSError when `python` cannot be started."""
    with tempfile.TemporaryDirectory(prefix="specdeploy-preflight-") as tmp:
        root = Path(tmp)
        dirs = {}
        for role, config in request.configs.items():
            (root / "models" / role).mkdir(parents=True)
            (root / "models" / role / "config.json").write_text(json.dumps(config))
            dirs[role] = str(root / "models" / role)
        (root / "request.json").write_text(json.dumps(request.to_json(dirs)))
        run_env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "0" if remote_code else "1"}
        started = time.monotonic()
        try:
            done = subprocess.run([python, str(JUDGE_FILE), str(root / "request.json")], capture_output=True, text=True,
                                  env=run_env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return LocalRun(None, -1, time.monotonic() - started, f"the judge did not finish in {timeout_s:g} s")
        seconds = time.monotonic() - started
    return LocalRun(parse_verdict(done.stdout), done.returncode, seconds, done.stderr[-2000:])
