"""Certificates for the local clusters: a cluster CA, serving and client certificates, TLS contexts.

Why it exists: the kubelet endpoint is HTTPS, as on a real node, and the API server reaches it with a client
certificate (``--kubelet-client-certificate``); pods read the cluster CA from ``kube-root-ca.crt``. Both
the embedded API server and the node agents need the same few operations, so they live here, importing
nothing of ours (the server side of ``kubedl_local`` may not depend on the client machinery, the agents may use
this). Keys are ECDSA P-256: generating one takes well under a millisecond, so a cluster can afford fresh
ones on every start. ``ssl`` only loads certificates from files, so :func:`server_context` and
:func:`client_context` write PEM to a private temporary directory and remove it right after loading.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _sans(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for n in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def _build(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    sans: Sequence[str] = (),
    usages: Sequence[x509.ObjectIdentifier] = (),
    days: int = 365,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(_sans(sans)), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(signer, hashes.SHA256())


class CertificateAuthority:
    """A CA that issues serving and client certificates (the embedded cluster's root CA)."""

    def __init__(self, common_name: str = "kubedl-local-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(common_name)
        self._cert = _build(self._name, self._name, self._key.public_key(), self._key, ca=True, days=3650)
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA's private key (kube-controller-manager signs CertificateSigningRequests with it)."""
        return _key_pem(self._key)

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        sans: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        cert = _build(
            _name(common_name, organization),
            self._name,
            key.public_key(),
            self._key,
            ca=False,
            sans=sans,
            usages=usages,
        )
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def signing_key() -> KeyPair:
    """A bare key pair (no certificate): ``cert_pem`` is the public key, e.g. service-account token signing."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(public, _key_pem(key))


def self_signed(common_name: str, sans: Sequence[str]) -> KeyPair:
    """A self-signed serving certificate, as a kubelet makes for itself when given none."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = _build(name, name, key.public_key(), key, ca=False, sans=sans, usages=[ExtendedKeyUsageOID.SERVER_AUTH])
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _load_pair(ctx: ssl.SSLContext, pair: KeyPair) -> None:
    with tempfile.TemporaryDirectory(prefix="kubedl-pki-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(pair.cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pair.key_pem)
        ctx.load_cert_chain(cert, key)


def server_context(pair: KeyPair, *, client_ca_pem: bytes | None = None) -> ssl.SSLContext:
    """A TLS server context; with ``client_ca_pem`` every client must present a certificate signed by it."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load_pair(ctx, pair)
    if client_ca_pem is not None:
        ctx.load_verify_locations(cadata=client_ca_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(pair: KeyPair | None = None, *, ca_pem: bytes | None = None) -> ssl.SSLContext:
    """A TLS client context: presents ``pair`` if given; verifies the server only when ``ca_pem`` is given
    (kube-apiserver does not verify kubelets' serving certificates unless told a CA)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca_pem is not None:
        ctx.load_verify_locations(cadata=ca_pem.decode())
        ctx.check_hostname = False  # node certificates name IPs; the IP SAN check is what matters
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if pair is not None:
        _load_pair(ctx, pair)
    return ctx


def read_pair(cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> KeyPair:
    return KeyPair(Path(cert_file).read_bytes(), Path(key_file).read_bytes())
