"""The webhook's certificate when the operator keeps it (the chart without cert-manager).

Nothing is generated at render time, so `helm template` gives the same output every run and a
GitOps tool sees no drift. At run time the leader keeps a CA and a serving certificate for the
webhook Service's DNS names in a Secret (which every replica mounts: the webhook server reloads
it from disk, controller/webhook.py) and the CA in the ValidatingWebhookConfiguration's
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

from specdeploy.controller.kube import Kube, KubePermanentError, KubeTemporaryError

SECRET_ENV = "SPECDEPLOY_WEBHOOK_SECRET"  # set by the chart when the operator keeps the certificate
SERVICE_ENV = "SPECDEPLOY_WEBHOOK_SERVICE"
URL_ENV = "SPECDEPLOY_WEBHOOK_URL"  # chart value webhook.url: an operator outside the cluster
CONFIGURATION_ENV = "SPECDEPLOY_WEBHOOK_CONFIGURATION"
VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
CHECK_EVERY_S = 3600.0
RETRY_S = 30.0

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

    def secret_data(self) -> dict[str, str]:
        return {k: base64.b64encode(v).decode() for k, v in (("ca.crt", self.ca_crt), ("tls.crt", self.tls_crt), ("tls.key", self.tls_key))}

    @classmethod
    def from_secret(cls, secret: dict[str, Any] | None) -> "TlsBundle | None":
        data = (secret or {}).get("data") or {}
        try:
            return cls(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))
        except (KeyError, TypeError, ValueError):
            return None


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
    return TlsBundle(ca.public_bytes(pem), cert.public_bytes(pem),
                     key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _general_name(name: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def still_good(bundle: TlsBundle, dns_names: list[str], now: dt.datetime) -> bool:
    """Signed by its CA, with its own key, for these names, and valid beyond RENEW_BEFORE from now."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    try:
        ca, cert = x509.load_pem_x509_certificate(bundle.ca_crt), x509.load_pem_x509_certificate(bundle.tls_crt)
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key(bundle.tls_key, password=None)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = sans.get_values_for_type(x509.DNSName) + [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    return (key.public_key() == cert.public_key() and sorted(names) == sorted(dns_names)
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
    """`ensure` now and every CHECK_EVERY_S (sooner after a failure), until cancelled."""
    while True:
        try:
            await ensure(kube, where, dt.datetime.now(dt.timezone.utc))
            delay = CHECK_EVERY_S
        except (KubeTemporaryError, KubePermanentError) as exc:
            logger.warning("Could not keep the webhook certificate: %s", exc)
            delay = RETRY_S
        await asyncio.sleep(delay)
