#!/usr/bin/env python3
"""A real Kubernetes control plane on loopback, for the cluster suite and `make cluster-up`.

etcd, kube-apiserver (real TLS, RBAC, admission webhooks, an audit log), kube-controller-manager,
kube-scheduler and kwok run as processes on 127.0.0.1, from the binaries hack/cluster/build.sh
builds out of the Go module proxy. kwok simulates a mixed GPU pool, each node labelled as
NVIDIA's GPU Feature Discovery or AMD's node labeller would label it, and tainted as GPU pools
usually are, so that only pods asking for a GPU land there (the API server's
ExtendedResourceToleration plugin adds the toleration). One CPU node takes everything else.

Nothing dials outside 127.0.0.0/8: kwok's pod IPs and node IP are moved into loopback, and the
Service range is only allocated from, never dialled (webhooks are reached by URL).

    python hack/cluster/controlplane.py up [--dir .cluster]    # writes .cluster/kubeconfig
    python hack/cluster/controlplane.py down [--dir .cluster]  # stops its own processes, by PID
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from binaries import build

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVICE_RANGE = "10.96.0.0/16"  # allocated from, never dialled
POD_RANGE = "127.64.0.0/16"  # kwok's pod IPs (its default, 10.0.0.0/24, is not loopback)
NODE_IP = "127.0.0.1"
KWOK_NODE_LABEL = ("type", "kwok")
# Each kwok stage the pool needs, from the kwok module's own kustomize/stage tree.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
# Pods kwok leaves alone: the preflight's, which a node agent really runs (tests/cluster/node_agent.py).
KWOK_SKIPS_LABEL = "app.kubernetes.io/component"
KWOK_SKIPS_VALUE = "preflight"
START_TIMEOUT_S = 180  # a start-up bound on a process, not a verdict: a busy machine is slow


@dataclass(frozen=True)
class NodeShape:
    """A kind of node in the simulated pool: its count, GPU resource and labeller labels."""

    prefix: str
    count: int
    gpus: int = 0
    resource: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    pods: int = 110  # the kubelet's default max-pods


def gfd_labels(product: str, memory_mib: int, family: str, count: int = 8) -> dict[str, str]:
    """What NVIDIA's GPU Feature Discovery puts on a node."""
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.family": family, "nvidia.com/gpu.count": str(count), "nvidia.com/cuda.driver.major": "570"}


def amd_labels(product: str, vram: str, device_id: str, count: int = 8) -> dict[str, str]:
    """What AMD's node labeller puts on a node."""
    return {"amd.com/gpu.product-name": product, "amd.com/gpu.vram": vram, "amd.com/gpu.device-id": device_id,
            "amd.com/gpu.family": "AI", "amd.com/gpu.count": str(count)}


def default_pool(h100: int = 2, cpu: int = 1) -> list[NodeShape]:
    """The mixed pool the suite schedules onto (H100 and CPU node counts adjustable for the
    scale bench)."""
    return [
        NodeShape("h100", h100, 8, "nvidia.com/gpu", gfd_labels("NVIDIA-H100-80GB-HBM3", 81559, "hopper")),
        NodeShape("h200", 2, 8, "nvidia.com/gpu", gfd_labels("NVIDIA-H200", 143771, "hopper")),
        NodeShape("a100-40", 1, 8, "nvidia.com/gpu", gfd_labels("NVIDIA-A100-SXM4-40GB", 40960, "ampere")),
        NodeShape("mi300x", 1, 8, "amd.com/gpu", amd_labels("AMD_Instinct_MI300X_OAM", "192G", "74a1")),
        NodeShape("cpu", cpu),
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- PKI -----------------------------------------------------------------------------------------

def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


@dataclass
class Authority:
    """The cluster's CA; signs serving and client certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name("specdeploy-test-ca")).issuer_name(_name("specdeploy-test-ca"))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=7))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def issue(self, common: str, *, org: str | None = None, hosts: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """(cert PEM, key PEM) for a client (no hosts) or a server (hosts: DNS names and IPs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(common, org)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=7))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if hosts:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if hosts else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def ca_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def kubeconfig(server: str, ca_pem: bytes, user: dict[str, str]) -> str:
    """A kubeconfig for one user (client-certificate-data/-key-data, or token)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
    }, indent=1)


def cert_user(cert: bytes, key: bytes) -> dict[str, str]:
    return {"client-certificate-data": base64.b64encode(cert).decode(), "client-key-data": base64.b64encode(key).decode()}


# --- processes -----------------------------------------------------------------------------------

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


@dataclass
class ControlPlane:
    """The processes, their files under `root`, and how to reach the API server."""

    root: Path
    bin_dir: Path
    pool: list[NodeShape] = field(default_factory=default_pool)

    @property
    def kubeconfig_path(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.log"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    def state(self) -> dict:
        return json.loads(self.state_path.read_text()) if self.state_path.exists() else {"pids": {}}

    def _write(self, name: str, data: bytes | str, mode: int = 0o600) -> Path:
        path = self.root / "pki" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        path.chmod(mode)
        return path

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """Start one binary detached (its own session, so `make` ending does not stop it)."""
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([str(self.bin_dir / args[0]), *args[1:]], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.root,
                                    env={**os.environ, **(env or {})})
        state = self.state()
        state["pids"][name] = proc.pid
        self.state_path.write_text(json.dumps(state, indent=1))

    def _wait(self, what: str, ready) -> None:  # noqa: ANN001 - a predicate
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            for name, pid in self.state()["pids"].items():
                if not _alive(pid):
                    raise RuntimeError(f"{name} exited while waiting for {what}; see {self.root / 'logs' / (name + '.log')}")
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready after {START_TIMEOUT_S} s; logs in {self.root / 'logs'}")

    def up(self) -> None:
        """Start every process and the node pool; write the admin kubeconfig."""
        if self.state()["pids"]:
            raise RuntimeError(f"{self.root} already holds a control plane: run `down` first")
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(json.dumps({"pids": {}, "bin": str(self.bin_dir)}))
        ca = Authority.create()
        etcd_port = self._start_etcd()
        api_port = free_port()
        server = f"https://127.0.0.1:{api_port}"
        self._start_apiserver(ca, etcd_port, api_port)
        admin = kubeconfig(server, ca.ca_pem(), cert_user(*ca.issue("kubernetes-admin", org="system:masters")))
        self.kubeconfig_path.write_text(admin)
        self.kubeconfig_path.chmod(0o600)
        api = Api(server, ca.ca_pem(), *ca.issue("kubernetes-admin", org="system:masters"), self.root / "pki")
        self._wait("kube-apiserver /readyz", lambda: api.ok("/readyz"))
        self._start_controllers(ca, server)
        self._start_kwok(ca, server)
        for node in nodes(self.pool):
            api.create("/api/v1/nodes", node)
        self._wait("the node pool", lambda: api.ready_nodes() >= sum(s.count for s in self.pool))
        self._wait("the default ServiceAccount", lambda: api.ok("/api/v1/namespaces/default/serviceaccounts/default"))
        self._start_lws(ca, api)
        self._install_crds(api, self.bin_dir / "inference-crd")

    def _start_etcd(self) -> int:
        client, peer = free_port(), free_port()
        self._start("etcd", ["etcd", "--name", "default", "--data-dir", str(self.root / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer}", "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
                             "--quota-backend-bytes", str(4 << 30), "--log-level", "warn"])
        self._wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{client}/health"))
        return client

    def _start_apiserver(self, ca: Authority, etcd_port: int, port: int) -> None:
        cert, key = ca.issue("kube-apiserver", hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                                       "kubernetes.default.svc", "10.96.0.1"))
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._write("sa.key", _pem_key(sa_key))
        self._write("sa.pub", sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        self._write("ca.crt", ca.ca_pem(), 0o644)
        self._write("apiserver.crt", cert)
        self._write("apiserver.key", key)
        (self.root / "audit-policy.yaml").write_text(AUDIT_POLICY)
        pki = self.root / "pki"
        self._start("kube-apiserver", [
            "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={port}", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}", "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
            f"--audit-policy-file={self.root / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-maxsize=0", f"--cert-dir={pki}", "--allow-privileged=true",
            "--profiling=false", "--v=1",
        ])

    def _component_kubeconfig(self, ca: Authority, server: str, name: str, user: str, org: str | None = None) -> Path:
        path = self.root / f"{name}.kubeconfig"
        path.write_text(kubeconfig(server, ca.ca_pem(), cert_user(*ca.issue(user, org=org))))
        path.chmod(0o600)
        return path

    def _start_controllers(self, ca: Authority, server: str) -> None:
        pki = self.root / "pki"
        cm = self._component_kubeconfig(ca, server, "controller-manager", "system:kube-controller-manager")
        self._start("kube-controller-manager", [
            "kube-controller-manager", f"--kubeconfig={cm}", f"--authentication-kubeconfig={cm}",
            f"--authorization-kubeconfig={cm}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--root-ca-file={pki / 'ca.crt'}", f"--service-account-private-key-file={pki / 'sa.key'}",
            "--use-service-account-credentials=true", "--controllers=*", "--leader-elect=false",
            f"--service-cluster-ip-range={SERVICE_RANGE}", "--v=1",
        ])
        sched = self._component_kubeconfig(ca, server, "scheduler", "system:kube-scheduler")
        self._start("kube-scheduler", [
            "kube-scheduler", f"--kubeconfig={sched}", f"--authentication-kubeconfig={sched}",
            f"--authorization-kubeconfig={sched}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--leader-elect=false", "--v=1",
        ])

    def _start_kwok(self, ca: Authority, server: str) -> None:
        config = self.root / "kwok.yaml"
        config.write_text(kwok_stages(kwok_stage_dir(self.bin_dir)))
        kwok = self._component_kubeconfig(ca, server, "kwok", "kwok", "system:masters")
        self._start("kwok", [
            "kwok", f"--kubeconfig={kwok}", f"--config={config}", f"--cidr={POD_RANGE}", f"--node-ip={NODE_IP}",
            f"--manage-nodes-with-label-selector={KWOK_NODE_LABEL[0]}={KWOK_NODE_LABEL[1]}",
            # Each node's Lease renewed, as a kubelet does: without it the node lifecycle
            # controller sees no heartbeat within its grace period and marks every pod NotReady.
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{free_port()}",
        ])

    def _install_crds(self, api: Api, directory: Path) -> None:
        """Create every CRD in `directory` and wait until each is established."""
        for crd in sorted(directory.glob("*.yaml")):
            made = api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _yaml(crd.read_text())[0])
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{made['metadata']['name']}"
            self._wait(f"CRD {made['metadata']['name']} established", lambda: api.established(path))

    def _start_lws(self, ca: Authority, api: Api) -> None:
        """The LeaderWorkerSet controller, as its chart runs it but with its certificate ours and
        its webhooks reached by loopback URL (as envtest does): its CRDs, then the process,
        then the webhook configurations once it serves."""
        config_dir = self.bin_dir / "lws-config"
        self._install_crds(api, config_dir / "crd")
        certs = self.root / "lws-certs"
        certs.mkdir(exist_ok=True)
        cert, key = ca.issue("lws-webhook", hosts=("127.0.0.1",))
        (certs / "tls.crt").write_bytes(cert)
        (certs / "tls.key").write_bytes(key)
        port, health = free_port(), free_port()
        (self.root / "lws.yaml").write_text(json.dumps({
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        }))
        lws = self._component_kubeconfig(ca, server=api.server, name="lws", user="lws-controller", org="system:masters")
        self._start("lws-controller", ["lws-controller", f"--config={self.root / 'lws.yaml'}"], env={"KUBECONFIG": str(lws)})
        self._wait("the LWS controller", lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"))
        ca_bundle = base64.b64encode(ca.ca_pem()).decode()
        for configuration in _yaml((config_dir / "webhook" / "manifests.yaml").read_text()):
            for hook in configuration["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            api.create(f"/apis/admissionregistration.k8s.io/v1/{configuration['kind'].lower()}s", configuration)

    def down(self) -> list[str]:
        """Stop the processes this control plane started (SIGTERM, then SIGKILL), by PID."""
        stopped = []
        pids = self.state()["pids"]
        for name, pid in reversed(list(pids.items())):
            if _alive(pid) and _is_ours(pid, self.bin_dir if self.bin_dir.exists() else None):
                os.kill(pid, signal.SIGTERM)
                stopped.append(name)
        for name, pid in pids.items():
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        self.state_path.unlink(missing_ok=True)
        return stopped


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie we do not parent still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _is_ours(pid: int, bin_dir: Path | None) -> bool:
    """The PID still runs one of our binaries (a PID can be reused after a crash)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return bin_dir is None or exe.startswith(str(bin_dir))


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class Api:
    """Just enough of an API client for start-up (the suite uses the kubernetes package)."""

    def __init__(self, server: str, ca_pem: bytes, cert: bytes, key: bytes, scratch: Path) -> None:
        self.server = server
        self.context = ssl.create_default_context(cadata=ca_pem.decode())
        cert_file, key_file = scratch / "startup-client.crt", scratch / "startup-client.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        key_file.chmod(0o600)
        self.context.load_cert_chain(cert_file, key_file)

    def _raw(self, path: str, body: dict | None = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method="POST" if body else "GET",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self.context, timeout=10) as resp:
            return resp.read()

    def _request(self, path: str, body: dict | None = None) -> dict:
        return json.loads(self._raw(path, body) or b"{}")

    def ok(self, path: str) -> bool:
        try:
            self._raw(path)
            return True
        except OSError:
            return False

    def create(self, path: str, body: dict) -> dict:
        return self._request(path, body)

    def established(self, path: str) -> bool:
        try:
            conditions = self._request(path).get("status", {}).get("conditions") or []
        except (OSError, ValueError):
            return False
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def ready_nodes(self) -> int:
        try:
            items = self._request("/api/v1/nodes")["items"]
        except (OSError, ValueError):
            return 0
        return sum(1 for n in items for c in n.get("status", {}).get("conditions", []) if c["type"] == "Ready" and c["status"] == "True")


def nodes(pool: list[NodeShape]) -> list[dict]:
    """Node objects for kwok to manage: capacity, labeller labels and the vendor's taint."""
    made = []
    for shape in pool:
        for index in range(shape.count):
            name = f"{shape.prefix}-{index}"
            capacity = {"cpu": "64", "memory": "512Gi", "pods": str(shape.pods), "ephemeral-storage": "1Ti"}
            if shape.gpus:
                capacity[shape.resource] = str(shape.gpus)
            made.append({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
                             "labels": {KWOK_NODE_LABEL[0]: KWOK_NODE_LABEL[1], "kubernetes.io/hostname": name,
                                        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **shape.labels}},
                "spec": {"taints": [{"key": shape.resource, "value": "present", "effect": "NoSchedule"}] if shape.gpus else []},
                "status": {"capacity": capacity, "allocatable": capacity,
                           "nodeInfo": {"kubeletVersion": "v1.36.3-kwok", "architecture": "amd64", "operatingSystem": "linux"}},
            })
    return made


def _yaml(text: str) -> list[dict]:
    import yaml  # the venv's PyYAML; only cluster-up needs it

    return [d for d in yaml.safe_load_all(text) if d]


def kwok_stage_dir(bin_dir: Path) -> Path:
    return bin_dir / "kwok-stages"


# Pods kwok must not pretend to run: the preflight pods, which the node agent really runs.
PREFLIGHT_POD_LABEL = "specdeploy.io/preflight-job"


def kwok_stages(stage_dir: Path) -> str:
    """kwok's own fast node/pod stages, with the pod stages told to leave preflight pods alone."""
    import yaml  # the venv's PyYAML; only cluster-up needs it

    documents = []
    for relative in KWOK_STAGES:
        for stage in yaml.safe_load_all((stage_dir / relative).read_text()):
            if stage and relative.startswith("pod/") and not relative.endswith("pod-delete.yaml"):
                stage["spec"]["selector"].setdefault("matchExpressions", []).append(
                    {"key": f'.metadata.labels["{PREFLIGHT_POD_LABEL}"]', "operator": "DoesNotExist"})
            if stage:
                documents.append(stage)
    return yaml.safe_dump_all(documents, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster", help="state, logs and kubeconfig (default .cluster)")
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    if args.action == "down":  # the binaries the running plane was started from, as it recorded them
        recorded = ControlPlane(root, Path()).state().get("bin")
        print("stopped:", ", ".join(ControlPlane(root, Path(recorded or "/nonexistent")).down()) or "nothing")
        return 0
    plane = ControlPlane(root, build())
    try:
        plane.up()
    except Exception:
        plane.down()
        raise
    print(f"control plane up: export KUBECONFIG={plane.kubeconfig_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
