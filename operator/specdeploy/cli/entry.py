"""specdeploy: check a vLLM speculative-decoding pair before any GPU is taken, plan its
layout, judge a running server's acceptance, and run the Kubernetes operator that serves it.

Exit status (scripts rely on it): 0 valid, 1 invalid (the findings say why), 2 usage or I/O
error (a bad flag, an unreadable file, a config that could not be read) or a spec that could not
be judged here (a method only a preflight of the image can judge: `specdeploy preflight`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from specdeploy.cli.advise import add_advise
from specdeploy.cli.common import EXIT_USAGE, UsageError, dump_json, dump_yaml
from specdeploy.cli.crd import add_crd
from specdeploy.cli.local_preflight import add_preflight
from specdeploy.cli.plan import add_plan
from specdeploy.cli.run import add_run
from specdeploy.cli.validate import add_validate


# One function per subcommand adds its parser; a new subcommand is one more entry here.
SUBCOMMANDS: list[Callable[[Any], None]] = [add_validate, add_plan, add_preflight, add_advise, add_crd, add_run]


class _Version(argparse.Action):
    """--version, importing the vLLM facts only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from specdeploy import __version__
        from specdeploy.vllm import DEFAULT_VERSION, SUPPORTED_VERSIONS

        print(f"specdeploy {__version__} (vLLM rules of {', '.join(SUPPORTED_VERSIONS)}; default {DEFAULT_VERSION})")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdeploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="print the version and the vLLM releases whose rules it knows")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


class _StdoutTillClosed:
    """stdout that, once its reader has gone (`specdeploy plan -f x | head`), sends the rest to
    /dev/null: the command ends quietly with its verdict's exit status, as under `set -o pipefail`
    a script must still see an invalid stream fail."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _closed(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            self._stream.flush()  # what was buffered now goes to /dev/null

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(parser, args)
    stdout, sys.stdout = sys.stdout, _StdoutTillClosed(sys.stdout)
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except UsageError as exc:
        return _usage_failure(args, exc.field, exc.message)
    except (OSError, ValueError) as exc:
        return _usage_failure(args, "", str(exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not the user's input: say so in one line, never a traceback
        if os.environ.get("SPECDEPLOY_DEBUG"):
            raise
        return _usage_failure(args, "", f"internal error ({type(exc).__name__}: {exc}); SPECDEPLOY_DEBUG=1 shows the traceback, please report it")
    finally:
        sys.stdout = stdout


def _usage_failure(args: argparse.Namespace, field: str, message: str) -> int:
    """Exit 2, the message on stderr; with -o json/yaml also a machine-readable error on stdout."""
    print(f"specdeploy: {field + ': ' if field else ''}{message}", file=sys.stderr)
    output = getattr(args, "output", "text")
    if output in ("json", "yaml"):
        data = {"ok": False, "error": {"field": field, "message": message}}
        print(dump_json(data) if output == "json" else dump_yaml(data), end="\n" if output == "json" else "")
    return EXIT_USAGE
