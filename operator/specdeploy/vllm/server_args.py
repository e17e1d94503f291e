"""The value a `vllm serve` flag takes from `spec.vllm.extraArgs`, read as the release's
FlexibleArgumentParser reads it (vllm/utils/argparse_utils.py: `--a_b` is `--a-b`, `--x=v`,
unique prefixes of long flags) and as argparse keeps it (the last occurrence wins).
Whether the args are valid at all is validation/extra_args.py's question."""

from __future__ import annotations

from typing import Sequence

from specdeploy.vllm.facts import VllmFacts


def flag_value(args: Sequence[str], name: str, facts: VllmFacts) -> str | bool | None:
    """The last value the flag `name` (its canonical spelling) gets in `args`: its value; for a
    boolean flag True (`--x`) or False (`--no-x`, `--disable-x`); None when it is not given."""
    found: str | bool | None = None
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        key, equals, inline = arg.partition("=")
        flag, _ = facts.resolve_flag(key)
        if flag is None or flag.name != name:
            continue
        if flag.nargs == 0:
            spelled = "--" + key[2:].replace("_", "-")
            found = flag.names[0].startswith(spelled)
        elif equals:
            found = inline
        elif i + 1 < len(args):
            found = args[i + 1]
    return found


def positive_int(value: str | bool | None) -> int | None:
    """A flag value argparse's `type=int` takes and vLLM accepts as a count, else None."""
    if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
        return int(value)
    return None
