"""The operator image: the Dockerfile installs the package pyproject.toml defines, nothing else,
at the versions the tests ran, on a base pinned by digest.

No container engine runs in CI, so these checks read the Dockerfile's instructions and hold
them against pyproject.toml, the installed package metadata, constraints/core.txt and the chart:
the wheel is built from exactly the files `pip install .` reads with constraints/core.txt, which
pins every package the image installs at the version installed where the tests run; the final
stage installs that wheel set (offline, by the project's name), runs the project's console
script as `specdeploy run`, as the same non-root uid the chart's pod security context names,
with no build tools left behind.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import re
import shlex
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from specdeploy.api.image_reference import image_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
CONSTRAINTS = "constraints/core.txt"
CHART_VALUES = yaml.safe_load((REPO_ROOT / "charts" / "specdeploy" / "values.yaml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


INSTRUCTIONS = instructions(DOCKERFILE.read_text())


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in INSTRUCTIONS:
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


BUILD, FINAL = stages()[0], stages()[-1]


def runs(stage) -> str:
    return " && ".join(args for keyword, args in stage if keyword == "RUN")


def test_two_stages_on_the_same_slim_python_pinned_by_digest_matching_requires_python():
    """A tag alone moves with every Python and Debian update: the base is its digest."""
    assert len(stages()) == 2
    arg = next(args for keyword, args in INSTRUCTIONS if keyword == "ARG" and args.startswith("PYTHON_IMAGE="))
    image = arg.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?@sha256:[0-9a-f]{64}", image), image
    assert image_problem(image) is None  # a reference the kubelet and docker parse
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert BUILD[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert FINAL[0] == ("FROM", "${PYTHON_IMAGE}")


def test_build_stage_builds_the_wheel_from_what_pip_install_dot_reads():
    copied = []
    for keyword, args in BUILD:
        if keyword == "COPY":
            *sources, _dest = shlex.split(args)
            copied += [s.rstrip("/") for s in sources]
    package_dirs = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]
    assert set(copied) == {"pyproject.toml", PYPROJECT["project"]["readme"], *package_dirs, CONSTRAINTS}
    assert re.search(rf"pip wheel .*--constraint {CONSTRAINTS} .*--wheel-dir /wheels \.$", runs(BUILD)), runs(BUILD)


IMAGE_PLATFORM = {"python_version": "3.11", "python_full_version": "3.11.16", "sys_platform": "linux", "os_name": "posix",
                  "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                  "platform_python_implementation": "CPython", "extra": ""}


def _installed_by_the_image() -> dict[str, str]:
    """What `pip install specdeploy` brings into the image (CPython 3.11 on Linux), by the
    metadata of the venv the tests run in: name -> the version installed here."""
    seen: dict[str, str] = {}
    todo = [PYPROJECT["project"]["name"]]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())  # not installed here: the tests never ran it
        seen[canonicalize_name(dist.metadata["Name"])] = dist.version
        for text in dist.requires or []:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            if (requirement.marker is None or requirement.marker.evaluate(IMAGE_PLATFORM)) and name not in seen and name not in todo:
                todo.append(name)
    del seen[PYPROJECT["project"]["name"]]
    return seen


def _pins() -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in (REPO_ROOT / CONSTRAINTS).read_text().splitlines()]
    return {canonicalize_name(name): version for name, _, version in (line.partition("==") for line in lines if line)}


def test_every_package_the_image_installs_is_pinned_at_the_version_the_tests_ran():
    """The build resolves with constraints/core.txt: a package it does not pin would float to
    the day's release; a pin that differs from this venv's would ship what no test ran."""
    image, pins = _installed_by_the_image(), _pins()
    assert len(image) > 20  # pydantic, kopf, kubernetes, transformers and what they pull in
    unpinned = sorted(set(image) - set(pins))
    assert not unpinned, f"the image would install these at whatever version is newest: {unpinned}"
    differ = {name: (pins[name], version) for name, version in image.items() if pins[name] != version}
    assert not differ, f"constraints/core.txt pins other versions than the tests ran (pin, tested): {differ}"


def test_final_stage_installs_only_that_wheel_set_by_project_name():
    assert ("COPY", "--from=build /wheels /wheels") in FINAL
    assert not any(k == "COPY" and "--from=" not in a for k, a in FINAL), "final stage copies sources"
    install = runs(FINAL)
    name = PYPROJECT["project"]["name"]
    assert f"pip install --no-cache-dir --no-index --find-links /wheels {name} " in install + " "
    # No build tools: nothing installed through apt, and pip/setuptools/wheel removed afterwards.
    assert "apt-get" not in install and "apk " not in install
    assert "pip uninstall -y pip setuptools wheel" in install
    assert "rm -rf /wheels" in install


def test_entrypoint_is_the_console_script_run_subcommand():
    entrypoint = [args for keyword, args in FINAL if keyword == "ENTRYPOINT"]
    assert entrypoint == ['["specdeploy", "run"]']
    assert PYPROJECT["project"]["scripts"] == {"specdeploy": "specdeploy.cli:main"}
    # The installed distribution (pip install -e '.[dev]') exposes the same console script.
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.dist is not None and ep.dist.name == PYPROJECT["project"]["name"]}
    assert scripts.get("specdeploy") == "specdeploy.cli:main"


def test_runs_as_the_non_root_uid_the_chart_declares():
    user = [args for keyword, args in FINAL if keyword == "USER"]
    assert len(user) == 1
    uid, _, gid = user[0].partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER lets runAsNonRoot be verified"
    pod = CHART_VALUES["podSecurityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (int(uid), int(gid))
    assert f"--uid {uid}" in runs(FINAL) and f"--gid {gid}" in runs(FINAL)
    # USER is the last instruction that changes identity: ENTRYPOINT runs as it.
    keywords = [k for k, _ in FINAL]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")


def test_writable_paths_point_into_the_charts_tmp_emptydir():
    """The chart mounts a read-only root filesystem with an emptyDir on /tmp only."""
    env = " ".join(args for keyword, args in FINAL if keyword == "ENV")
    assert "HOME=/tmp" in env and "HF_HOME=/tmp/" in env and "PYTHONDONTWRITEBYTECODE=1" in env


def test_expose_matches_the_chart_health_port():
    exposed = [args for keyword, args in FINAL if keyword == "EXPOSE"]
    assert exposed == [str(CHART_VALUES["operator"]["healthPort"])]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat + "/*") or path.startswith(pat + "/"):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_every_copied_path_and_drops_the_rest():
    patterns = [l.strip() for l in DOCKERIGNORE.read_text().splitlines() if l.strip() and not l.startswith("#")]
    for keyword, args in BUILD:
        if keyword == "COPY":
            for source in shlex.split(args)[:-1]:
                assert not _ignored(source.rstrip("/"), patterns), f"{source} is excluded by .dockerignore"
    assert not _ignored("operator/specdeploy/__init__.py", patterns)
    for path in (".venv/bin/python", "tests/unit/test_chart.py", ".git/config", ".cluster/kubeconfig",
                 "operator/specdeploy/__pycache__/x.pyc", "charts/specdeploy/Chart.yaml"):
        assert _ignored(path, patterns), f"{path} would be sent to the build context"


def test_the_readme_builds_and_pushes_the_image_and_tag_the_chart_runs():
    """A newcomer who follows the README pushes what `helm install` then pulls."""
    chart = yaml.safe_load((REPO_ROOT / "charts" / "specdeploy" / "Chart.yaml").read_text())
    tag = CHART_VALUES["image"]["tag"] or chart["appVersion"]
    image = f"{CHART_VALUES['image']['repository']}:{tag}"
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"docker build -t {image} ." in readme and f"docker push {image}" in readme
    assert f"`{image}`" in readme and "image.repository" in readme
