"""The supported vLLM releases: one hand-written module per release, `v<X>_<Y>_<Z>.py`, holding
its `RELEASE` (release_logic.Release). Everything else that lists releases is derived from
these modules: `SUPPORTED_VERSIONS` (versions.py), the Makefile's venvs and parity runs
(`scripts/vllm_release.py list`), the rule sets (`data/<version>.json`, generated).
Adding a release: `make vllm-release VERSION=X` writes its module (docs/releases.md)."""

from __future__ import annotations

import importlib
import pkgutil
import re

from specdeploy.vllm.release_logic import Release, ReleaseLogic

MODULE_NAME = re.compile(r"^v(\d+)_(\d+)_(\d+)$")


def module_name(version: str) -> str:
    """0.34.1 -> v0_34_1, the module a release's record lives in."""
    return "v" + version.replace(".", "_")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _load() -> dict[str, Release]:
    """Every release module of this package, oldest first; each must name its own version."""
    found: dict[str, Release] = {}
    for info in pkgutil.iter_modules(__path__):
        if not MODULE_NAME.match(info.name):
            continue
        release: Release = importlib.import_module(f"{__name__}.{info.name}").RELEASE
        if module_name(release.version) != info.name:
            raise ImportError(f"{info.name}.py states release {release.version}: name the module {module_name(release.version)}.py")
        found[release.version] = release
    return dict(sorted(found.items(), key=lambda item: _key(item[0])))


RELEASES: dict[str, Release] = _load()
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(RELEASES)
RELEASE_LOGIC: dict[str, ReleaseLogic] = {version: release.logic for version, release in RELEASES.items()}
# The release whose CPU build serves the e2e suite (the newest with one on PyPI); the others
# judge from their `vllm` wheel's config classes in a venv of their own.
CPU_BUILD_VERSION: str = [v for v, r in RELEASES.items() if r.cpu_build][-1]
WHEEL_VERSIONS: tuple[str, ...] = tuple(v for v in RELEASES if v != CPU_BUILD_VERSION)


def release_venv(version: str) -> str:
    """The wheel venv's directory: .venv-vllm-<major.minor> for a minor's first release (the
    venvs built so far), .venv-vllm-<version> for a patch release beside it."""
    major, minor, patch = version.split(".")
    return f".venv-vllm-{major}.{minor}" if patch == "0" else f".venv-vllm-{version}"
