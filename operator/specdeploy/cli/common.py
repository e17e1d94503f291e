"""What every subcommand shares: exit codes, output formats, the Hub's offline test and the
YAML stream `-f` reads."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
OUTPUTS = ("text", "json", "yaml")
OFFLINE_HINT = ("give a local config.json (or a directory holding one) instead, put the config in a ConfigMap "
                "or inline it (plan -f), or pre-fill the Hugging Face cache and set HF_HUB_OFFLINE=1")


class UsageError(Exception):
    """Exit 2: the command could not judge anything; `field` names the flag or file at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message = field, message


# ---- output -----------------------------------------------------------------------------------

def dump_json(data: Any) -> str:
    # allow_nan=False: never print NaN, which is not JSON (the stream loader refuses it earlier).
    return json.dumps(data, indent=2, allow_nan=False)


def dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, width=120)


def emit(output: str, data: dict[str, Any], text: Callable[[], str]) -> None:
    if output == "json":
        print(dump_json(data))
    elif output == "yaml":
        print(dump_yaml(data), end="")
    else:
        print(text(), end="")


def findings_text(findings: list[dict[str, str]], indent: str = "  ") -> list[str]:
    return [f"{indent}[{f['severity']}] {f['code']} {f['field']}: {f['message']}" for f in findings]


def plan_text(plan: dict[str, Any] | None, indent: str = "") -> list[str]:
    if not plan:
        return []
    draft = f", draft TP {plan['draftTensorParallelSize']}" if plan.get("draftTensorParallelSize") else ""
    lines = [f"{indent}plan: {plan['method']} k={plan['numSpeculativeTokens']}, TP {plan['tensorParallelSize']}{draft}, "
             f"PP {plan['pipelineParallelSize']}, {plan['nodesPerReplica']} node(s) x {plan['gpusPerPod']} GPU(s)"]
    for model in ("target", "draft"):
        layout = plan.get(model)
        if layout:
            lines.append(f"{indent}  {model}: {layout['attentionHeadsPerGpu']} heads/GPU, {layout['kvHeadsPerGpu']} KV heads/GPU, "
                         f"head size {layout['headSize']}, MLA {layout['usesMLA']}, experts {layout['numExperts']}")
    memory = plan.get("memory")
    if memory:
        lines.append(f"{indent}  memory/GPU: weights {memory['targetWeightsGiB'] + memory['draftWeightsGiB']:.1f} GiB + KV {memory['kvCacheGiB']:.1f} GiB"
                     f" + reserve {memory['activationReserveGiB']:.1f} GiB = {memory['requiredGiB']:.1f} of {memory['budgetGiB']:.1f} GiB")
    return lines


# ---- Hub access --------------------------------------------------------------------------------

def hf_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


_HUB_LOCAL_ONLY: bool | None = None


def hub_local_only() -> bool:
    """Asked once per process: offline (HF_HUB_OFFLINE, or no route to the Hub) reads the cache only."""
    global _HUB_LOCAL_ONLY
    if _HUB_LOCAL_ONLY is None:
        from specdeploy.sources.hub import hub_reachable

        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        _HUB_LOCAL_ONLY = offline or not hub_reachable()
    return _HUB_LOCAL_ONLY


def looks_local(ref: str) -> bool:
    from specdeploy.sources.resolve import path_exists

    return path_exists(Path(ref)) or ref.endswith(".json") or ref.startswith((".", "/", "~"))


# ---- the YAML stream (plan, preflight) --------------------------------------------------------

def stream_arguments(parser: argparse.ArgumentParser) -> None:
    """-f and -n, as `plan` and `preflight` read a YAML stream."""
    parser.add_argument("-f", "--filename", required=True,
                        help="YAML or JSON stream: a file, a directory (its .json, .yaml and .yml files, as kubectl reads it) or '-' for stdin")
    parser.add_argument("-n", "--namespace", default=None, help="namespace for every object (default: each object's, else 'default')")


MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")  # what `kubectl apply -f DIR` reads from a directory


def read_stream(filename: str) -> tuple[str, str]:
    """The YAML stream `-f` names: stdin ('-'), a file, or, as kubectl does, every .json, .yaml
    and .yml file directly in a directory, in name order."""
    if filename == "-":
        return sys.stdin.read(), "<stdin>"
    path = Path(filename)
    try:
        if not path.is_dir():
            return path.read_text(), filename
        files = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        if not files:
            raise UsageError("--filename", f"{filename} holds no {', '.join(MANIFEST_SUFFIXES)} file")
        return "\n---\n".join(p.read_text() for p in files), filename
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError("--filename", f"cannot read {filename}: {exc}") from None
