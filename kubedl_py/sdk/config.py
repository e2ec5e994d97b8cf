"""Where the SDK connects: the cluster found as kubectl finds it, and the namespace to use.

Why its own module: the rules (explicit path, ``$KUBECONFIG`` list, ``~/.kube/config``, in-cluster service
account) and the advice given when nothing is configured are promises of docs/sdk.md and the CLI; they are
resolved before any connection is opened, so a missing file is reported at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from kubedl_py.api import constants as c
from kubedl_py.kube.client import ClientSettings, KubeClient, in_cluster_available
from kubedl_py.kube.kubeconfig import read_kubeconfig
from kubedl_py.sdk.errors import ConfigurationError

_SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class ResolvedConfig:
    """Where the client connects: kubeconfig path(s) and context, or in-cluster; and the namespace."""

    kubeconfig: str | None
    context: str | None
    namespace: str
    in_cluster: bool = False


def local_kubeconfig_path() -> Path:
    """Where ``kubedl-py local up`` writes its kubeconfig by default (see ``constants.LOCAL_KUBECONFIG``)."""
    return Path(os.path.expanduser(c.LOCAL_KUBECONFIG))


@dataclass(frozen=True)
class _Words:
    """How the advice in an error names the settings: as the SDK's arguments or as the command's flags."""

    kubeconfig: str
    context: str


_PYTHON: Final = _Words(kubeconfig="kubeconfig=", context="context=")
_COMMAND_LINE: Final = _Words(kubeconfig="--kubeconfig", context="--context")


def resolve_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    command_line: bool = False,
) -> ResolvedConfig:
    """Find the cluster as kubectl does: ``kubeconfig``, else ``$KUBECONFIG`` (a path list), else
    ``~/.kube/config``, else the in-cluster service account. The namespace is ``namespace``, else the
    context's namespace, else ``default``. Raises :class:`ConfigurationError` saying what to do: in the
    SDK's terms (``kubeconfig=``), or with ``command_line`` in the command's (``--kubeconfig``)."""
    words = _COMMAND_LINE if command_line else _PYTHON
    explicit = kubeconfig is not None
    paths = os.fspath(kubeconfig) if kubeconfig is not None else os.environ.get("KUBECONFIG") or "~/.kube/config"
    candidates = [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]
    existing = [p for p in candidates if os.path.isfile(p)]
    if explicit and len(existing) < len(candidates):
        missing = next(p for p in candidates if p not in existing)
        raise ConfigurationError(f"kubeconfig {missing} does not exist")
    if not existing:
        if in_cluster_available():
            ns = namespace
            if ns is None:
                with contextlib.suppress(OSError):
                    ns = Path(_SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or None
            return ResolvedConfig(None, None, ns or "default", in_cluster=True)
        raise ConfigurationError(_no_cluster_message(candidates, words))
    joined = os.pathsep.join(existing)
    try:
        read = read_kubeconfig(existing)
    except Exception as exc:  # a YAML error, an unreadable file, a kubeconfig of the wrong shape
        raise ConfigurationError(f"cannot read kubeconfig {joined}: {_kubeconfig_problem(exc)}") from exc
    name = context if context is not None else read.current_context
    if context is not None and context not in read.contexts:
        names = ", ".join(read.contexts) or "none"
        raise ConfigurationError(f"context {context!r} not found in {joined} (contexts: {names})")
    if name is None:
        raise ConfigurationError(f"kubeconfig {joined} has no current-context: pass {words.context}")
    if name not in read.contexts:
        names = ", ".join(read.contexts) or "none"
        raise ConfigurationError(
            f"kubeconfig {joined}: current-context {name!r} is not one of its contexts ({names}): pass {words.context}"
        )
    ns = namespace or read.contexts[name].get("namespace") or "default"
    return ResolvedConfig(joined, name if context else None, str(ns))


def _kubeconfig_problem(exc: Exception) -> str:
    """What is wrong with a kubeconfig file, on one line (YAML errors span several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not valid YAML (line {mark.line + 1}, column {mark.column + 1}: {exc.problem})"
    if isinstance(exc, UnicodeDecodeError):
        return "not a text file"
    text = " ".join(str(exc).split())
    if "Invalid kube-config file" in text or isinstance(exc, KeyError | TypeError | AttributeError):
        return f"not a kubeconfig ({text})" if text else "not a kubeconfig"
    return text or type(exc).__name__


def _no_cluster_message(looked: Sequence[str], words: _Words) -> str:
    local = local_kubeconfig_path()
    where = " or ".join(looked) or "~/.kube/config"
    if local.is_file():
        use = f'{words.kubeconfig}"{local}"' if words is _PYTHON else f"{words.kubeconfig} {local}"
        return (
            f"no cluster configured (no kubeconfig at {where}); a `kubedl-py local up` cluster wrote {local}: "
            f"pass {use}, or `export KUBECONFIG={local}`"
        )
    return (
        f"no cluster configured (no kubeconfig at {where}, not in a pod); pass {words.kubeconfig}, set KUBECONFIG, "
        f"or start a local cluster with `kubedl-py local up` (it writes {local})"
    )


class LazyKube:
    """The one :class:`KubeClient` of an SDK client, opened on first use, on the loop that uses it (a lock
    binds to the loop that first waits on it, so it is made there too); ``close`` lets a later call reopen."""

    def __init__(self, config: ResolvedConfig, configuration: Any, settings: ClientSettings) -> None:
        self.config = config
        self.settings = settings
        self._configuration = configuration
        self._kube: KubeClient | None = None
        self._opening: asyncio.Lock | None = None

    async def kube(self) -> KubeClient:
        if self._kube is not None:
            return self._kube
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._kube is None:
                kube = KubeClient(
                    kubeconfig=self.config.kubeconfig,
                    context=self.config.context,
                    configuration=self._configuration,
                    in_cluster=self.config.in_cluster or None,
                    settings=self.settings,
                )
                try:
                    await kube.open()
                except Exception as exc:
                    raise ConfigurationError(f"cannot load the cluster configuration: {exc}") from exc
                self._kube = kube
        return self._kube

    async def close(self) -> None:
        if self._kube is not None:
            kube, self._kube = self._kube, None
            await kube.close()
