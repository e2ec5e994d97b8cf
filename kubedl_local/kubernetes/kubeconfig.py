"""Kubeconfig files for the local control plane: self-contained (certificates inline), written atomically.

Why inline data: a kubeconfig that points at files in a temporary directory breaks as soon as that directory
is cleaned up, and a user copying it elsewhere loses the key. Why atomic: ``local up`` signals readiness by the
file's appearance, so it must appear complete or not at all.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    *,
    server: str,
    ca_pem: bytes,
    context: str,
    user: str,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A kubeconfig with one cluster, one user (client certificate or bearer token) and one context."""
    credentials: dict[str, str] = {}
    if cert_pem is not None and key_pem is not None:
        credentials["client-certificate-data"] = _b64(cert_pem)
        credentials["client-key-data"] = _b64(key_pem)
    if token is not None:
        credentials["token"] = token
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user, "namespace": namespace}}],
        "current-context": context,
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` to ``path`` (mode 0600: it holds credentials), replacing it in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)
    return path


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
