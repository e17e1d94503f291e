"""The webhook's certificate when the operator keeps it (the chart without cert-manager).

Nothing is generated at render time, so `helm template` gives the same output every run and a
GitOps tool sees no drift. At run time the leader keeps a CA and a serving certificate for the
webhook Service's DNS names in a Secret (which every replica mounts: the webhook server reloads
it from disk, controller/admission/webhook.py) and the CA in the ValidatingWebhookConfiguration's
caBundle (the chart renders it without one; helm's three-way merge leaves the live value alone).
It issues a new pair when there is none, when it expires within RENEW_BEFORE, or when the
Service's names changed. Only the leader writes: the writes go through the fenced client.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import ipaddress
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError

SECRET_ENV = "SPECDEPLOY_WEBHOOK_SECRET"  # set by the chart when the operator keeps the certificate
SERVICE_ENV = "SPECDEPLOY_WEBHOOK_SERVICE"
URL_ENV = "SPECDEPLOY_WEBHOOK_URL"  # chart value webhook.url: an operator outside the cluster
CONFIGURATION_ENV = "SPECDEPLOY_WEBHOOK_CONFIGURATION"
VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
CHECK_EVERY_S = 3600.0
RETRY_S = 5.0

logger = logging.getLogger("specdeploy.certificates")


@dataclass(frozen=True)
class Placement:
    """Where the certificate lives: the Secret and the Service in `namespace`, and the
    cluster-scoped ValidatingWebhookConfiguration."""

    namespace: str
    secret: str
    service: str
    configuration: str
    url: str = ""  # the URL the API server calls instead of the Service (webhook.url), if any

    @classmethod
    def from_env(cls) -> "Placement | None":
        secret = os.environ.get(SECRET_ENV)
        if not secret:
            return None
        return cls(os.environ.get("POD_NAMESPACE") or "default", secret, os.environ[SERVICE_ENV], os.environ[CONFIGURATION_ENV],
                   os.environ.get(URL_ENV, "").rstrip("/"))

    @property
    def dns_names(self) -> list[str]:
        """The names the certificate must carry: the Service's, and the URL's host (a DNS name
        or an IP address)."""
        names = [self.service, f"{self.service}.{self.namespace}", f"{self.service}.{self.namespace}.svc"]
        host = urllib.parse.urlsplit(self.url).hostname if self.url else None
        return names + ([host] if host and host not in names else [])

    def calls_us(self, webhook: dict[str, Any]) -> bool:
        """A webhook of the configuration that reaches this operator: by Service, or by URL."""
        client = webhook.get("clientConfig") or {}
        if self.url:
            return str(client.get("url") or "").startswith(self.url + "/")
        return (client.get("service") or {}).get("name") == self.service


@dataclass(frozen=True)
class TlsBundle:
    ca_crt: bytes
    tls_crt: bytes
    tls_key: bytes
    # The CA's own key: the operator trusts only a CA whose key it holds, so a certificate put in
    # the Secret by anyone else (with a CA of theirs beside it) is replaced, never trusted.
    ca_key: bytes

    def secret_data(self) -> dict[str, str]:
        return {k: base64.b64encode(getattr(self, k.replace(".", "_"))).decode() for k in SECRET_KEYS}

    @classmethod
    def from_secret(cls, secret: dict[str, Any] | None) -> "TlsBundle | None":
        data = (secret or {}).get("data") or {}
        try:
            return cls(*(base64.b64decode(data[k], validate=True) for k in SECRET_KEYS))
        except (KeyError, TypeError, ValueError):
            return None


SECRET_KEYS = ("ca.crt", "tls.crt", "tls.key", "ca.key")


def issue(dns_names: list[str], now: dt.datetime) -> TlsBundle:
    """A new CA and a certificate it signs for `dns_names` (ECDSA P-256), valid VALIDITY."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def builder(subject: str, key: Any, issuer: str) -> Any:
        return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + VALIDITY))

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = f"{dns_names[0]}-ca"
    ca = (builder(ca_name, ca_key, ca_name).add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (builder(dns_names[-1], key, ca_name)
            .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in dns_names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    def private(k: Any) -> bytes:
        return k.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    return TlsBundle(ca.public_bytes(pem), cert.public_bytes(pem), private(key), private(ca_key))


def _general_name(name: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def still_good(bundle: TlsBundle, dns_names: list[str], now: dt.datetime) -> bool:
    """Ours (signed by a CA whose key the Secret holds), with its own key, for these names, and
    valid beyond RENEW_BEFORE from now."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    try:
        ca, cert = x509.load_pem_x509_certificate(bundle.ca_crt), x509.load_pem_x509_certificate(bundle.tls_crt)
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key(bundle.tls_key, password=None)
        ca_key = serialization.load_pem_private_key(bundle.ca_key, password=None)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = sans.get_values_for_type(x509.DNSName) + [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    return (key.public_key() == cert.public_key() and ca_key.public_key() == ca.public_key()
            and sorted(names) == sorted(dns_names)
            and cert.not_valid_after_utc - now > RENEW_BEFORE)


async def ensure(kube: Kube, where: Placement, now: dt.datetime) -> TlsBundle:
    """The Secret holds a good pair and the webhook configuration trusts its CA, after this."""
    secret = await kube.get("Secret", where.namespace, where.secret)
    bundle = TlsBundle.from_secret(secret)
    if bundle is None or not still_good(bundle, where.dns_names, now):
        bundle = issue(where.dns_names, now)
        if secret is None:
            await kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                               "metadata": {"name": where.secret, "namespace": where.namespace}, "data": bundle.secret_data()})
        else:
            await kube.merge_patch("Secret", where.namespace, where.secret, {"data": bundle.secret_data()})
        logger.info("Issued the webhook certificate in Secret %s/%s (valid until %s)", where.namespace, where.secret,
                    (now + VALIDITY).date())
    await _trust(kube, where, bundle.ca_crt)
    return bundle


async def _trust(kube: Kube, where: Placement, ca_crt: bytes) -> None:
    """caBundle = our CA on each webhook that calls us (a merge patch replaces the
    list whole, so it carries the resourceVersion read)."""
    configuration = await kube.get("ValidatingWebhookConfiguration", "", where.configuration)
    if configuration is None:
        raise KubeTemporaryError(f"ValidatingWebhookConfiguration {where.configuration} not found (yet)")
    ca = base64.b64encode(ca_crt).decode()
    webhooks = configuration.get("webhooks") or []
    ours = [w for w in webhooks if where.calls_us(w)]
    if all(w["clientConfig"].get("caBundle") == ca for w in ours):
        return
    for webhook in ours:
        webhook["clientConfig"]["caBundle"] = ca
    patch = {"metadata": {"resourceVersion": configuration["metadata"].get("resourceVersion")}, "webhooks": webhooks}
    await kube.merge_patch("ValidatingWebhookConfiguration", "", where.configuration, patch)
    logger.info("Set the caBundle of ValidatingWebhookConfiguration %s", where.configuration)


async def keep(kube: Kube, where: Placement) -> None:
    """`ensure` now, then again on every change of the Secret (a watch on it alone: deleted,
    edited or replaced, it is put back within moments) and at least every CHECK_EVERY_S, when
    the watch ends (renewal); RETRY_S after a failure. Until cancelled."""
    while True:
        try:
            await ensure(kube, where, dt.datetime.now(dt.timezone.utc))
            async for event in kube.watch_object("Secret", where.namespace, where.secret, timeout_s=CHECK_EVERY_S):
                if event != "BOOKMARK":
                    await ensure(kube, where, dt.datetime.now(dt.timezone.utc))
        except (KubeTemporaryError, KubePermanentError) as exc:
            logger.warning("Could not keep the webhook certificate: %s", exc)
            await asyncio.sleep(RETRY_S)
