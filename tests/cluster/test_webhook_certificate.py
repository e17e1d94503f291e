"""The webhook certificate the operator keeps, on the real API server: a foreign certificate put
in its Secret is replaced and never trusted; a deleted Secret comes back, with the webhook
configuration's caBundle matching it, and the API server calls the webhook again."""

from __future__ import annotations

import base64
import datetime as dt

from kubernetes import client

from specdeploy.controller.admission.certificates import Placement, issue

from .bed import NAMESPACE, RELEASE, Cluster, until
from .test_lifecycle import llama

SECRET = f"{RELEASE}-specdeploy-webhook-tls"


def secret_data(cluster: Cluster) -> dict[str, str] | None:
    try:
        return client.CoreV1Api(cluster.api).read_namespaced_secret(SECRET, NAMESPACE).data
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def ca_bundle(cluster: Cluster) -> str:
    configuration = client.AdmissionregistrationV1Api(cluster.api).read_validating_webhook_configuration(f"{RELEASE}-specdeploy")
    return configuration.webhooks[0].client_config.ca_bundle


def trusted_and_ours(cluster: Cluster) -> bool:
    data = secret_data(cluster) or {}
    return bool(data.get("ca.key")) and data.get("ca.crt") == ca_bundle(cluster)


def webhook_answers(cluster: Cluster) -> bool:
    """The API server calls the webhook with the certificate now served: a bad pair is refused by it."""
    bad = llama("cert-probe")
    bad["spec"]["parallelism"] = {"tensorParallelSize": 3}
    refused = cluster.apply(bad, "--dry-run=server", check=False)
    return "denied the request" in refused.stderr


def test_a_foreign_certificate_in_the_secret_is_replaced_and_never_trusted(cluster: Cluster) -> None:
    until(lambda: trusted_and_ours(cluster), "the operator's certificate in place")
    names = Placement(NAMESPACE, SECRET, f"{RELEASE}-specdeploy-webhook", "", url="https://127.0.0.1:1").dns_names
    foreign = issue(names, dt.datetime.now(dt.timezone.utc)).secret_data()
    del foreign["ca.key"]  # a valid pair for the right names, from a CA that is not the operator's
    client.CoreV1Api(cluster.api).replace_namespaced_secret(SECRET, NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET), type="kubernetes.io/tls", data=foreign))
    until(lambda: (secret_data(cluster) or {}).get("ca.crt") not in (None, foreign["ca.crt"]) and trusted_and_ours(cluster),
          "the foreign certificate replaced")
    assert ca_bundle(cluster) != foreign["ca.crt"]
    until(lambda: webhook_answers(cluster), "the webhook to answer with the new certificate")


def test_a_deleted_secret_is_back_with_the_ca_bundle_matching(cluster: Cluster) -> None:
    before = (secret_data(cluster) or {}).get("ca.crt")
    client.CoreV1Api(cluster.api).delete_namespaced_secret(SECRET, NAMESPACE)
    until(lambda: secret_data(cluster) is not None and trusted_and_ours(cluster), "the Secret back")
    assert secret_data(cluster)["ca.crt"] != before
    assert base64.b64decode(ca_bundle(cluster)).startswith(b"-----BEGIN CERTIFICATE-----")
    until(lambda: webhook_answers(cluster), "the webhook to answer with the new certificate")
