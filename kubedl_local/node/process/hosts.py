"""Cluster DNS as hosts files: every pod process sees Service names through its own ``/etc/hosts``.

Why a hosts file and not a DNS server: every resolver on the machine — glibc's ``getaddrinfo`` (Python,
C/C++, torch's gloo/c10d), ``getent``, musl — reads ``/etc/hosts`` first with the Debian/Ubuntu/Fedora
default ``hosts: files dns`` in ``/etc/nsswitch.conf`` (this machine: ``hosts: files dns``). A DNS server
would need port 53 and a per-process ``resolv.conf`` anyway. The limit: a host whose nsswitch puts another
source before ``files`` (e.g. ``resolve`` with ``[!UNAVAIL=return]`` before ``files``) or a program that
speaks DNS itself (Go's pure resolver honours ``/etc/hosts`` too; ``dig``/``nslookup`` do not) would not see
the names. There is no search-domain expansion: all four spellings are listed explicitly instead.

One file per pod, because the pod's own hostname line differs (Kubernetes' kubelet also writes a managed
hosts file per pod); the Service lines are the same in all of them. The sandbox (``sandbox.py``) bind-mounts
the file over ``/etc/hosts`` in the pod's private mount namespace. A bind mount pins the *inode*, so updates
must rewrite the same file: replacing it by rename would leave running processes on the old content.

Update protocol (``_rewrite_in_place``): one ``pwrite`` at offset 0 of the new content padded with newlines
to at least the old length, then ``ftruncate`` to the new length. A reader opening the file at any moment
sees either the old content, the new content followed by blank lines, or the new content — each a valid
hosts file. The remaining window: the single ``pwrite`` copies into the page cache while a concurrent
``read`` may copy out, so a reader can in theory see a byte-level mix of old and new within that memcpy
(microseconds, and only for lines that changed); resolvers re-read the file on the next lookup.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_DOMAIN = "cluster.local"

_HEADER = "# Kubernetes-managed hosts file (kubedl-py embedded cluster). Rewritten in place; do not edit.\n"
_LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


@dataclass(frozen=True, kw_only=True)
class ServiceRecord:
    """A Service's DNS identity: ``ips`` is ``[clusterIP]``, or the ready pod IPs of a headless Service."""

    namespace: str
    name: str
    ips: Sequence[str]
    # Extra fully-qualified names to point at the same IPs (e.g. ``<hostname>.<subdomain>...`` of pods).
    extra_names: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, kw_only=True)
class PodIdentity:
    """The pod's own line: hostname (and FQDN when it has a subdomain) -> its IP."""

    hostname: str
    ip: str
    fqdn: str | None = None


def service_names(name: str, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[str]:
    """The spellings a pod may use: ``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.<domain>``.

    The short name ``svc`` really only resolves within the same namespace (search path); a hosts file has
    no notion of the asker's namespace, so Services with the same name in two namespaces both claim it and
    the first line wins. The qualified forms are exact.
    """
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.{cluster_domain}"]


_NAME_OK = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$")


def render_hosts(
    services: Iterable[ServiceRecord],
    *,
    pod: PodIdentity | None = None,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
) -> str:
    """The full hosts file text: header, localhost lines, the pod's own line, then the Services (sorted)."""
    parts = [_HEADER, _LOCALHOST]
    if pod is not None:
        names = [pod.fqdn, pod.hostname] if pod.fqdn else [pod.hostname]
        parts.append(f"{pod.ip}\t{' '.join(names)}\n")
    for svc in sorted(services, key=lambda s: (s.namespace, s.name)):
        names = [*service_names(svc.name, svc.namespace, cluster_domain), *svc.extra_names]
        bad = [n for n in names if not _NAME_OK.match(n)]
        if bad:  # a space or '#' would corrupt the file for every other name
            log.warning("skipping Service %s/%s: invalid host names %s", svc.namespace, svc.name, bad)
            continue
        for ip in svc.ips:
            ipaddress.ip_address(ip)  # raises on garbage rather than writing an unparsable line
            parts.append(f"{ip}\t{' '.join(names)}\n")
    return "".join(parts)


def _rewrite_in_place(path: Path, content: str) -> None:
    """Replace the content of ``path`` keeping its inode (see the module docstring for the protocol)."""
    data = content.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        old = os.fstat(fd).st_size
        if os.pread(fd, old + 1, 0) == data:
            return
        padded = data + b"\n" * max(0, old - len(data))
        written = os.pwrite(fd, padded, 0)
        if written != len(padded):  # regular files write fully; be loud if that ever changes
            raise OSError(f"short write to {path}: {written} of {len(padded)} bytes")
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


class HostsFiles:
    """The per-pod hosts files of one cluster, all kept current as Services change.

    ``pod_file()`` when a pod sandbox is created (pass the path to ``Sandbox(hosts_file=...)``),
    ``set_services()`` whenever Services or (headless) endpoints change, ``remove_pod()`` on pod deletion.
    """

    def __init__(self, directory: Path, *, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> None:
        self.directory = Path(directory)
        self.cluster_domain = cluster_domain
        self._services: list[ServiceRecord] = []
        self._pods: dict[str, PodIdentity | None] = {}
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", key)
        return self.directory / f"{safe}.hosts"

    def pod_file(self, key: str, pod: PodIdentity | None = None) -> Path:
        """Create (or refresh) the hosts file of pod ``key`` (e.g. its uid) and return its path."""
        self._pods[key] = pod
        path = self._path(key)
        _rewrite_in_place(path, render_hosts(self._services, pod=pod, cluster_domain=self.cluster_domain))
        return path

    def set_services(self, services: Iterable[ServiceRecord]) -> None:
        """Make every pod's hosts file list exactly ``services`` (the whole desired set, not a delta)."""
        self._services = list(services)
        for key, pod in self._pods.items():
            _rewrite_in_place(
                self._path(key), render_hosts(self._services, pod=pod, cluster_domain=self.cluster_domain)
            )

    def remove_pod(self, key: str) -> None:
        """Forget the pod; its file is deleted (a process still running keeps the inode it mounted)."""
        self._pods.pop(key, None)
        self._path(key).unlink(missing_ok=True)
