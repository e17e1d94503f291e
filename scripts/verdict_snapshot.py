"""Snapshot `specdeploy validate` and `specdeploy plan` JSON over every model config pair, so a
refactor can show it changed no verdict, finding or plan: run it on two checkouts and diff.

Every config in the given directories (deduplicated by content) is a target for the methods
without a draft model (ngram, mtp), and every ordered pair of configs is a target/draft pair for
draft_model and eagle; each pair also goes through `plan -f` as a CR with both configs inline.
Runs in-process (cli.main with argv), one line of JSON per command: argv, exit code, stdout.

    PYTHONPATH=operator .venv/bin/python scripts/verdict_snapshot.py [--vllm-version X.Y.Z] OUT.jsonl DIR [DIR ...]
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

from specdeploy.cli import main as cli_main

GPU = "H100-80GB"
RELEASE: list[str] = []  # --vllm-version X.Y.Z for every command, when given


def _configs(dirs: list[str]) -> list[Path]:
    seen: dict[str, Path] = {}
    for directory in dirs:
        for path in sorted(Path(directory).rglob("*.json")):
            seen.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    return sorted(seen.values(), key=lambda p: p.name)


def _run(argv: list[str]) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as exc:
            code = exc.code
    return {"argv": argv, "exit": code, "stdout": out.getvalue()}


def _cr(target: Path, draft: Path, method: str) -> str:
    """A CR naming both configs through ConfigMaps in the same stream (config.json text as written)."""
    maps = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
             "data": {"config.json": path.read_text()}} for name, path in (("target", target), ("draft", draft))]
    cr = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
          "metadata": {"name": "pair", "namespace": "default"},
          "spec": {"target": {"model": "org/target", "configMapRef": {"name": "target"}},
                   "draft": {"method": method, "model": "org/draft", "configMapRef": {"name": "draft"},
                             "numSpeculativeTokens": "auto"},
                   "resources": {"gpu": {"product": GPU}},
                   **({"vllmVersion": RELEASE[1]} if RELEASE else {})}}
    return "\n---\n".join(json.dumps(doc) for doc in (*maps, cr))


def _commands(configs: list[Path], workdir: Path) -> list[list[str]]:
    commands = []
    for target in configs:
        for method in ("ngram", "mtp"):
            commands.append(["validate", "--target", str(target), "--method", method, "--num-speculative-tokens", "3",
                             "--gpu", GPU, "-o", "json", *RELEASE])
        for draft in configs:
            if draft == target:
                continue
            for method in ("draft_model", "eagle"):
                commands.append(["validate", "--target", str(target), "--draft", str(draft), "--method", method,
                                 "--num-speculative-tokens", "3", "--gpu", GPU, "-o", "json", *RELEASE])
            cr = workdir / f"{target.stem}--{draft.stem}.yaml"
            cr.write_text(_cr(target, draft, "draft_model"))
            commands.append(["plan", "-f", str(cr), "-o", "json"])
    return commands


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--vllm-version"]:
        RELEASE.extend(args[:2])
        args = args[2:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    configs = _configs(args[1:])
    with tempfile.TemporaryDirectory() as tmp, open(args[0], "w") as out:
        workdir = Path(tmp)
        for argv in _commands(configs, workdir):
            record = _run(argv)
            record["stdout"] = str(record["stdout"]).replace(str(workdir), "<tmp>")
            record["argv"] = [arg.replace(str(workdir), "<tmp>") for arg in argv]
            out.write(json.dumps(record, sort_keys=True) + "\n")
    print(f"{len(configs)} configs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
