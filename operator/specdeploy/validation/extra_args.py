"""`spec.vllm.extraArgs` judged by the judging release's own server CLI (`vllm serve`'s argparse
parser, as data in `VllmFacts.server_flags`).

The args are an exec list, one argv element each, appended after the plan's. Each is read the way
vLLM's FlexibleArgumentParser reads it (vllm/utils/argparse_utils.py: `--a_b` is `--a-b`,
`--x=v`, `--x.key v` for JSON config flags, unique prefixes of long flags, `-O3`) and then
argparse's arity rules apply. A flag the plan owns would silently win over the plan (argparse
keeps the last value), so those are refused too."""

from __future__ import annotations

import re

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import MAX_MESSAGE, Finding, Stage, at_stage, cut, error
from specdeploy.vllm import ServerFlag, VllmFacts

# The flags `render.pod.vllm_args` writes (a test checks the two agree).
OWNED_FLAGS: frozenset[str] = frozenset({
    "--model", "--served-model-name", "--tensor-parallel-size", "--pipeline-parallel-size", "--max-model-len",
    "--gpu-memory-utilization", "--kv-cache-dtype", "--trust-remote-code", "--revision", "--port",
    "--speculative-config", "--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr",
    "--master-port", "--headless",
})
_NUMBER = re.compile(r"^-\d+(\.\d*)?$|^-\.\d+$")  # argparse reads these as values, not flags
# A flag and its value in one element ('--max-num-seqs 256'): no shell splits an exec list.
EXTRA_ARG_JOINED = "extra-arg-joined"


def _field(index: int) -> str:
    return f"spec.vllm.extraArgs[{index}]"


def check_extra_args(spec: SpeculativeDeploymentSpec, facts: VllmFacts) -> list[Finding]:
    """One finding per argument vLLM's CLI would refuse or that overrides the plan."""
    args, findings, i = spec.vllm.extra_args, [], 0
    while i < len(args):
        i, found = _check_flag(args, i, facts)
        findings += found
    return at_stage(findings, Stage.SPEC)


def _check_flag(args: list[str], i: int, facts: VllmFacts) -> tuple[int, list[Finding]]:
    """The flag at args[i] with the values it takes: where the next flag starts, and what is wrong."""
    arg, field = args[i], _field(i)
    i += 1
    if not arg.startswith("-") or _NUMBER.match(arg) or arg == "-":
        return i, [error("extra-arg-unexpected-value", field,
                         f"{arg!r} is not a flag and follows no flag that takes a value; vLLM's only positional argument is the model, which the operator sets. Each extra arg is one element: a flag, or the value right after it")]
    joined = _joined(arg, field, facts)
    if joined:
        return i, joined
    key, inline = (arg.split("=", 1) + [None])[:2] if "=" in arg else (arg, None)
    if re.match(r"^-O\d?$", key) and key != "-O":
        return i, []  # -O3: the optimization level, value attached
    dotted = "." in key
    base = key.split(".", 1)[0] if dotted else key
    flag, problem = facts.resolve_flag(base)
    if flag is None:
        return i, [error("extra-arg-unknown-flag", field, f"{arg!r}: {base} {problem}")]
    findings = []
    if flag.name in OWNED_FLAGS:
        findings.append(error("extra-arg-owned-by-plan", field,
                              f"{arg!r} sets {flag.name}, which the operator derives from the spec and the plan; set the matching spec field instead (e.g. parallelism, serving, draft)"))
    if dotted and flag.nargs == 0:
        return i, findings + [error("extra-arg-unexpected-value", field, f"{arg!r}: {flag.name} is a boolean flag and has no keys")]
    takes = 1 if dotted else flag.nargs  # `--x.key v`: one JSON value for that key
    if takes == 0:
        return _boolean_flag(args, i, arg, inline, flag, findings)
    values, i = _values(args, i, inline, takes)
    if takes in (1, "+") and not values:
        return i, findings + [error("extra-arg-missing-value", field,
                                    f"{arg!r}: {flag.name} needs a value, as the next element (or {flag.name}=VALUE)")]
    if flag.choices and not dotted:
        findings += [error("extra-arg-invalid-choice", field,
                           f"{arg!r}: {value!r} is not one of {flag.name}'s choices in vLLM {facts.version}: {', '.join(flag.choices)}")
                     for value in values if value not in flag.choices]
    return i, findings


def _joined(arg: str, field: str, facts: VllmFacts) -> list[Finding]:
    """A flag written with its value in one element: vLLM would read '--max-num-seqs 256' as one
    unknown flag; say it is two items, not that the flag does not exist."""
    parts = arg.split()
    if len(parts) < 2 or "=" in parts[0] or facts.resolve_flag(parts[0])[0] is None:
        return []
    items = ", ".join(repr(p) for p in parts)
    return [error(EXTRA_ARG_JOINED, field, cut(f"{cut(arg, 60)!r} is {len(parts)} args in one item (no shell splits "
                                               f"the list): write {len(parts)} items, [{items}]", MAX_MESSAGE))]


def _boolean_flag(args: list[str], i: int, arg: str, inline: str | None, flag: ServerFlag,
                  findings: list[Finding]) -> tuple[int, list[Finding]]:
    """A flag that takes no value: `--flag=x` and `--flag x` are refused (x is consumed)."""
    if inline is not None:
        return i, findings + [error("extra-arg-unexpected-value", _field(i - 1), f"{arg!r}: {flag.name} is a boolean flag and takes no value")]
    if i < len(args) and not args[i].startswith("-"):
        return i + 1, findings + [error("extra-arg-unexpected-value", _field(i),
                                        f"{args[i]!r} follows the boolean flag {flag.name}, which takes no value (use its --no-/--disable- form to turn it off)")]
    return i, findings


def _values(args: list[str], i: int, inline: str | None, takes: int | str) -> tuple[list[str], int]:
    """The values a flag takes, from `--flag=v` or the elements after it; where the next flag starts."""
    if inline is not None:
        return [inline], i
    values: list[str] = []
    while i < len(args) and (not args[i].startswith("-") or _NUMBER.match(args[i])):
        values.append(args[i])
        i += 1
        if takes in (1, "?"):
            break
    return values, i
