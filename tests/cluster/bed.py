"""The cluster test bed (tests/cluster and bench/bench_cluster.py): a real control plane on loopback (hack/cluster/controlplane.py), the chart
installed by `helm install` as the README tells users, and the operator run as the chart's
Deployment runs it, as processes holding a token of the chart's own ServiceAccount, so the
chart's RBAC is what every request of the operator is judged by.

What differs from a cluster, and why (docs/testing.md says it for users):
- The operator's pods are processes on this machine (no container runtime here); the kubelet's
  part for them, the webhook Secret's volume, is `SecretVolume`. kwok shows the Deployment's
  own pods as Running on the CPU node; nothing dials them.
- The API server reaches the webhook by the URL the chart's `webhook.url` renders (loopback),
  not through the Service's ClusterIP, which is not routable here.
- GPU nodes are kwok's: pods on them are made Ready by kwok's stages; nothing runs in them. The
  preflight's pods run for real (node_agent.py), with the vLLM venv standing for vLLM's image.

Every wait is on state the API server reports; HANG_GUARD_S only turns a hang into a failure.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack" / "cluster"))

from controlplane import ControlPlane, free_port  # noqa: E402
from integration.chart_process import ChartPod  # noqa: E402
from integration.conftest import HANG_GUARD_S  # noqa: E402

from .node_agent import NodeAgent  # noqa: E402

RELEASE, NAMESPACE = "sd", "specdeploy-system"
SERVICE_ACCOUNT = f"{RELEASE}-specdeploy"
WORKLOAD_NS = "team-a"
CHART = ROOT / "charts" / "specdeploy"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
# The release the e2e suite serves with: the one image the node agent can stand in for.
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"


def until(check: Callable[[], Any], what: str, guard_s: float = HANG_GUARD_S) -> Any:
    """Poll `check` until it returns something truthy; AssertionError after the hang guard."""
    deadline = time.monotonic() + guard_s
    while True:
        last = check()
        if last:
            return last
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@dataclass
class Cluster:
    plane: ControlPlane
    api: client.ApiClient
    helm: Path
    kubectl: Path
    operators: list[ChartPod] = field(default_factory=list)
    agent: NodeAgent | None = None
    volume: SecretVolume | None = None

    def run(self, *args: str, tool: Path | None = None, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        """kubectl (or `tool`) against the cluster with the admin kubeconfig."""
        return subprocess.run([str(tool or self.kubectl), "--kubeconfig", str(self.plane.kubeconfig_path), *args],
                              capture_output=True, text=True, input=stdin, check=check, timeout=300)

    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def sd(self, name: str, namespace: str = WORKLOAD_NS) -> dict[str, Any] | None:
        try:
            return self.custom().get_namespaced_custom_object("specdeploy.io", "v1alpha1", namespace, "speculativedeployments", name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def condition(self, name: str, kind: str, namespace: str = WORKLOAD_NS) -> dict[str, Any]:
        body = self.sd(name, namespace) or {}
        return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})

    def apply(self, doc: dict[str, Any], *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("apply", "--server-side", "-f", "-", *extra, stdin=json.dumps(doc), check=check)


class SecretVolume:
    """The kubelet's Secret volume for the operator processes: the webhook Secret's tls.crt and
    tls.key written into each replica's directory whenever the Secret changes."""

    def __init__(self, core: client.CoreV1Api, namespace: str, name: str, directories: list[Path]) -> None:
        self.core, self.namespace, self.name, self.directories = core, namespace, name, directories
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="secret-volume").start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(self.core.list_namespaced_secret, self.namespace,
                                                  field_selector=f"metadata.name={self.name}", timeout_seconds=5):
                    self._project((event["object"].data or {}) if event["type"] != "DELETED" else {})
            except client.ApiException:
                time.sleep(0.5)

    def _project(self, data: dict[str, str]) -> None:
        for directory in self.directories:
            directory.mkdir(parents=True, exist_ok=True)
            for key in ("tls.crt", "tls.key"):
                if key in data:
                    (directory / f".{key}").write_bytes(base64.b64decode(data[key]))
                    (directory / f".{key}").replace(directory / key)

    def stop(self) -> None:
        self._stop.set()


def token_kubeconfig(cluster: Cluster, path: Path) -> Path:
    """A kubeconfig holding a token of the chart's ServiceAccount (as a pod's projected token)."""
    token = cluster.run("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=4h").stdout.strip()
    admin = yaml.safe_load(cluster.plane.kubeconfig_path.read_text())
    admin["users"] = [{"name": "user", "user": {"token": token}}]
    path.write_text(json.dumps(admin))
    path.chmod(0o600)
    return path


def install(plane: ControlPlane, scratch: Path, *, sets: tuple[str, ...] = (), replicas: int = 2, webhook: bool = True) -> Cluster:
    """`helm install` of the chart (the webhook on, reached by URL) and its Deployment's replicas
    run as processes under the chart's ServiceAccount, each Ready; the node agent up."""
    api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
    made = Cluster(plane, api, plane.bin_dir / "helm", plane.bin_dir / "kubectl")
    port = free_port()
    made.run("create", "namespace", WORKLOAD_NS)
    hooks = ("--set", "webhook.enabled=true", "--set", f"webhook.port={port}", "--set", f"webhook.url=https://127.0.0.1:{port}",
             "--set", "webhook.failurePolicy=Fail") if webhook else ()
    values = [arg for value in sets for arg in ("--set", value)]
    made.run("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *hooks, *values, tool=made.helm)
    kubeconfig = token_kubeconfig(made, scratch / "operator.kubeconfig")
    deployment = client.AppsV1Api(api).read_namespaced_deployment(f"{RELEASE}-specdeploy", NAMESPACE)
    container = api.sanitize_for_serialization(deployment.spec.template.spec.containers[0])
    names = [f"{RELEASE}-specdeploy-{i}" for i in range(replicas)]
    tls = [scratch / name / "tls" for name in names]
    made.volume = SecretVolume(client.CoreV1Api(api), NAMESPACE, f"{RELEASE}-specdeploy-webhook-tls", tls)
    for index, name in enumerate(names):
        pod = ChartPod(name, container, kubeconfig, tls_dir=tls[index], log_dir=scratch, namespace=NAMESPACE,
                       test_env={"HF_HUB_OFFLINE": "1"}, ports={"webhook": port} if index == 0 and webhook else {})
        made.operators.append(pod.start())
    # Ready once its webhook serves the leader's certificate (the chart's readinessProbe).
    until(lambda: all(pod.probe("readinessProbe") == 200 for pod in made.operators), "the operators' readiness")
    images = {VLLM_IMAGE: str(VLLM_PYTHON)} if VLLM_PYTHON.exists() else {}
    made.agent = NodeAgent(api, images, scratch / "node-agent").start()
    return made


def uninstall(made: Cluster) -> None:
    if made.agent is not None:
        made.agent.stop()
    if made.volume is not None:
        made.volume.stop()
    for pod in made.operators:
        pod.kill()
