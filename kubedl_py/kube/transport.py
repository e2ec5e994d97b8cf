"""The connection under :class:`~kubedl_py.kube.client.KubeClient`: one aiohttp session, and how each request
is authenticated.

Two ways in, one interface (:class:`Transport`): a kubeconfig or a pod's service account, read by
:mod:`kubedl_py.kube.kubeconfig` (the usual case, and the fast one), or a kubernetes-asyncio
``Configuration`` (handed in by the caller, or loaded by kubernetes-asyncio for an ``auth-provider`` user),
whose ``ApiClient`` keeps refreshing its tokens as it always did.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp.helpers import BasicAuth, get_env_proxy_for_url
from yarl import URL

from kubedl_py.kube.kubeconfig import SERVICE_ACCOUNT_DIR, Access, NeedsFullLoader, in_cluster_access, read_kubeconfig

__all__ = ["SERVICE_ACCOUNT_TOKEN", "Transport", "in_cluster_available", "open_transport"]

#: where a pod's service account token is mounted
SERVICE_ACCOUNT_TOKEN = os.path.join(SERVICE_ACCOUNT_DIR, "token")
#: parallel connections when the caller sets none (kubernetes-asyncio's default, which this replaced)
DEFAULT_MAX_CONNECTIONS = 100
#: watch events of big objects exceed aiohttp's default read buffer (etcd allows 1.5 MiB requests)
READ_BUFFER = 2**21


def in_cluster_available() -> bool:
    """True inside a pod that can use its service account: ``KUBERNETES_SERVICE_HOST`` set and a token mounted.

    The one test of "are we in a cluster" (the SDK's configuration lookup asks it too)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(SERVICE_ACCOUNT_TOKEN)


class Transport:
    """A session to one API server: ``authorize`` adds a request's credentials and returns its TLS context."""

    def __init__(self, host: str, session: aiohttp.ClientSession) -> None:
        self.host = host
        self.session = session
        #: keyword arguments of every request (proxy, its credentials and headers, the TLS server name)
        self.request_options: dict[str, Any] = {}
        #: headers every request carries, a name possibly repeated (impersonation: one Impersonate-Group each)
        self.fixed_headers: list[tuple[str, str]] = []

    def use_proxy(
        self, proxy: str | None, headers: Mapping[str, str] | None = None, server_hostname: str | None = None
    ) -> None:
        """Decide the proxy once: the configuration's, else ``HTTPS_PROXY``/``NO_PROXY`` for this server.

        Asking the environment on every request (aiohttp's ``trust_env``) cost two thread hops per call, a quarter
        of the controller's CPU in a profile of 200 jobs being created; ``.netrc`` credentials never applied to an
        API server that authenticates with certificates or tokens.
        """
        options: dict[str, Any] = {}
        proxy_auth: BasicAuth | None = None
        if not proxy:
            with contextlib.suppress(LookupError):
                found, proxy_auth = get_env_proxy_for_url(URL(self.host))
                proxy = str(found)
        if proxy:
            options["proxy"] = proxy
            if proxy_auth is not None:
                options["proxy_auth"] = proxy_auth
        if headers:
            options["proxy_headers"] = dict(headers)
        if server_hostname:
            options["server_hostname"] = server_hostname
        self.request_options = options

    async def authorize(self, headers: dict[str, str], query: list[tuple[str, str]]) -> ssl.SSLContext | None:
        """Add this request's credentials; the TLS context to send it with (None: the session's)."""
        raise NotImplementedError

    def unauthorized(self) -> None:
        """The server answered 401: credentials that can be renewed are renewed before the next request."""

    async def close(self) -> None:
        await self.session.close()


class AccessTransport(Transport):
    """A kubeconfig's or a service account's :class:`~kubedl_py.kube.kubeconfig.Access`."""

    def __init__(self, access: Access, max_connections: int | None) -> None:
        context = access.ssl_context()
        connector = aiohttp.TCPConnector(limit=max_connections or DEFAULT_MAX_CONNECTIONS, ssl=context or True)
        super().__init__(access.server, aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFFER))
        self.access = access
        self.use_proxy(access.proxy_url, server_hostname=access.tls_server_name)
        # the API server reads each Impersonate-Group line as one group: they are sent as repeated headers
        self.fixed_headers = list(access.impersonate)

    async def authorize(self, headers: dict[str, str], query: list[tuple[str, str]]) -> ssl.SSLContext | None:
        added, context = await self.access.headers()
        headers.update(added)
        return context

    def unauthorized(self) -> None:
        self.access.unauthorized()


class ConfigurationTransport(Transport):
    """A kubernetes-asyncio ``Configuration``, through its ``ApiClient`` (whose hooks refresh tokens)."""

    def __init__(self, configuration: Any, max_connections: int | None) -> None:
        from kubernetes_asyncio import client as k8s_client

        if max_connections is not None:
            configuration.connection_pool_maxsize = max_connections
        self.api = k8s_client.ApiClient(configuration)
        rest = self.api.rest_client
        super().__init__(str(configuration.host), rest.pool_manager)
        self.use_proxy(rest.proxy, rest.proxy_headers, rest.server_hostname)
        rest.pool_manager._trust_env = False  # the proxy is decided above, once

    async def authorize(self, headers: dict[str, str], query: list[tuple[str, str]]) -> ssl.SSLContext | None:
        await self.api.update_params_for_auth(headers, query, ["BearerToken"])
        return None

    async def close(self) -> None:
        await self.api.close()


async def open_transport(
    *,
    kubeconfig: str | None,
    context: str | None,
    configuration: Any,
    in_cluster: bool | None,
    max_connections: int | None,
) -> Transport:
    """The transport for what a :class:`~kubedl_py.kube.client.KubeClient` was given (see its docstring)."""
    if configuration is not None:
        return ConfigurationTransport(configuration, max_connections)
    access, paths = _access(kubeconfig, context, in_cluster)
    if access is not None:
        return AccessTransport(access, max_connections)
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    loaded = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=paths, context=context, client_configuration=loaded, persist_config=False
    )
    return ConfigurationTransport(loaded, max_connections)


def _access(kubeconfig: str | None, context: str | None, in_cluster: bool | None) -> tuple[Access | None, str]:
    """The service account's or the kubeconfig's access; None with the kubeconfig's paths for an ``auth-provider``
    user, which kubernetes-asyncio loads."""
    if in_cluster is None:
        in_cluster = kubeconfig is None and in_cluster_available()
    if in_cluster:
        return in_cluster_access(), ""
    paths = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        return read_kubeconfig(paths).access(context), paths
    except NeedsFullLoader:
        return None, paths
