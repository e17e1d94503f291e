"""The cluster suite's fixtures: one control plane and one chart installation per session
(tests/cluster/bed.py says what runs and how it differs from a cluster)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .bed import Cluster, install, uninstall  # bed puts hack/cluster on sys.path

from controlplane import ControlPlane, build, default_pool  # noqa: E402  isort: skip


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    control = ControlPlane(tmp_path_factory.mktemp("control-plane"), build(), default_pool())
    try:
        control.up()
        yield control
    finally:
        control.down()


@pytest.fixture(scope="session")
def cluster(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The chart installed with the webhook on and telemetry every 2 s, two operator replicas
    running, the node agent up."""
    made = install(plane, tmp_path_factory.mktemp("operators"), sets=("telemetryIntervalSeconds=2",))
    try:
        yield made
    finally:
        uninstall(made)
