"""Reading a kubeconfig (and a pod's service account) the way kubectl does, without kubernetes-asyncio.

Why our own: importing ``kubernetes_asyncio.client`` builds about 1,000 generated API and model classes and
tearing them down again at exit costs as much: about half a second of every ``kubedl-py`` command (issue 52
measured ``kubedl-py get`` at 1.0 s beside kubectl's 0.07 s). This module reads what client-go's
``clientcmd`` reads for the ways of authenticating clusters use today, and hands the rest back:

- files: ``KUBECONFIG`` is a path list merged as kubectl merges it (the first file that names a cluster, user
  or context wins; the first ``current-context`` set wins); relative paths are relative to the file naming them;
- a cluster: ``server``, ``certificate-authority`` (``-data``), ``insecure-skip-tls-verify``,
  ``tls-server-name``, ``proxy-url``;
- a user: ``client-certificate``/``client-key`` (``-data``), ``token``, ``tokenFile`` (re-read, the last read
  winning over ``token`` as in client-go), ``username``/``password``, ``exec`` plug-ins
  (``client.authentication.k8s.io`` v1 and v1beta1: a token or a client certificate, kept until its
  ``expirationTimestamp``, run again after a 401), and impersonation (``as``, ``as-uid``, ``as-groups``,
  ``as-user-extra``);
- in a pod: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the mounted CA and token (re-read once a minute).

A user with an ``auth-provider`` (the deprecated gcp/azure/oidc plug-ins) raises :class:`NeedsFullLoader`:
:class:`~kubedl_py.kube.client.KubeClient` then loads it with kubernetes-asyncio, as before.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import ssl
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "Access",
    "Kubeconfig",
    "KubeconfigError",
    "NeedsFullLoader",
    "in_cluster_access",
    "read_kubeconfig",
]

#: where a pod's service account (token, CA, namespace) is mounted
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: seconds a read service-account token (or a ``tokenFile``) is kept before it is read again (client-go: 1 min)
TOKEN_FILE_PERIOD = 60.0
#: seconds before an exec credential's expiry it is renewed
EXEC_RENEW_SLACK = 10.0


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used: the message says which file or entry and what is wrong."""


class NeedsFullLoader(Exception):
    """The chosen user authenticates in a way this reader does not (an ``auth-provider``)."""


@dataclass
class Kubeconfig:
    """One or more kubeconfig files, merged: each named entry keeps the directory of the file it came from."""

    paths: tuple[str, ...]
    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    current_context: str | None = None

    def access(self, context: str | None = None) -> Access:
        """How to reach and authenticate to the cluster of ``context`` (the current one when None)."""
        name = context or self.current_context
        where = ", ".join(self.paths)
        if not name:
            raise KubeconfigError(f"kubeconfig {where} has no current-context")
        chosen = self.contexts.get(name)
        if chosen is None:
            raise KubeconfigError(f"context {name!r} not found in {where}")
        cluster_name, user_name = chosen.get("cluster"), chosen.get("user")
        if cluster_name not in self.clusters:
            raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which {where} does not define")
        cluster, cluster_dir = self.clusters[str(cluster_name)]
        user, user_dir = self.users.get(str(user_name), ({}, cluster_dir)) if user_name else ({}, cluster_dir)
        if user.get("auth-provider"):
            raise NeedsFullLoader(f"user {user_name!r} uses an auth-provider")
        server = str(cluster.get("server") or "")
        if not server:
            raise KubeconfigError(f"cluster {cluster_name!r} in {where} has no server")
        access = Access(
            server=server.rstrip("/"),
            ca_file=_path(cluster.get("certificate-authority"), cluster_dir),
            ca_data=_decoded(cluster.get("certificate-authority-data"), f"cluster {cluster_name!r}"),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
            tls_server_name=cluster.get("tls-server-name") or None,
            proxy_url=cluster.get("proxy-url") or None,
            cert_file=_path(user.get("client-certificate"), user_dir),
            cert_data=_decoded(user.get("client-certificate-data"), f"user {user_name!r}"),
            key_file=_path(user.get("client-key"), user_dir),
            key_data=_decoded(user.get("client-key-data"), f"user {user_name!r}"),
            token=user.get("token") or None,
            token_file=_path(user.get("tokenFile"), user_dir),
            username=user.get("username") or None,
            password=user.get("password") or None,
            impersonate=_impersonation(user),
        )
        exec_config = user.get("exec")
        if exec_config:
            access.exec_plugin = ExecPlugin(exec_config, user_dir, cluster, access.server)
        return access


#: the last files read and what they held, keyed by each file's path, mtime and size: a command resolves its
#: namespace from the kubeconfig and then opens its client from it, and the second read is this one
_last_read: tuple[tuple[tuple[str, int, int], ...], Kubeconfig] | None = None


def read_kubeconfig(paths: str | os.PathLike[str] | Sequence[str]) -> Kubeconfig:
    """Read and merge kubeconfig files (a path, a ``os.pathsep``-joined list or a sequence of paths); files
    unchanged since the last call are not parsed again."""
    global _last_read
    if isinstance(paths, str | os.PathLike):
        files = [p for p in os.fspath(paths).split(os.pathsep) if p]
    else:
        files = list(paths)
    try:
        stats = [os.stat(os.path.expanduser(file)) for file in files]
        stamp = tuple((file, st.st_mtime_ns, st.st_size) for file, st in zip(files, stats, strict=True))
    except OSError:
        stamp = None  # reading below says what is wrong
    if stamp is not None and _last_read is not None and _last_read[0] == stamp:
        return _last_read[1]
    merged = _read(files)
    if stamp is not None:
        _last_read = (stamp, merged)
    return merged


def _read(files: list[str]) -> Kubeconfig:
    merged = Kubeconfig(paths=tuple(files))
    for file in files:
        path = Path(file).expanduser()
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text) or {}
        if not isinstance(document, dict):
            raise KubeconfigError(f"Invalid kube-config file {path}: not a mapping")
        base = path.resolve().parent
        for key, into in (("clusters", merged.clusters), ("users", merged.users)):
            for name, body in _named(document, key, path):
                into.setdefault(name, (body, base))
        for name, body in _named(document, "contexts", path):
            merged.contexts.setdefault(name, body)
        if merged.current_context is None and document.get("current-context"):
            merged.current_context = str(document["current-context"])
    return merged


def _named(document: Mapping[str, Any], key: str, path: Path) -> list[tuple[str, dict[str, Any]]]:
    entries = document.get(key) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"Invalid kube-config file {path}: {key} is not a list")
    inner = key[:-1]
    named: list[tuple[str, dict[str, Any]]] = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry:
            raise KubeconfigError(f"Invalid kube-config file {path}: an entry of {key} has no name")
        body = entry.get(inner) or {}
        if not isinstance(body, dict):
            raise KubeconfigError(f"Invalid kube-config file {path}: {key} {entry['name']!r} is not a mapping")
        named.append((str(entry["name"]), body))
    return named


def _path(value: Any, base: Path) -> str | None:
    if not value:
        return None
    path = Path(os.path.expanduser(str(value)))
    return str(path if path.is_absolute() else base / path)


def _decoded(value: Any, who: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise KubeconfigError(f"{who}: a *-data field is not base64 ({exc})") from exc


def _impersonation(user: Mapping[str, Any]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    if user.get("as"):
        headers.append(("Impersonate-User", str(user["as"])))
    if user.get("as-uid"):
        headers.append(("Impersonate-Uid", str(user["as-uid"])))
    headers.extend(("Impersonate-Group", str(group)) for group in user.get("as-groups") or [])
    for key, values in (user.get("as-user-extra") or {}).items():
        headers.extend((f"Impersonate-Extra-{key}", str(value)) for value in values or [])
    return headers


@dataclass
class _Credential:
    """What an exec plug-in returned (no secret in its repr)."""

    token: str | None = field(default=None, repr=False)
    cert_data: bytes | None = None
    key_data: bytes | None = field(default=None, repr=False)
    expires: float | None = None  # time.time() seconds; None: until a 401


class ExecPlugin:
    """A ``users[].user.exec`` credential plug-in: run when there is no credential, when it expires, after a 401."""

    def __init__(self, config: Mapping[str, Any], base: Path, cluster: Mapping[str, Any], server: str) -> None:
        self.api_version = str(config.get("apiVersion") or "client.authentication.k8s.io/v1")
        command = str(config.get("command") or "")
        if not command:
            raise KubeconfigError("exec: command is empty")
        # client-go: a command with a path separator is relative to the kubeconfig's directory
        self.command = str(base / command) if os.sep in command and not os.path.isabs(command) else command
        self.args = [str(arg) for arg in config.get("args") or []]
        self.env = {str(item["name"]): str(item.get("value", "")) for item in config.get("env") or []}
        self.cluster_info: dict[str, Any] | None = None
        if config.get("provideClusterInfo"):
            self.cluster_info = {
                "server": server,
                "tls-server-name": cluster.get("tls-server-name"),
                "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
                "certificate-authority-data": cluster.get("certificate-authority-data"),
                "proxy-url": cluster.get("proxy-url"),
                "config": cluster.get("extensions", {}),
            }
        self._credential: _Credential | None = None
        self._lock: asyncio.Lock | None = None

    def forget(self) -> None:
        """Drop the cached credential (after a 401): the next request runs the plug-in again."""
        self._credential = None

    def cached(self) -> _Credential | None:
        credential = self._credential
        if credential is None or (
            credential.expires is not None and time.time() > credential.expires - EXEC_RENEW_SLACK
        ):
            return None
        return credential

    async def credential(self) -> _Credential:
        cached = self.cached()
        if cached is not None:
            return cached
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            cached = self.cached()
            if cached is None:
                cached = self._credential = await self._run()
        return cached

    async def _run(self) -> _Credential:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster_info is not None:
            spec["cluster"] = self.cluster_info
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            process = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise KubeconfigError(f"exec plug-in {self.command}: {exc.strerror or exc}") from exc
        out, err = await process.communicate()
        if process.returncode != 0:
            said = err.decode(errors="replace").strip().splitlines()
            raise KubeconfigError(
                f"exec plug-in {self.command} exited {process.returncode}" + (f": {said[-1]}" if said else "")
            )
        try:
            status = json.loads(out)["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise KubeconfigError(f"exec plug-in {self.command} did not print an ExecCredential with a status") from exc
        expires = None
        if status.get("expirationTimestamp"):
            stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
            expires = datetime.fromisoformat(stamp).astimezone(UTC).timestamp()
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not status.get("token") and not (cert and key):
            raise KubeconfigError(f"exec plug-in {self.command} returned neither a token nor a client certificate")
        return _Credential(
            token=status.get("token") or None,
            cert_data=cert.encode() if cert else None,
            key_data=key.encode() if key else None,
            expires=expires,
        )


@dataclass
class Access:
    """Where the API server is and how to authenticate to it; builds the TLS context and each request's headers."""

    server: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    # the secrets stay out of repr(): an Access in a log line or a traceback shows none of them
    key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    impersonate: list[tuple[str, str]] = field(default_factory=list)
    exec_plugin: ExecPlugin | None = field(default=None, repr=False)
    _file_token: tuple[float, str] | None = field(default=None, init=False, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, init=False, repr=False)
    _ssl_for: _Credential | None = field(default=None, init=False, repr=False)

    @property
    def secure(self) -> bool:
        return self.server.startswith("https://")

    def ssl_context(self, credential: _Credential | None = None) -> ssl.SSLContext | None:
        """The TLS context (None for an ``http://`` server): the cluster's CA, the user's certificate."""
        if not self.secure:
            return None
        if self._ssl is not None and self._ssl_for is credential:
            return self._ssl
        cadata = self.ca_data.decode() if self.ca_data else None
        try:
            context = ssl.create_default_context(cafile=self.ca_file, cadata=cadata)
        except (OSError, ssl.SSLError) as exc:
            raise KubeconfigError(f"certificate authority {self.ca_file or '(data)'}: {exc}") from exc
        # Go's verifier, which kubectl uses, has no "strict" mode; Python 3.13 turns it on by default
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert_data, key_data = (credential.cert_data, credential.key_data) if credential else (None, None)
        if cert_data is None and (self.cert_file or self.cert_data):
            cert_data = self.cert_data or Path(str(self.cert_file)).read_bytes()
            key_data = self.key_data or (Path(self.key_file).read_bytes() if self.key_file else None)
        if cert_data is not None:
            _load_chain(context, cert_data, key_data)
        self._ssl, self._ssl_for = context, credential
        return context

    async def headers(self) -> tuple[dict[str, str], ssl.SSLContext | None]:
        """Authentication headers for the next request, and the TLS context to send it with."""
        headers: dict[str, str] = {}
        credential = await self.exec_plugin.credential() if self.exec_plugin is not None else None
        token = self._read_token_file() or self.token
        if credential is not None and credential.token:
            token = credential.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self.username is not None and self.password is not None:
            basic = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        uses_cert = credential is not None and credential.cert_data is not None
        return headers, self.ssl_context(credential if uses_cert else None)

    def unauthorized(self) -> None:
        """A 401: renewable credentials are fetched again on the next request."""
        if self.exec_plugin is not None:
            self.exec_plugin.forget()
        self._file_token = None

    def _read_token_file(self) -> str | None:
        if not self.token_file:
            return None
        now = time.monotonic()
        if self._file_token is not None and now - self._file_token[0] < TOKEN_FILE_PERIOD:
            return self._file_token[1]
        try:
            token = Path(self.token_file).read_text(encoding="utf-8").strip()
        except OSError:
            return self._file_token[1] if self._file_token else None  # keep the last good one, as client-go does
        self._file_token = (now, token)
        return token


def _load_chain(context: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """Load a PEM certificate (and key) held in memory: Python reads them only from files, so they pass
    through a private temporary file removed before this returns."""
    with tempfile.TemporaryDirectory(prefix="kubedl-tls-") as directory:
        cert_path, key_path = os.path.join(directory, "cert"), os.path.join(directory, "key")
        for path, data in ((cert_path, cert), (key_path, key)):
            if data is not None:
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                    out.write(data)
        try:
            context.load_cert_chain(cert_path, keyfile=key_path if key is not None else None)
        except (OSError, ssl.SSLError) as exc:
            raise KubeconfigError(f"client certificate: {exc}") from exc


def in_cluster_access() -> Access:
    """A pod's access through its service account (``KUBERNETES_SERVICE_HOST``/``PORT``, CA and token)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise KubeconfigError("not in a pod: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ca = os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt")
    return Access(
        server=f"https://{host}:{port}",
        ca_file=ca if os.path.isfile(ca) and os.path.getsize(ca) else None,
        token_file=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
    )
