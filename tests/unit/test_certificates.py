"""The webhook certificate the operator keeps (controller/admission/certificates.py): what it issues is
accepted by a TLS client that trusts only its CA, for the Service's names; it is issued again
when it nears its end, when the names change, or when the Secret holds something else."""

from __future__ import annotations

import datetime as dt
import ssl
import tempfile
from pathlib import Path

import pytest

from specdeploy.controller.admission.certificates import RENEW_BEFORE, VALIDITY, Placement, TlsBundle, issue, still_good

NOW = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)
WHERE = Placement("ops", "sd-webhook-tls", "sd-webhook", "sd")


def _handshake(bundle: TlsBundle, host: str) -> None:
    """A TLS handshake in memory: the server serves the bundle, the client trusts only its CA."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tls.crt").write_bytes(bundle.tls_crt)
        (Path(tmp) / "tls.key").write_bytes(bundle.tls_key)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(Path(tmp) / "tls.crt", Path(tmp) / "tls.key")
    client_context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(c_in, c_out, server_hostname=host)
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    client.do_handshake()  # raises unless done and verified


def test_an_issued_pair_is_trusted_for_each_service_name_and_only_those() -> None:
    bundle = issue(WHERE.dns_names, NOW)
    for host in WHERE.dns_names:
        _handshake(bundle, host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(bundle, "other.ops.svc")
    assert still_good(bundle, WHERE.dns_names, NOW)


def test_a_pair_is_renewed_before_it_expires_or_when_the_names_change() -> None:
    bundle = issue(WHERE.dns_names, NOW)
    assert still_good(bundle, WHERE.dns_names, NOW + VALIDITY - RENEW_BEFORE - dt.timedelta(days=1))
    assert not still_good(bundle, WHERE.dns_names, NOW + VALIDITY - RENEW_BEFORE + dt.timedelta(days=1))
    renamed = Placement("ops", "sd-webhook-tls", "other-webhook", "sd")
    assert not still_good(bundle, renamed.dns_names, NOW)


def test_a_secret_that_does_not_hold_a_matching_pair_is_replaced() -> None:
    bundle, stranger = issue(WHERE.dns_names, NOW), issue(WHERE.dns_names, NOW)
    assert TlsBundle.from_secret({"data": bundle.secret_data()}) == bundle
    assert TlsBundle.from_secret({"data": {"tls.crt": "x"}}) is None
    assert TlsBundle.from_secret(None) is None
    mixed = TlsBundle(stranger.ca_crt, bundle.tls_crt, bundle.tls_key, stranger.ca_key)  # signed by another CA
    assert not still_good(mixed, WHERE.dns_names, NOW)
    assert not still_good(TlsBundle(bundle.ca_crt, bundle.tls_crt, stranger.tls_key, bundle.ca_key), WHERE.dns_names, NOW)  # another key
    assert not still_good(TlsBundle(b"junk", b"junk", b"junk", b"junk"), WHERE.dns_names, NOW)


def test_a_foreign_but_valid_certificate_is_not_ours_without_its_cas_key() -> None:
    """A third party's CA and a certificate it signed for the right names (cert-manager's, a
    hand-made one) is a valid pair; without the CA's key beside it, it is not the operator's."""
    foreign = issue(WHERE.dns_names, NOW)
    data = foreign.secret_data()
    del data["ca.key"]
    assert TlsBundle.from_secret({"data": data}) is None
    other = issue(WHERE.dns_names, NOW)
    assert not still_good(TlsBundle(foreign.ca_crt, foreign.tls_crt, foreign.tls_key, other.ca_key), WHERE.dns_names, NOW)


def test_a_webhook_url_puts_its_host_in_the_certificate() -> None:
    where = Placement("ops", "sd-webhook-tls", "sd-webhook", "sd", url="https://127.0.0.1:9443")
    assert where.dns_names[-1] == "127.0.0.1"
    bundle = issue(where.dns_names, NOW)
    _handshake(bundle, "127.0.0.1")
    assert still_good(bundle, where.dns_names, NOW) and not still_good(bundle, WHERE.dns_names, NOW)
    by_url = {"clientConfig": {"url": "https://127.0.0.1:9443/validate-speculativedeployment"}}
    by_service = {"clientConfig": {"service": {"name": "sd-webhook"}}}
    assert where.calls_us(by_url) and not where.calls_us(by_service)
    assert WHERE.calls_us(by_service) and not WHERE.calls_us(by_url)
