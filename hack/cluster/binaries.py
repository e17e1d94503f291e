"""Where the pinned Go-built binaries are: hack/cluster/build.sh builds them once from the Go
module proxy (one wrapper module per upstream project) and caches them outside the clone.

Kept apart from controlplane.py so the chart tests can find helm without loading the cluster
code: there is one helm, the one hack/cluster/helm/go.mod pins.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(only: str = "") -> Path:
    """The binaries' directory; `only="helm"` builds (or finds) helm alone."""
    args = ["bash", str(HERE / "build.sh"), *([only] if only else [])]
    done = subprocess.run(args, stdout=subprocess.PIPE, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def helm() -> Path:
    """The pinned helm binary."""
    return build("helm") / "helm"


def helm_version() -> str:
    """The helm release hack/cluster/helm/go.mod pins (the version the binary reports)."""
    for line in (HERE / "helm" / "go.mod").read_text(encoding="utf-8").splitlines():
        fields = line.split("//")[0].split()
        if fields[-2:-1] == ["helm.sh/helm/v4"]:
            return fields[-1]
    raise LookupError("hack/cluster/helm/go.mod does not require helm.sh/helm/v4")
