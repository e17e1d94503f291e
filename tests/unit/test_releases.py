"""A vLLM release is one hand-written file (operator/specdeploy/vllm/releases/v<X>_<Y>_<Z>.py)
plus generated data: the versions, the Makefile's venvs and parity runs are derived from the
release modules, and adding a release touches nothing else by hand (docs/releases.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set
from specdeploy.vllm.releases import CPU_BUILD_VERSION, RELEASES, WHEEL_VERSIONS, module_name, release_venv

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "operator" / "specdeploy" / "vllm" / "data"


def make_lists(root: Path) -> dict[str, list[str]]:
    """What `make vllm-releases` says the Makefile derived."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "vllm-releases"], cwd=root, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return {key: value.split() for key, value in (line.split(":", 1) for line in out.splitlines())}


def test_the_makefile_derives_its_release_lists_from_the_release_modules() -> None:
    assert make_lists(REPO) == {"cpu": [CPU_BUILD_VERSION], "wheels": list(WHEEL_VERSIONS),
                                "wheel-venvs": [release_venv(v) for v in WHEEL_VERSIONS]}
    # The lead's venvs keep their names (.venv-vllm-0.33, .venv-vllm-0.34); a patch release gets its own.
    assert [release_venv(v) for v in ("0.33.0", "0.34.0", "0.34.1", "0.34.10")] == \
        [".venv-vllm-0.33", ".venv-vllm-0.34", ".venv-vllm-0.34.1", ".venv-vllm-0.34.10"]
    code = [line.split("#", 1)[0] for line in (REPO / "Makefile").read_text().splitlines()]
    assert [line for line in code if re.search(r"\b\d+\.\d+\.\d+\b", line)] == [], "a release listed by hand in the Makefile"


def test_each_release_module_names_its_own_release_and_has_its_generated_data() -> None:
    assert SUPPORTED_VERSIONS == tuple(RELEASES) and len(SUPPORTED_VERSIONS) >= 3
    for version in SUPPORTED_VERSIONS:
        assert (REPO / "operator" / "specdeploy" / "vllm" / "releases" / f"{module_name(version)}.py").exists()
        for name in (f"{version}.json", f"parallel_layers-{version}.json"):
            assert json.loads((DATA / name).read_text())["vllm_version"] == version, name
        assert rule_set(version).logic is RELEASES[version].logic


def _copy(tmp_path: Path) -> Path:
    """The checkout's files (not its venvs), committed in a throwaway git repository."""
    root = tmp_path / "repo"
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__", "*.egg-info", ".pytest_cache"))
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, timeout=120)
    return root


PROBE = """
import json
from specdeploy.vllm import DEFAULT_IMAGE, SUPPORTED_VERSIONS, judging_version, rule_set
facts, findings = judging_version(None, "vllm/vllm-openai:v0.34.1")
print(json.dumps({"versions": SUPPORTED_VERSIONS, "default": DEFAULT_IMAGE, "judged": facts.version,
                  "warnings": [f.code for f in findings],
                  "same_logic": rule_set("0.34.1").logic == rule_set("0.34.0").logic}))
"""


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make")
def test_a_new_release_is_one_hand_written_file_plus_generated_data(tmp_path: Path) -> None:
    """The dry run docs/releases.md records: a fake 0.34.1 whose data is 0.34.0's."""
    root = _copy(tmp_path)
    subprocess.run([sys.executable, "scripts/vllm_release.py", "add", "0.34.1", "--data-from", "0.34.0", "--python", sys.executable],
                   cwd=root, check=True, capture_output=True, timeout=300)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True).stdout
    touched = sorted(line[3:] for line in status.splitlines())
    assert touched == [
        "charts/specdeploy/crds/specdeploy.io_speculativedeployments.yaml",  # generated: sync_chart.py
        "crds/specdeploy.io_speculativedeployments.yaml",  # generated: specdeploy crd (the default image)
        "docs/cr-reference.md",  # generated: gen_cr_reference.py
        "operator/specdeploy/vllm/data/0.34.1.json",  # generated: refresh_vllm_facts.py (here 0.34.0's)
        "operator/specdeploy/vllm/data/parallel_layers-0.34.1.json",  # generated: audit_tp_layers.py (here 0.34.0's)
        "operator/specdeploy/vllm/releases/v0_34_1.py",  # the one hand-written file
    ]
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, check=True,
                           env={"PYTHONPATH": str(root / "operator"), "PATH": "/usr/bin:/bin"})
    assert json.loads(probe.stdout) == {"versions": ["0.32.0", "0.33.0", "0.34.0", "0.34.1"], "default": "vllm/vllm-openai:v0.34.1",
                                        "judged": "0.34.1", "warnings": [], "same_logic": True}
    lists = make_lists(root)
    assert lists["wheels"][-1] == "0.34.1" and lists["wheel-venvs"][-1] == ".venv-vllm-0.34.1"
