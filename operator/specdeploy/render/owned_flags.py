"""vLLM flags the plan owns, and the finding for `vllm.extraArgs` that tries to set one.

An extra arg that repeats a plan-owned flag would silently win over the plan (argparse keeps
the last value), e.g. undo the tensor parallel size that validation checked. The flag list
is what `render.pod.vllm_args` writes; the pipeline calls `extra_args_findings` with the
other validation rules.
"""

from __future__ import annotations

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.validation.findings import Finding, error

OWNED_FLAGS: frozenset[str] = frozenset(
    {
        "--model",
        "--served-model-name",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--trust-remote-code",
        "--revision",
        "--port",
        "--speculative-config",
        "--distributed-executor-backend",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
    }
)
# Short aliases vLLM's parser accepts for owned flags.
_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}

CODE = "extra-arg-owned-by-plan"


def owned_flag(arg: str) -> str | None:
    """The owned flag `arg` sets, in any spelling vLLM accepts (`--x=v`, `--x_y`,
    `--speculative-config.method`, `--no-x`), else None."""
    if not arg.startswith("-"):
        return None
    key = arg.split("=", 1)[0]
    if key in _ALIASES:
        return _ALIASES[key]
    if not key.startswith("--"):
        return None
    key = "--" + key[2:].replace("_", "-").split(".", 1)[0]
    if key.startswith("--no-") and "--" + key[5:] in OWNED_FLAGS:
        return "--" + key[5:]
    return key if key in OWNED_FLAGS else None


def extra_args_findings(spec: SpeculativeDeploymentSpec) -> list[Finding]:
    """One error per extra arg that overrides a plan-owned flag."""
    findings = []
    for index, arg in enumerate(spec.vllm.extra_args):
        flag = owned_flag(arg)
        if flag is not None:
            findings.append(
                error(
                    CODE,
                    f"spec.vllm.extraArgs[{index}]",
                    f"{arg!r} sets {flag}, which the operator derives from the spec and the plan; "
                    "set the matching spec field instead (e.g. parallelism, serving, draft).",
                )
            )
    return findings
