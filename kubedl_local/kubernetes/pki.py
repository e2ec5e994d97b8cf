"""The real control plane's certificates and keys, as the files its components are started with.

Why: a real kube-apiserver only serves HTTPS and authenticates every client, and the point of the real tier
is that authentication and RBAC are enforced. Each component gets the identity a kubeadm cluster gives it
(``system:kube-controller-manager``, ``system:kube-scheduler``), the administrator is in ``system:masters``,
and the API server presents a client certificate to kubelets (node agents) so those can refuse anyone
else. The certificates themselves come from :mod:`kubedl_local.pki` (shared with the embedded cluster);
this module only writes them where the components' flags point (mode 0600, in a directory that dies with the
cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubedl_local import pki


@dataclass(frozen=True)
class KeyPair:
    """A certificate (or public key) and its private key, as PEM files."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


class PKI:
    """A CA in ``directory`` and the certificates it issues."""

    def __init__(self, directory: Path, *, common_name: str = "kubedl-py-local-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.authority = pki.CertificateAuthority(common_name)
        self.ca = KeyPair(self._write("ca.crt", self.authority.cert_pem), self._write("ca.key", self.authority.key_pem))

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        names: Sequence[str] = (),
        server: bool = False,
        client: bool = True,
    ) -> KeyPair:
        """Issue ``<name>.crt``/``<name>.key``: a client certificate (CN = user, O = group) and/or a serving
        certificate for ``names`` (DNS names and IP addresses)."""
        pair = self.authority.issue(common_name, organization=organization, sans=names, server=server, client=client)
        return KeyPair(self._write(f"{name}.crt", pair.cert_pem), self._write(f"{name}.key", pair.key_pem))

    def signing_key(self, name: str) -> KeyPair:
        """``<name>.pub`` and ``<name>.key``: a bare key pair (service-account token signing)."""
        pair = pki.signing_key()
        return KeyPair(self._write(f"{name}.pub", pair.cert_pem), self._write(f"{name}.key", pair.key_pem))

    def _write(self, filename: str, data: bytes) -> Path:
        path = self.directory / filename
        path.touch(mode=0o600)
        path.write_bytes(data)
        return path
