"""What a process can tell of how it was started, as one JSON line on stdout; then it exits
with the status given, or waits for a signal ("wait"). test_zygote.py runs it fresh and from
the zygote and compares."""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading

import huggingface_hub.constants


def _facts() -> dict[str, object]:
    return {
        "name": __name__, "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "path0": sys.path[0], "cwd": os.getcwd(),
        "env": dict(os.environ), "threads": threading.active_count(), "main_thread": threading.current_thread() is threading.main_thread(),
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP)},
        "blocked": sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "stdio": [os.path.realpath(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)], "stdout_buffered": not sys.stdout.line_buffering,
        "open_descriptors": len(os.listdir("/proc/self/fd")),  # none of the zygote's own (its pipes, pidfds)
        "hf_hub_offline": huggingface_hub.constants.HF_HUB_OFFLINE,  # read at import time
    }


if __name__ == "__main__":
    atexit.register(print, "atexit ran", flush=True)
    print(json.dumps(_facts()), flush=True)
    if sys.argv[1] == "wait":
        while True:
            signal.pause()
    sys.exit(int(sys.argv[1]))
