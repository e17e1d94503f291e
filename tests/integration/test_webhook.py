"""The validating webhook as the API server calls it: real AdmissionReview requests over HTTPS
to kopf's webhook server in the running operator (kmock's emulator does not call webhooks, so
the test plays the API server's part). Certificates come from openssl, as cert-manager's would."""

from __future__ import annotations

import copy
import json
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from specdeploy.controller.admission import webhook
from tests.integration.conftest import NS, WRITES, Operator, example, with_identity

pytestmark = pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0, reason="needs openssl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")], check=True, capture_output=True)
    return tmp_path


@pytest.fixture
async def webhook_url(emulator: Any, tls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    port = _free_port()
    monkeypatch.setenv(webhook.PORT_ENV, str(port))
    monkeypatch.setenv(webhook.CERT_DIR_ENV, str(tls_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tls_dir / "hf"))  # an empty cache: no Hub config is at hand
    op = Operator(emulator)
    await op.start()
    yield f"https://localhost:{port}/{webhook.HANDLER_ID}"
    await op.stop()


async def review(url: str, tls_dir: Path, obj: dict[str, Any], operation: str = "CREATE") -> tuple[dict[str, Any], float]:
    """POST an AdmissionReview as kube-apiserver does, verifying the server's certificate."""
    context = ssl.create_default_context(cafile=str(tls_dir / "tls.crt"))
    request = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
        "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
        "requestKind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
        "name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", NS), "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": obj, "oldObject": obj if operation == "UPDATE" else None, "dryRun": False, "options": None}}
    async with aiohttp.ClientSession() as session:
        for _ in range(100):  # the server starts once kopf has scanned the resources
            try:
                start = time.perf_counter()
                async with session.post(url, json=request, ssl=context) as response:
                    body = await response.json()
                    elapsed = time.perf_counter() - start
                    assert response.status == 200, body
                    assert body["response"]["uid"] == request["request"]["uid"]
                    return body["response"], elapsed
            except aiohttp.ClientConnectorError:
                await __import__("asyncio").sleep(0.1)
    raise AssertionError("the webhook server never listened")


async def test_admission_over_https(webhook_url: str, tls_dir: Path) -> None:
    valid = with_identity(example("qwen3-8b-ngram.yaml"), "uid-1")
    response, _ = await review(webhook_url, tls_dir, valid)  # the first also waits for start-up
    assert response["allowed"] is True

    response, elapsed = await review(webhook_url, tls_dir, valid, operation="UPDATE")
    assert response["allowed"] is True and elapsed < 1.0

    invalid = copy.deepcopy(valid)
    invalid["spec"]["parallelism"] = {"tensorParallelSize": 5}
    response, elapsed = await review(webhook_url, tls_dir, invalid)
    assert response["allowed"] is False and elapsed < 1.0
    message = response["status"]["message"]
    assert "spec.parallelism.tensorParallelSize" in message and "allowed: 1, 2, 4, 8" in message, message
    assert response["status"]["code"] == 422

    unparsable = copy.deepcopy(valid)
    unparsable["spec"]["replicas"] = "2"
    response, _ = await review(webhook_url, tls_dir, unparsable)
    assert response["allowed"] is False and "spec.replicas" in response["status"]["message"]

    hub_only = copy.deepcopy(valid)
    del hub_only["spec"]["target"]["config"]  # Qwen/Qwen3-8B from the Hub: not in the (empty) cache
    response, elapsed = await review(webhook_url, tls_dir, hub_only)
    assert response["allowed"] is True and elapsed < 1.0
    assert any("not judged at admission" in w and "spec.target.model" in w for w in response.get("warnings", [])), response

    missing_configmap = with_identity(example("llama-3.1-70b-eagle3.yaml"), "uid-2")
    response, _ = await review(webhook_url, tls_dir, missing_configmap)
    assert response["allowed"] is True and response["warnings"] == [NOT_READ.format(field="spec.draft.configMapRef")]


def test_verdict_refuses_a_bad_name_on_create_only() -> None:
    obj = example("qwen3-8b-ngram.yaml")
    obj["metadata"]["name"] = "Bad_Name"  # not a DNS-1123 subdomain
    assert not webhook.admission_verdict(obj).allowed
    assert webhook.admission_verdict(obj, check_name=False).allowed
    assert json.dumps(obj)  # the example stays JSON


# The local-path forms the reconcile refuses (tests/fuzz/broad.py SPEC_SPECIAL): the webhook
# refuses them too, on their form alone.
PATH_FORMS = ["{tmp}/config.json", "{tmp}", "/nonexistent/config.json", "~root/x.json", "../../../../etc/shadow",
              "org/name/extra", "C:\\x", "file:///etc/passwd", "..", "/proc/self/environ"]


def _with_model(model: str) -> dict[str, Any]:
    obj = with_identity(example("qwen3-8b-ngram.yaml"), "uid-path")
    del obj["spec"]["target"]["config"]
    obj["spec"]["target"]["model"] = model
    return obj


def test_a_model_path_is_refused_on_its_form_and_nothing_is_read(tmp_path: Path) -> None:
    import sys

    secret = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 7919, "hidden_size": 104729}
    (tmp_path / "config.json").write_text(json.dumps(secret))
    opened: list[str] = []
    watching = [True]

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if watching[0] and event in ("open", "os.listdir", "os.scandir") and args and str(tmp_path) in str(args[0]):
            opened.append(f"{event} {args[0]}")

    sys.addaudithook(audit)
    try:
        verdicts = {form: webhook.admission_verdict(_with_model(form.format(tmp=tmp_path))) for form in PATH_FORMS}
    finally:
        watching[0] = False
    assert opened == []  # nothing under the path was opened or listed
    for form, verdict in verdicts.items():
        model = form.format(tmp=tmp_path)
        assert not verdict.allowed, form
        # The same words whether the path exists or not, and none of the file's values.
        assert verdict.message == f"spec.target.model: {model!r} is a path: the operator reads no local files; " \
            "give the config inline (config) or in a ConfigMap (configMapRef)", verdict.message
        assert "7919" not in verdict.message and "104729" not in verdict.message


MALFORMED: list[tuple[str, Any]] = [
    ("not JSON", b"{not json"),
    ("not UTF-8", b"\xff\xfe{}"),
    ("a list", []),
    ("no request", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    ("request a string", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}),
    ("wrong kind", {"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {}}),
    ("uid a number", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": 5, "operation": "CREATE", "object": {}}}),
    ("operation DELETE", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u", "operation": "DELETE", "object": {}}}),
    ("object a list", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "operation": "CREATE", "object": []}}),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000),
]


async def test_malformed_reviews_get_400_naming_what_is_wrong(webhook_url: str, tls_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.INFO)
    await review(webhook_url, tls_dir, with_identity(example("qwen3-8b-ngram.yaml"), "uid-1"))  # waits for start-up
    context = ssl.create_default_context(cafile=str(tls_dir / "tls.crt"))
    async with aiohttp.ClientSession() as session:
        for what, body in MALFORMED:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            async with session.post(webhook_url, data=data, ssl=context, headers={"Content-Type": "application/json"}) as response:
                text = await response.text()
                assert response.status == 400, (what, response.status, text)
                assert text.startswith("not an AdmissionReview"), (what, text)
        # Over what the API server can send (2 x its 3 MiB request limit + 1 MiB): 413, unread.
        too_large = b" " * (webhook.MAX_REVIEW_BYTES + 1)
        async with session.post(webhook_url, data=too_large, ssl=context, headers={"Content-Type": "application/json"}) as response:
            assert response.status == 413
        async with session.get(webhook_url, ssl=context) as response:  # the API server only POSTs
            assert response.status == 405
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_large_update_is_judged_and_a_refusal_is_logged_at_info(webhook_url: str, tls_dir: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """0.9 MiB of CR in an UPDATE review (object and oldObject: 1.8 MiB) is judged, not 413:
    under failurePolicy Fail a 413 would block every update of such a CR."""
    import logging

    caplog.set_level(logging.INFO)
    large = with_identity(example("qwen3-8b-ngram.yaml"), "uid-large")
    large["spec"]["target"]["config"]["padding"] = ["x" * 1000] * 930  # an inline config key vLLM ignores
    assert len(json.dumps(large)) > 900 * 1024
    response, _ = await review(webhook_url, tls_dir, large, operation="UPDATE")
    assert response["allowed"] is True
    large["spec"]["parallelism"] = {"tensorParallelSize": 5}
    response, _ = await review(webhook_url, tls_dir, large, operation="UPDATE")
    assert response["allowed"] is False and "spec.parallelism.tensorParallelSize" in response["status"]["message"]
    refusals = [r for r in caplog.records if r.name == "specdeploy.webhook"]
    assert len(refusals) == 1 and refusals[0].levelno == logging.INFO and "Refused UPDATE" in refusals[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


NOT_READ = "not judged at admission: {field}: a ConfigMap is not read at admission; the operator judges it in status"
ELSEWHERE = "kube-system"  # a namespace whose objects the review's sender need not be able to read


def _config_map_reads(emulator: Any, since: int) -> list[str]:
    """Every request for ConfigMaps the emulator has seen since `since`, but the test's own writes."""
    return [f"{r.method} {r.url}" for r in list(emulator)[since:]
            if r.resource == kmock.resource("v1/configmaps") and str(r.method).upper().split(".")[-1] not in WRITES]


async def test_a_configmap_elsewhere_is_never_read_and_changes_no_answer(webhook_url: str, tls_dir: Path, emulator: Any) -> None:
    """A review POSTed straight to the port (no API server, so no check that its sender may read
    kube-system) naming a ConfigMap there: no ConfigMap is read, and the answer is the same
    whether the ConfigMap is missing, holds a config, or holds text that is not JSON."""
    await review(webhook_url, tls_dir, with_identity(example("qwen3-8b-ngram.yaml"), "uid-start"))  # waits for start-up
    obj = with_identity(example("llama-3.1-70b-eagle3.yaml"), "uid-elsewhere")
    obj["metadata"]["namespace"] = ELSEWHERE
    obj["spec"]["target"] = {"model": "meta-llama/Llama-3.3-70B-Instruct", "configMapRef": {"name": "probe", "key": "config.json"}}
    obj["spec"]["draft"]["configMapRef"] = {"name": "probe", "key": "config.json"}
    path = f"/api/v1/namespaces/{ELSEWHERE}/configmaps"
    config = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 77, "hidden_size": 7777}
    since = len(list(emulator))
    answers = [(await review(webhook_url, tls_dir, obj))[0]]
    created = await emulator.post(path, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ELSEWHERE},
                                              "data": {"config.json": json.dumps(config)}})
    assert created.status in (200, 201), await created.text()
    answers.append((await review(webhook_url, tls_dir, obj))[0])
    patched = await emulator.patch(f"{path}/probe", json={"data": {"config.json": "{not json"}})
    assert patched.status == 200, await patched.text()
    answers.append((await review(webhook_url, tls_dir, obj))[0])
    assert _config_map_reads(emulator, since) == []
    for answer in answers:
        assert answer.pop("uid")
    assert answers[0] == answers[1] == answers[2] == {"allowed": True, "warnings": [NOT_READ.format(field="spec.target.configMapRef")]}
    assert "77" not in json.dumps(answers)
