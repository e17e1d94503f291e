"""Start the shipped operator, `python -m specdeploy.cli run …`, as its own process, forked
from a zygote that has imported it already (zygote.py says why the child is still the shipped
process). `start` returns what the tests used `subprocess.Popen` for: pid, poll, wait,
send_signal, terminate, kill, returncode; signals are real, the exit status is waitpid's."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from .conftest import HANG_GUARD_S, ROOT

ZYGOTE = Path(__file__).with_name("zygote.py")
# Keys the interpreter reads as it starts (sys.path, stdio encoding, locale, allocators, the
# BLAS libraries numpy loads): compared like the keys the imports read.
INTERPRETER_PREFIXES = ("PYTHON", "LANG", "LC_", "LD_", "MALLOC", "OMP_", "OPENBLAS_", "MKL_")
# Keys read at import time whose import-time value the operator never uses, with why.
IMPORT_TIME_EXEMPT = {
    # kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION: only load_kube_config()
    # without a file reads it, and controller/process/kube.py load_configuration passes $KUBECONFIG as
    # read at run time (kopf's login_with_kubeconfig reads it at run time too). Were it ever
    # used, the operator would talk to another test's API server and the test would fail.
    "KUBECONFIG",
}
# Modules that iterate over the whole environment at import time -> the prefixes of the keys
# they keep (compared too), with why.
COPIES_KEPT = {
    # Imported by prometheus_client.exposition; its BaseHandler.os_environ seeds a WSGI
    # environ, and the operator serves /metrics with its own http.server handler (metrics.py).
    "wsgiref.handlers": (),
    # envwrap: TQDM_* become tqdm's defaults (huggingface_hub's progress bars).
    "tqdm.utils": ("TQDM_",),
}


def container_signals() -> None:
    """Signal dispositions as a container runtime starts a process: all at their defaults. A
    shell's background job (make under nohup, a CI runner's step) inherits SIGINT and SIGQUIT
    ignored, and Python keeps an ignored SIGINT ignored: the operator would then survive the
    SIGINT a fresh container process dies of. Popen's `preexec_fn`."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


class _Zygote:
    """One zygote process, started with one environment, and what it reported."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self.env, self.cwd = env, cwd
        descriptor, log = tempfile.mkstemp(prefix="specdeploy-zygote-", suffix=".log")
        os.close(descriptor)
        self.log = Path(log)
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=sink, env=env, cwd=cwd, preexec_fn=container_signals)
        self.ready: dict[str, Any] | None = None
        self.failure = ""
        self.pids: dict[int, int | str] = {}  # request id -> pid, or why there is none
        self.codes: dict[int, int] = {}  # request id -> exit status (a pid may be reused)
        self.changed = threading.Condition()
        self.requests = itertools.count()
        self.writing = threading.Lock()
        threading.Thread(target=self._listen, name="specdeploy-zygote-listener", daemon=True).start()

    def _listen(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.changed:
                if "ready" in message:
                    self.ready = message["ready"]
                elif "exited" in message:
                    self.codes[message["exited"]] = message["code"]
                elif "id" in message:
                    self.pids[message["id"]] = message.get("pid") or message["error"]
                else:
                    self.failure = message["error"]
                self.changed.notify_all()
        with self.changed:
            self.failure = self.failure or f"the zygote exited ({self.log} has its stderr)"
            self.changed.notify_all()

    def until(self, what: str, value: Callable[[], Any]) -> Any:
        """`value()` once it is not None; AssertionError if the zygote fails or a hang."""
        with self.changed:
            if not self.changed.wait_for(lambda: value() is not None or self.failure, HANG_GUARD_S):
                raise AssertionError(f"timed out waiting for {what} from the zygote")
            found = value()
            if found is None:
                raise AssertionError(f"no {what}: {self.failure}")
            return found

    def serves(self, env: dict[str, str], cwd: str) -> bool:
        """Whether a child of this zygote sees at import time what a fresh process with `env`
        would: the same value for every key its imports read, and for the interpreter's own."""
        ready = self.until("its imports", lambda: self.ready)
        both = env.keys() | self.env.keys()
        if set(ready["copied_by"]) <= COPIES_KEPT.keys():
            prefixes = INTERPRETER_PREFIXES + tuple(p for copier in ready["copied_by"] for p in COPIES_KEPT[copier])
            keys = (set(ready["reads"]) - IMPORT_TIME_EXEMPT) | {k for k in both if k.startswith(prefixes)}
        else:  # an import may keep any key: all must agree
            keys = both
        return cwd == self.cwd and all(env.get(k) == self.env.get(k) for k in keys)

    def start(self, module: str, argv: list[str], env: dict[str, str], log: Path | None) -> int:
        request = next(self.requests)
        line = json.dumps({"id": request, "module": module, "argv": argv, "env": env, "cwd": self.cwd,
                           "log": None if log is None else str(log)})
        assert self.proc.stdin is not None
        with self.writing:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        return request

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.unlink(missing_ok=True)


class OperatorProcess:
    """A child of a zygote, used as the tests used subprocess.Popen."""

    def __init__(self, zygote: _Zygote, request: int, args: list[str]) -> None:
        self._zygote, self._request, self.args = zygote, request, args
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        found = self._zygote.until("the forked pid", lambda: self._zygote.pids.get(self._request))
        if isinstance(found, str):
            raise AssertionError(f"the zygote did not start {self.args}: {found}")
        return found

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.codes.get(self._request)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.pid  # a start the zygote refused fails here
        with self._zygote.changed:
            if not self._zygote.changed.wait_for(lambda: self._request in self._zygote.codes or self._zygote.failure, timeout):
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        code = self.poll()
        if code is None:
            raise AssertionError(f"exit status of {self.args} unknown: {self._zygote.failure}")
        return code

    def send_signal(self, sig: int) -> None:
        pid = self.pid
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited since: as Popen.send_signal
                os.kill(pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_ZYGOTES: list[_Zygote] = []
_CHOOSING = threading.Lock()


def start(args: list[str], *, env: dict[str, str], log: Path | None = None, module: str = "specdeploy.cli") -> OperatorProcess:
    """`python -m specdeploy.cli *args` with exactly `env` (as Popen's env=), stdout and stderr
    to `log` (created empty now, as Popen's caller opens it; /dev/null when None). `module`:
    another module to run as `-m` does (test_zygote.py's probe)."""
    if log is not None:
        log.write_bytes(b"")
    cwd = os.getcwd()
    with _CHOOSING:
        zygote = next((z for z in _ZYGOTES if z.serves(env, cwd)), None)
        if zygote is None:
            zygote = _Zygote(dict(env), cwd)
            _ZYGOTES.append(zygote)
    return OperatorProcess(zygote, zygote.start(module, list(args), dict(env), log), ["-m", module, *args])


@atexit.register
def _close() -> None:
    for zygote in _ZYGOTES:
        zygote.close()


def shipped_env(**extra: str) -> dict[str, str]:
    """This process's environment with the operator's source first on PYTHONPATH, as the tests
    that run `specdeploy run` outside the chart give it."""
    path = f"{ROOT / 'operator'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    return {**os.environ, "PYTHONPATH": path, **extra}
