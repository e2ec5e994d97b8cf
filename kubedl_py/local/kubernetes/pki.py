"""The local control plane's certificates and keys: one CA, serving and client certificates, SA signing keys.

Why our own PKI: a real kube-apiserver only serves HTTPS and authenticates every client, and the point of the
real tier is that authentication and RBAC are enforced. Each component gets the identity a kubeadm cluster
gives it (``system:kube-controller-manager``, ``system:kube-scheduler``), the administrator is in
``system:masters``, and the API server presents a client certificate to kubelets (node agents) so those can
refuse anyone else. ECDSA P-256 keys: generated in milliseconds, accepted by every component.

Everything lives in one directory that dies with the cluster; nothing here is meant to outlive a test run.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: certificates outlive any cluster that uses them; a day of clock skew is tolerated at the start
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


class PKI:
    """A CA in ``directory`` and the certificates it issues (files written with mode 0600)."""

    def __init__(self, directory: Path, *, common_name: str = "kubedl-py-local-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()), critical=False)
            .sign(self._ca_key, hashes.SHA256())
        )
        ca_cert = self._write("ca.crt", _cert_pem(self._ca_cert))
        self.ca = KeyPair(ca_cert, self._write("ca.key", _key_pem(self._ca_key)))

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = True,
    ) -> KeyPair:
        """Issue ``<name>.crt``/``<name>.key``: a client certificate (CN = user, O = groups) and/or a serving
        certificate for the given names and addresses."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()), critical=False
            )
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(dns) for dns in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return KeyPair(self._write(f"{name}.crt", _cert_pem(cert)), self._write(f"{name}.key", _key_pem(key)))

    def signing_key(self, name: str) -> KeyPair:
        """A bare key pair (``<name>.key`` private, ``<name>.pub`` public): service-account token signing."""
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return KeyPair(self._write(f"{name}.pub", public), self._write(f"{name}.key", _key_pem(key)))

    def _write(self, filename: str, data: bytes) -> Path:
        path = self.directory / filename
        path.touch(mode=0o600)
        path.write_bytes(data)
        return path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
