"""The zygote's child is the process a fresh `python -m` start makes (zygote.py says why):
a probe (zygote_probe.py) run both ways reports the same argv, environment (including what a
module read at import time), cwd, sys.path[0], signal dispositions and mask, threads, stdio
and open descriptors, and ends with the same status and output on exit, SIGTERM and SIGINT."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import operator_process
from .conftest import HANG_GUARD_S, ROOT, eventually

PROBE = "tests.integration.zygote_probe"


def _fresh(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", PROBE, *args], env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, preexec_fn=operator_process.container_signals)


async def _facts(log: Path) -> dict[str, Any]:
    line = await eventually(lambda: log.read_text().split("\n", 1)[0] if "\n" in log.read_text() else "", what=f"{log.name}'s facts")
    return dict(json.loads(line))


async def _ended(process: Any) -> int:
    return int(await asyncio.to_thread(process.wait, HANG_GUARD_S))


@pytest.mark.parametrize("hub_offline", [None, "1"], ids=["as-the-suite", "hub-offline"])
async def test_a_zygote_child_starts_and_ends_as_a_fresh_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  hub_offline: str | None) -> None:
    """With the environment the other tests' operators get, and with HF_HUB_OFFLINE=1, which
    huggingface_hub reads at import time: a zygote that imported it otherwise must not serve."""
    monkeypatch.chdir(ROOT)  # `python -m tests.…` finds the probe from the repository's root
    env = operator_process.shipped_env(**({"HF_HUB_OFFLINE": hub_offline} if hub_offline else {}))
    for ending, args in (("exit", ["3"]), ("SIGTERM", ["wait"]), ("SIGINT", ["wait"])):
        fresh_log, forked_log = tmp_path / f"fresh-{ending}.log", tmp_path / f"forked-{ending}.log"
        fresh = _fresh(args, env, fresh_log)
        forked = operator_process.start(args, env=env, log=forked_log, module=PROBE)
        facts, forked_facts = await _facts(fresh_log), await _facts(forked_log)
        forked_facts["stdio"] = [path.replace(forked_log.name, fresh_log.name) for path in forked_facts["stdio"]]
        assert forked_facts == facts
        assert facts["hf_hub_offline"] or not hub_offline
        if ending != "exit":
            fresh.send_signal(signal.Signals[ending])
            forked.send_signal(signal.Signals[ending])
        assert (await _ended(forked), forked.returncode) == (await _ended(fresh), fresh.returncode)
        # The same output, atexit's included; a traceback (SIGINT's KeyboardInterrupt) differs
        # only in the frames that started the module: runpy's under -m, the zygote's here.
        fresh_lines, forked_lines = fresh_log.read_text().splitlines()[1:], forked_log.read_text().splitlines()[1:]
        assert forked_lines[-2:] == fresh_lines[-2:]
        assert ending == "SIGINT" or forked_lines == fresh_lines
    assert fresh.returncode == -signal.SIGINT and fresh_lines[-2:] == ["KeyboardInterrupt", "atexit ran"]
