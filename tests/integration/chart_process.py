"""The operator process exactly as the chart's Deployment runs it: `specdeploy run` with the
container's rendered args and env (`helm template`), the pod's fieldRefs filled in, and only the
ports moved to free ones (two replicas share this machine's loopback). Signals are real. Each
pod is forked from a zygote that has the operator imported (operator_process.py, zygote.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable

import yaml

from . import operator_process
from .conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdeploy"
RELEASE, NAMESPACE = "sd", "ns1"
# A short lease keeps the tests quick; the chart's default is leader.LEASE_DURATION.
# The emulator has no kubelet to run a preflight Job: chart-run operators are rendered with the
# chart's own switch off (test_preflight.py runs the Job with its kubelet double, kubelet.py).
NO_KUBELET = "preflight.enabled=false"
TEST_ENV = {"SPECDEPLOY_LEASE_DURATION_S": "6", "HF_HUB_OFFLINE": "1", "SPECDEPLOY_BACKOFF_SCALE": "0.05"}


@cache
def _helm() -> Path:
    spec = importlib.util.spec_from_file_location("binaries", ROOT / "hack" / "cluster" / "binaries.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return Path(module.helm())


def render(*sets: str) -> list[dict[str, Any]]:
    """`helm template` of the chart with `--set` values, as objects."""
    args = [str(_helm()), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def self_signed(directory: Path) -> Path:
    """tls.crt + tls.key for localhost, as cert-manager writes them into the Secret's volume."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")], check=True, capture_output=True)
    return directory


@dataclass
class ChartPod:
    """One replica of the chart's Deployment, run as a local process."""

    name: str
    container: dict[str, Any]
    kubeconfig: Path
    tls_dir: Path | None = None
    log_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # preset entries are kept, the rest moved to free ports
    namespace: str = NAMESPACE
    test_env: dict[str, str] = field(default_factory=lambda: dict(TEST_ENV))
    proc: operator_process.OperatorProcess | None = None

    def start(self) -> "ChartPod":
        self.ports = {p["name"]: self.ports.get(p["name"]) or free_port() for p in self.container.get("ports", [])}
        args = [self._moved(a) for a in self.container["args"]]
        log = self.log_dir / f"{self.name}.log" if self.log_dir else None
        self.proc = operator_process.start(["run", *args], env=self._env(), log=log)
        return self

    def _moved(self, arg: str) -> str:
        declared = {p["name"]: p["containerPort"] for p in self.container.get("ports", [])}
        for name, port in declared.items():
            arg = arg.replace(f":{port}/", f":{self.ports[name]}/")
        return arg

    def _env(self) -> dict[str, str]:
        declared = {p["containerPort"]: p["name"] for p in self.container.get("ports", [])}
        fields = {"metadata.name": self.name, "metadata.namespace": self.namespace}
        out = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEPLOY_")}
        out.update(PYTHONPATH=str(ROOT / "operator"), KUBECONFIG=str(self.kubeconfig), **self.test_env)
        for item in self.container.get("env", []):
            if "value" in item:
                value = str(item["value"])
                out[item["name"]] = str(self.ports[declared[int(value)]]) if value.isdigit() and int(value) in declared else value
            elif "fieldRef" in item.get("valueFrom", {}):
                out[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        if self.tls_dir is not None and "SPECDEPLOY_WEBHOOK_CERT_DIR" in out:
            out["SPECDEPLOY_WEBHOOK_CERT_DIR"] = str(self.tls_dir)
        out.update(self.extra_env)
        return out

    def probe(self, which: str) -> int:
        """The kubelet's httpGet probe (livenessProbe or readinessProbe): the HTTP status, 0
        when the connection is refused or times out."""
        spec = self.container[which]["httpGet"]
        timeout = self.container[which].get("timeoutSeconds", 1)
        return http_get(self.ports[spec["port"]], spec["path"], timeout=timeout)

    async def probed(self, which: str) -> int:
        """`probe` off the event loop: the emulator serves from that loop, and a probe that
        waits on a busy process must not stall the API server the operators renew against."""
        return await asyncio.to_thread(self.probe, which)

    async def until_probe(self, which: str, status: int = 200) -> None:
        """Probe until it answers `status`; AssertionError after HANG_GUARD_S (a hang)."""
        def answered() -> bool | int:
            last = self.probe(which)
            return True if last == status else last

        await until_off_loop(answered, f"{self.name}: {which} answering {status}")

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(HANG_GUARD_S)


async def until_off_loop(check: Callable[[], Any], what: str) -> None:
    """Wait until a blocking `check` (a probe, a handshake) returns True, calling it in a thread:
    the emulator serves from this loop. AssertionError after HANG_GUARD_S (a hang, not a verdict);
    a value other than True is the last answer, shown then."""
    deadline = time.monotonic() + HANG_GUARD_S
    while (last := await asyncio.to_thread(check)) is not True:
        assert time.monotonic() < deadline, f"timed out waiting for {what}: last={last!r}"
        await asyncio.sleep(0.1)


def http_get(port: int, path: str, *, timeout: float = 5) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def client_context(tls_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls_dir / "tls.crt"))


def deployment_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def lease_holder(cluster: Any) -> str:
    """holderIdentity of the operator's Lease on the emulator ("" when none or released)."""
    try:
        return (cluster.get("coordination.k8s.io/v1/leases", "specdeploy-operator").get("spec") or {}).get("holderIdentity") or ""
    except KeyError:
        return ""
