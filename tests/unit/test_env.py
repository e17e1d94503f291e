"""The operator's numeric settings: one rule (controller/process/env.py) for every variable, and a bad
value stops `specdeploy run` at start-up with a message naming the variable and what it allows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.controller.process import env
from specdeploy.controller.process import main  # noqa: F401  (imports and so declares every setting)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw, expected", [
    ("soon", "SPECDEPLOY_X must be a number >= 1, got 'soon'"),
    ("0.5", "SPECDEPLOY_X must be a number >= 1, got 0.5"),
    ("nan", "SPECDEPLOY_X must be a number >= 1, got 'nan'"),
    ("inf", "SPECDEPLOY_X must be a number >= 1, got 'inf'"),
])
def test_a_bad_number_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str, expected: str) -> None:
    monkeypatch.setenv("SPECDEPLOY_X", raw)
    with pytest.raises(ValueError) as refused:
        env.env_number("SPECDEPLOY_X", 2, minimum=1)
    assert str(refused.value) == expected


def test_bounds_integers_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECDEPLOY_X", raising=False)
    assert env.env_number("SPECDEPLOY_X", 16, minimum=1, integer=True) == 16  # unset: the default
    monkeypatch.setenv("SPECDEPLOY_X", " ")
    assert env.env_number("SPECDEPLOY_X", 16, minimum=1, integer=True) == 16  # empty (a blank chart value)
    monkeypatch.setenv("SPECDEPLOY_X", "8")
    assert env.env_number("SPECDEPLOY_X", 16, minimum=1, integer=True) == 8
    monkeypatch.setenv("SPECDEPLOY_X", "1.5")
    with pytest.raises(ValueError, match=r"^SPECDEPLOY_X must be an integer >= 1, got '1.5'$"):
        env.env_number("SPECDEPLOY_X", 16, minimum=1, integer=True)
    monkeypatch.setenv("SPECDEPLOY_X", "0")
    with pytest.raises(ValueError, match=r"^SPECDEPLOY_X must be a number > 0, got 0$"):
        env.env_number("SPECDEPLOY_X", 60, minimum=0, exclusive=True)
    monkeypatch.setenv("SPECDEPLOY_X", "70000")
    with pytest.raises(ValueError, match=r"^SPECDEPLOY_X must be an integer from 1 to 65535, got 70000$"):
        env.env_number("SPECDEPLOY_X", 0, minimum=1, maximum=65535, integer=True)


# Each setting the operator reads by hand before, now declared: a bad value is refused by name.
@pytest.mark.parametrize("name, bad, allowed", [
    ("SPECDEPLOY_API_CONNECTIONS", "many", "an integer >= 1"),
    ("SPECDEPLOY_API_TIMEOUT_S", "-1", "a number > 0"),
    ("SPECDEPLOY_BACKOFF_SCALE", "fast", "a number >= 0"),
    ("SPECDEPLOY_LEASE_DURATION_S", "1", "a number >= 3"),
    ("SPECDEPLOY_METRICS_PORT", "http", "an integer from 1 to 65535"),
    ("SPECDEPLOY_WEBHOOK_PORT", "0", "an integer from 1 to 65535"),
    ("SPECDEPLOY_RECONCILE_BUDGET_S", "0", "a number >= 0.1"),
    ("SPECDEPLOY_MAX_RECONCILES", "2.5", "an integer >= 1"),
    ("SPECDEPLOY_TELEMETRY_INTERVAL_S", "0", "a number > 0"),
])
def test_every_operator_setting_is_checked(monkeypatch: pytest.MonkeyPatch, name: str, bad: str, allowed: str) -> None:
    assert name in {s.name for s in env.declared()}
    env.check()  # the defaults pass
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"^{name} must be {allowed}, got "):
        env.check()


def test_the_operator_refuses_to_start_with_a_bad_setting(tmp_path: Path) -> None:
    """`specdeploy run` as the chart starts it: exit 2 and one line naming the variable, before
    it needs a cluster (no kubeconfig here), no traceback."""
    environment = {**os.environ, "SPECDEPLOY_API_CONNECTIONS": "sixteen", "KUBECONFIG": str(tmp_path / "none"),
                   "PYTHONPATH": f"{ROOT / 'operator'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    environment.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run([sys.executable, "-m", "specdeploy.cli", "run", "--namespace", "ns1"], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "specdeploy: SPECDEPLOY_API_CONNECTIONS must be an integer >= 1, got 'sixteen'"
