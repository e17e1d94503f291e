"""A zygote: a Python process that has imported the operator's modules once and forks a child
for each operator process a test starts (`operator_process.py` is the test side). A start no
longer pays the import of kopf, kubernetes, transformers and pydantic again (about 20 s on a
busy 2-core machine): a session pays it once per import-time environment (see below).

Why the child is still the shipped process, `python -m specdeploy.cli run …`:
- It runs `specdeploy.cli` as `__main__` with runpy, as `-m` does: the same `main()` parses the
  test's argv (sys.argv[0] is cli/__main__.py's path, as under -m), and its `sys.exit` ends the process
  through the interpreter's own exit: non-daemon threads joined, atexit handlers run, stdio
  flushed (multiprocessing's children end in os._exit instead, which is why this is not its
  forkserver).
- It has its own pid; the test's os.kill reaches it, and the exit status the test reads is
  the one waitpid gives (0, 2, -15, -9 …), as Popen.returncode says it.
- Its signal dispositions are a fresh interpreter's: the zygote never installs a handler (it
  learns of exits through pidfds, not SIGCHLD), and it has no thread and no event loop when it
  forks (checked before each fork); kopf, its threads and loops start in the child.
- stdin is /dev/null, stdout and stderr the test's log file, the cwd the test's; besides those
  three only what the imports opened is open, as under Popen's close_fds. No logging is
  configured in the zygote: the operator's own `configure_logging` runs in the child.
- The environment is the test's: os.environ is replaced before `main` runs, so what the
  operator reads at run time (its settings, KUBECONFIG, POD_NAME …) is the test's. What the
  imports read at import time (huggingface_hub.constants' HF_HUB_OFFLINE and HF_ENDPOINT,
  controller/reconcile/state.py's pool sizes, …) is recorded while the zygote imports (ImportTimeReads),
  and a start is only served by a zygote whose environment had the same value for each of
  those keys and for every key the interpreter reads as it starts (PYTHON*, LC_*, …), in the
  same cwd; otherwise the test side starts another zygote with the test's environment. The
  exceptions are named, with why, in operator_process.IMPORT_TIME_EXEMPT. What the imports
  wrote to the environment (specdeploy/__init__.py's TRANSFORMERS_VERBOSITY) is written to the
  child's as well.

Protocol: JSON lines. Out: {"ready": {"reads", "copied_by", "writes"}} once imported (or
{"error"}), then {"id", "pid"} per start and {"exited": id, "code"} per exit. In: one start
request per line ({"id", "module", "argv", "env", "cwd", "log"}); end of input stops the
zygote (its running children go on)."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import selectors
import sys
import threading
import traceback
from typing import Any, Iterator

PRELOAD = ("specdeploy.controller.process.main",)  # what `specdeploy run` imports; cli/__main__.py runs as __main__


class ImportTimeReads(os._Environ):  # type: ignore[type-arg]
    """os.environ while the zygote imports: notes each key read, and which modules copied the
    whole environment (iterating over it), over the same data as os.environ."""

    def __init__(self, environ: Any) -> None:
        super().__init__(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue, environ.decodevalue)
        self.keys: set[str] = set()
        self.copied_by: set[str] = set()
        self._copying = 0

    def __getitem__(self, key: str) -> str:
        if not self._copying:
            self.keys.add(key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[str]:
        self.copied_by.add(_importer())
        self._copying += 1
        try:
            yield from super().__iter__()
        finally:
            self._copying -= 1

    def copy(self) -> dict[str, str]:
        self.copied_by.add(_importer())
        self._copying += 1
        try:
            return {key: os._Environ.__getitem__(self, key) for key in os._Environ.__iter__(self)}
        finally:
            self._copying -= 1


def _importer() -> str:
    """The module that touched the environment (past os, the mapping mixins and this file)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in ("os", "collections.abc", __name__):
        frame = frame.f_back  # type: ignore[assignment]
    return str(frame.f_globals.get("__name__")) if frame is not None else "?"


def preload(modules: tuple[str, ...]) -> dict[str, Any]:
    """Import `modules`, recording what they read from and wrote to the environment."""
    original = os.environ
    before = dict(original)
    recorder = ImportTimeReads(original)
    os.environ = recorder  # os.getenv reads this global too
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        os.environ = original
    after = dict(original)
    writes = {key: after.get(key) for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    return {"reads": sorted(recorder.keys), "copied_by": sorted(recorder.copied_by), "writes": writes}


def _send(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def serve() -> None:
    """Import, then fork a child per request and report each exit, until the input ends."""
    sys.path[0] = os.getcwd()  # as under `python -m`: the cwd first, not this file's folder
    try:
        imported = preload(PRELOAD)
    except BaseException:  # noqa: BLE001 - said to the test side, which fails the start with it
        _send({"error": traceback.format_exc()})
        return
    _send({"ready": imported})
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, request id)
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fd != 0:
                _reap(key.fd, selector, children)
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _start(json.loads(line), imported["writes"], selector, children)


def _reap(pidfd: int, selector: selectors.BaseSelector, children: dict[int, tuple[int, int]]) -> None:
    pid, request = children.pop(pidfd)
    selector.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    _send({"exited": request, "code": os.waitstatus_to_exitcode(status)})


def _start(request: dict[str, Any], writes: dict[str, str | None], selector: selectors.BaseSelector,
           children: dict[int, tuple[int, int]]) -> None:
    if threading.active_count() != 1:  # a thread would not exist in the child; its locks might
        _send({"id": request["id"], "error": f"the zygote has {threading.active_count()} threads; it forks with one"})
        return
    pid = os.fork()
    if pid == 0:
        selector.close()
        for pidfd in children:
            os.close(pidfd)
        _become(request, writes)  # never returns: SystemExit unwinds to the interpreter's exit
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, request["id"])
    selector.register(pidfd, selectors.EVENT_READ)
    _send({"id": request["id"], "pid": pid})


def _become(request: dict[str, Any], writes: dict[str, str | None]) -> None:
    """In the child: the test's stdio, cwd and environment, then the module as `python -m`
    runs it. Ends by raising SystemExit (the module's own, or 0 as the interpreter would)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out = os.open(request["log"] or os.devnull, os.O_WRONLY | os.O_CREAT, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.chdir(request["cwd"])
    environment = dict(request["env"])
    for key, value in writes.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [sys.argv[0], *request["argv"]]  # runpy puts the module's path first, as -m does
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


if __name__ == "__main__":
    serve()
