"""The serving certificate of the HTTPS metrics endpoint: the operator's, or a self-signed one made at start.

Why self-signed by default: Prometheus (or anyone) authenticates *itself* to the endpoint with a bearer token
(:mod:`kubedl_py.kube.delegation`); TLS is there so that token never crosses the network in clear text. A
ServiceMonitor then scrapes with ``insecureSkipVerify`` unless the operator gives a certificate its CA signed
(``--metrics-cert-dir``, a directory holding ``tls.crt`` and ``tls.key`` as a cert-manager Secret mounts them),
which is what controller scaffolds do too.

Why in memory: the controller runs on a read-only root filesystem with no writable volume, and Python's
``ssl`` loads certificates only from paths. A self-signed pair is written to anonymous memory files
(``memfd_create``) and loaded through ``/proc/self/fd``; where that does not exist (not Linux) a private
temporary directory is used and removed right after loading.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CERT_FILE", "KEY_FILE", "self_signed", "server_context"]

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
#: a self-signed certificate lives as long as the process, at most this long
SELF_SIGNED_DAYS = 365


def self_signed(names: Sequence[str]) -> tuple[bytes, bytes]:
    """A fresh ECDSA P-256 key and a self-signed serving certificate for ``names`` (DNS names or IPs), PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubedl-py-metrics")])
    sans: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def default_names() -> list[str]:
    """What a self-signed certificate names: this host (the pod's name in a cluster), localhost, loopback."""
    return [socket.gethostname(), "localhost", "127.0.0.1", "::1"]


def server_context(cert_dir: str | Path | None = None) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or newer) with the pair in ``cert_dir``, else a fresh self-signed one.

    A missing or unreadable file is a :class:`ValueError` naming it and the flag."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        cert, key = Path(cert_dir) / CERT_FILE, Path(cert_dir) / KEY_FILE
        for path in (cert, key):
            if not path.is_file():
                raise ValueError(
                    f"--metrics-cert-dir {cert_dir}: no {path.name} there (it must hold {CERT_FILE} and {KEY_FILE})"
                )
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"--metrics-cert-dir {cert_dir}: cannot load {CERT_FILE}/{KEY_FILE}: {exc}") from None
        return context
    cert_pem, key_pem = self_signed(default_names())
    with _pem_files(cert_pem, key_pem) as (cert_path, key_path):
        context.load_cert_chain(cert_path, key_path)
    return context


@contextlib.contextmanager
def _pem_files(cert_pem: bytes, key_pem: bytes) -> Iterator[tuple[str, str]]:
    """Paths that read as the two PEM blobs, gone when the block ends (module docstring: why memory)."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("kubedl-py-tls.crt", "kubedl-py-tls.key")]
        try:
            for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="kubedl-py-tls-") as directory:  # pragma: no cover - not Linux
        cert_path, key_path = os.path.join(directory, CERT_FILE), os.path.join(directory, KEY_FILE)
        for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                handle.write(data)
        yield cert_path, key_path
