"""``KubeClient``: the controller's one door to the API server, on raw dicts.

Why not the generated kubernetes-asyncio API classes: they deserialize every answer into model objects
(slow: a list of 10,000 pods takes seconds) and they only know built-in kinds. The client sends requests
itself through one aiohttp session, parsing JSON into plain dicts (with orjson when it is installed). A
kubeconfig or a pod's service account is read by :mod:`kubedl_py.kube.kubeconfig` (kubernetes-asyncio's
import alone costs a command half a second); kubernetes-asyncio is imported only for a ``Configuration``
handed in and for the ``auth-provider`` plug-ins that module does not read (:mod:`kubedl_py.kube.transport`).

Every request goes through the one retry policy (:mod:`kubedl_py.kube.retry`) and every failure comes out
as one of :mod:`kubedl_py.kube.errors`. A watch is not retried here: resuming it correctly (from which
resourceVersion, re-list on 410) is the informer's job.

Dict patches are always sent as ``application/merge-patch+json`` unless asked otherwise: a JSON merge patch
means the same thing for custom resources and built-in kinds, whereas the strategic-merge default of the
generated client is rejected for custom resources.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from urllib.parse import urlencode

import aiohttp
from multidict import CIMultiDict

from kubedl_py.kube.errors import (
    ApiError,
    ConnectionRefused,
    Gone,
    TransportError,
    error_from_response,
    error_from_status,
)
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import (
    CONFIGMAPS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SERVICES,
    Resource,
)
from kubedl_py.kube.retry import RetryPolicy, RetrySettings
from kubedl_py.kube.transport import Transport, in_cluster_available, open_transport

if TYPE_CHECKING:
    from kubedl_py.kube.metrics import Metrics

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SERVICES",
    "ClientSettings",
    "KubeClient",
    "ObjectList",
    "PatchType",
    "Resource",
    "WatchEvent",
    "dumps",
    "in_cluster_available",
    "loads",
]

logger = logging.getLogger(__name__)

#: set inside :func:`unfenced` (and the tasks started in it): writes skip the client's write fence
_UNFENCED: ContextVar[bool] = ContextVar("kubedl_write_unfenced", default=False)


@contextlib.contextmanager
def unfenced() -> Iterator[None]:
    """Writes from inside this block (and the tasks started in it) skip ``KubeClient.write_fence``: the leader
    election's own writes, which renew or release the Lease the fence judges by."""
    token = _UNFENCED.set(True)
    try:
        yield
    finally:
        _UNFENCED.reset(token)


try:  # orjson parses a big list several times faster; it is optional, json is always there
    import orjson

    def loads(data: bytes | str) -> Any:
        """Parse JSON (orjson when installed)."""
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        """Serialize to JSON bytes (orjson when installed)."""
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - depends on the environment

    def loads(data: bytes | str) -> Any:
        """Parse JSON (orjson when installed)."""
        return json.loads(data)

    def dumps(obj: Any) -> bytes:
        """Serialize to JSON bytes (orjson when installed)."""
        return json.dumps(obj, separators=(",", ":")).encode()


PatchType = Literal["merge", "json", "strategic", "apply"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


@dataclass(frozen=True)
class ClientSettings:
    """Timeouts and limits of a :class:`KubeClient`."""

    #: seconds one ordinary request (not a watch or a followed log) may take in total, answer included
    request_timeout: float = 30.0
    #: seconds to establish a TCP/TLS connection
    connect_timeout: float = 10.0
    #: server-side ``timeoutSeconds`` of a watch: the server ends the stream after this, cleanly
    watch_timeout_seconds: int = 300
    #: client-side read timeout of a watch is the server timeout plus this: it only fires when the
    #: connection went silent without closing (a dead peer, a black-holing proxy)
    watch_read_slack: float = 30.0
    #: objects per page when listing; big lists come in pages so no single answer is huge
    list_page_size: int = 500
    #: parallel connections to the API server (None: kubernetes-asyncio's configuration decides)
    max_connections: int | None = None
    #: the retry policy of ordinary requests
    retry: RetrySettings = field(default_factory=RetrySettings)
    user_agent: str = "kubedl-py"


class WatchEvent(NamedTuple):
    """One event of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``, and the object."""

    type: str
    object: dict[str, Any]


@dataclass
class ObjectList:
    """All items of a list (every page), and the resourceVersion to start a watch from."""

    items: list[dict[str, Any]]
    resource_version: str


class KubeClient:
    """An async context manager holding one connection pool to one API server.

    Build it from a kubeconfig file (``kubeconfig=``, optionally ``context=``), from a ready
    kubernetes-asyncio ``Configuration`` (``configuration=``), or from the in-cluster service account
    (``in_cluster=True``, also the default inside a pod when no kubeconfig is given)::

        async with KubeClient(kubeconfig=path) as kube:
            pod = await kube.get(PODS, "web-0", namespace="default")
    """

    def __init__(
        self,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        configuration: Any = None,
        in_cluster: bool | None = None,
        settings: ClientSettings | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings or ClientSettings()
        self.metrics = metrics
        #: writes (any request but a GET) wait here first; a Manager sets its own (kubedl_py.kube.priority)
        self.write_gate: WriteGate | None = None
        #: called just before each write is sent (after the write gate): raises :class:`NotLeader` when this
        #: process may no longer act; a Manager with leader election sets its elector's (``LeaderElector.fence``)
        self.write_fence: Callable[[], None] | None = None
        self._kubeconfig = os.fspath(kubeconfig) if kubeconfig is not None else None
        self._context = context
        self._configuration = configuration
        self._in_cluster = in_cluster
        self._transport: Transport | None = None
        self.retry = RetryPolicy(self.settings.retry, on_retry=self._count_retry)

    # ----------------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> KubeClient:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Load the configuration and create the connection pool (must run inside the event loop)."""
        if self._transport is not None:
            return
        # the aiohttp session binds to the running loop: create it only here
        self._transport = await open_transport(
            kubeconfig=self._kubeconfig,
            context=self._context,
            configuration=self._configuration,
            in_cluster=self._in_cluster,
            max_connections=self.settings.max_connections,
        )

    async def close(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        if self._transport is not None:
            transport, self._transport = self._transport, None
            await transport.close()

    @property
    def host(self) -> str:
        """The API server URL."""
        return self._require_transport().host

    def _require_transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError("KubeClient is not open: use `async with KubeClient(...)`")
        return self._transport

    # -------------------------------------------------------------------------------------------- CRUD

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """One object; :class:`~kubedl_py.kube.errors.NotFound` when there is none."""
        path = resource.path(namespace=namespace, name=name)
        return await self._json("GET", path, verb="get", resource=resource)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> ObjectList:
        """Every matching object (all pages), with the list's resourceVersion to watch from.

        Items get ``apiVersion`` and ``kind`` filled in: the server leaves them out of list items, and
        everything downstream (owner references, events) needs them.
        """
        query: dict[str, str] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        path = resource.path(namespace=namespace)
        items: list[dict[str, Any]] = []
        continue_token = ""
        limit = self.settings.list_page_size
        while True:
            page_query = dict(query)
            if limit:
                page_query["limit"] = str(limit)
            if continue_token:
                page_query["continue"] = continue_token
            try:
                page = await self._json("GET", path, query=page_query, verb="list", resource=resource)
            except Gone:
                if not continue_token:
                    raise
                # The continue token outlived the server's history: start over in one unpaged list.
                logger.info("list of %s: continue token expired, listing again without pages", resource)
                items, continue_token, limit = [], "", 0
                continue
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            continue_token = meta.get("continue") or ""
            if not continue_token:
                for item in items:
                    item.setdefault("apiVersion", resource.api_version)
                    item.setdefault("kind", resource.kind)
                return ObjectList(items=items, resource_version=str(meta.get("resourceVersion", "")))

    async def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
        field_validation: str | None = None,
    ) -> dict[str, Any]:
        """Create an object; :class:`~kubedl_py.kube.errors.AlreadyExists` when the name is taken.
        ``field_validation="Strict"``: a field the server does not know is a BadRequest naming it (without
        it, the server drops such a field and at most warns)."""
        namespace = namespace or _meta(body).get("namespace")
        path = resource.path(namespace=namespace)
        query = _writes(field_manager)
        if field_validation:
            query["fieldValidation"] = field_validation
        return await self._json("POST", path, body=body, query=query, verb="create", resource=resource)

    async def replace(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PUT the whole object; with ``metadata.resourceVersion`` set, a stale copy gets Conflict."""
        meta = _meta(body)
        namespace = namespace or meta.get("namespace")
        path = resource.path(namespace=namespace, name=str(meta["name"]), subresource=subresource)
        verb = "replace" if subresource is None else f"replace_{subresource}"
        return await self._json("PUT", path, body=body, query=_writes(field_manager), verb=verb, resource=resource)

    async def replace_status(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """PUT the ``/status`` subresource (only ``status`` changes; the rest of ``body`` is ignored)."""
        return await self.replace(resource, body, namespace=namespace, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """PATCH an object: a JSON merge patch by default; ``"json"`` (a list of ops), ``"strategic"``,
        ``"apply"`` (server-side apply; needs ``field_manager``) on request."""
        if patch_type == "json" and isinstance(patch, Mapping):
            raise TypeError("a JSON patch is a list of operations")
        query = _writes(field_manager)
        if patch_type == "apply" and force:
            query["force"] = "true"
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        verb = "patch" if subresource is None else f"patch_{subresource}"
        return await self._json(
            "PATCH",
            path,
            body=patch,
            query=query,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            verb=verb,
            resource=resource,
        )

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
    ) -> dict[str, Any]:
        """PATCH the ``/status`` subresource (a merge patch by default)."""
        return await self.patch(resource, name, patch, namespace=namespace, patch_type=patch_type, subresource="status")

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Delete an object; ``uid``/``resource_version`` are preconditions (Conflict when they differ).

        Returns what the server answers: the object (still there with a deletionTimestamp while
        finalizers or graceful termination run) or a Status.
        """
        path = resource.path(namespace=namespace, name=name)
        body = _delete_options(propagation_policy, grace_period_seconds, uid, resource_version)
        return await self._json("DELETE", path, body=body, verb="delete", resource=resource)

    async def delete_collection(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        """Delete every matching object in one request."""
        query: dict[str, str] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        body = _delete_options(propagation_policy, grace_period_seconds, None, None)
        path = resource.path(namespace=namespace)
        return await self._json("DELETE", path, body=body, query=query, verb="delete_collection", resource=resource)

    # ------------------------------------------------------------------------------------------- watch

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        read_timeout: float | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream changes as :class:`WatchEvent` until the server ends the watch.

        The server ends it after ``timeout_seconds`` (settings default); the client gives up with
        :class:`~kubedl_py.kube.errors.TransportError` when nothing arrives for ``read_timeout`` seconds.
        An ERROR event is raised as its error class — notably :class:`~kubedl_py.kube.errors.Gone` when
        ``resource_version`` is too old, which means: re-list. Close it with ``contextlib.aclosing``.
        """
        server_timeout = self.settings.watch_timeout_seconds if timeout_seconds is None else timeout_seconds
        if read_timeout is None:
            read_timeout = server_timeout + self.settings.watch_read_slack
        query: dict[str, str] = {"watch": "true", "timeoutSeconds": str(server_timeout)}
        if allow_bookmarks:
            query["allowWatchBookmarks"] = "true"
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        timeout = aiohttp.ClientTimeout(total=None, connect=self.settings.connect_timeout, sock_read=read_timeout)
        path = resource.path(namespace=namespace)
        response = await self._send("GET", path, query=query, client_timeout=timeout, verb="watch", resource=resource)
        try:
            async for line in _lines(response, verb="watch", resource=resource):
                event = loads(line)
                kind = event.get("type", "")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    error = error_from_status(obj)
                    self._count_error("watch", resource, error.status)
                    raise error
                yield WatchEvent(kind, obj)
        finally:
            response.close()

    # -------------------------------------------------------------------------------------------- logs

    async def read_log(
        self,
        name: str,
        *,
        namespace: str,
        container: str | None = None,
        tail_lines: int | None = None,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
        previous: bool = False,
        timestamps: bool = False,
    ) -> str:
        """The log of a pod's container so far, as text."""
        query = _log_query(
            container=container,
            tail_lines=tail_lines,
            since_seconds=since_seconds,
            limit_bytes=limit_bytes,
            previous=previous,
            timestamps=timestamps,
            follow=False,
        )
        path = PODS.path(namespace=namespace, name=name, subresource="log")

        async def once() -> str:
            response = await self._send("GET", path, query=query, verb="log", resource=PODS)
            try:
                return (await response.read()).decode("utf-8", "replace")
            finally:
                response.close()

        return await self.retry.call(once, verb="log", resource=str(PODS))

    async def stream_log(
        self,
        name: str,
        *,
        namespace: str,
        container: str | None = None,
        tail_lines: int | None = None,
        since_seconds: int | None = None,
        previous: bool = False,
        timestamps: bool = False,
        follow: bool = True,
    ) -> AsyncGenerator[str, None]:
        """The log of a pod's container line by line (without newlines), following it while it runs."""
        query = _log_query(
            container=container,
            tail_lines=tail_lines,
            since_seconds=since_seconds,
            limit_bytes=None,
            previous=previous,
            timestamps=timestamps,
            follow=follow,
        )
        path = PODS.path(namespace=namespace, name=name, subresource="log")
        timeout = aiohttp.ClientTimeout(total=None, connect=self.settings.connect_timeout)
        response = await self._send("GET", path, query=query, client_timeout=timeout, verb="log", resource=PODS)
        try:
            async for line in _lines(response, verb="log", resource=PODS):
                yield line.decode("utf-8", "replace")
        finally:
            response.close()

    # --------------------------------------------------------------------------------------- transport

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Any other API call (``/version``, a subresource without a method here), JSON in and out."""
        return await self._json(
            method, path, query=query, body=body, content_type=content_type, verb=method.lower(), resource=None
        )

    async def _json(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        resource: Resource | None,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        data = None if body is None else dumps(body)

        async def once() -> dict[str, Any]:
            response = await self._send(
                method, path, query=query, data=data, content_type=content_type, verb=verb, resource=resource
            )
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._count_error(verb, resource, 0)
                raise TransportError(f"{method} {path}: reading the answer failed: {exc!r}") from exc
            finally:
                response.close()
            parsed = loads(raw) if raw else {}
            # Every answer of the API is a JSON object; anything else is a broken proxy or server.
            if not isinstance(parsed, dict):
                raise error_from_response(500, raw)
            return parsed

        return await self.retry.call(once, verb=verb, resource=str(resource) if resource else path)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        resource: Resource | None,
        query: Mapping[str, str] | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request; return the open response on 2xx, raise the mapped error otherwise."""
        if self.write_gate is not None and method != "GET":
            await self.write_gate.before_write()
        transport = self._require_transport()
        headers: dict[str, str] = {
            "Accept": "application/json",
            "User-Agent": self.settings.user_agent,
        }
        if data is not None:
            headers["Content-Type"] = content_type
        query_list: list[tuple[str, str]] = list((query or {}).items())
        # credentials that expire (exec plug-ins, service-account tokens) are renewed in here
        ssl_context = await transport.authorize(headers, query_list)
        url = transport.host + path
        if query_list:
            url += "?" + urlencode(query_list)
        timeout = client_timeout
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout, connect=self.settings.connect_timeout)
        sent_headers: Mapping[str, str] = headers
        if transport.fixed_headers:
            sent_headers = CIMultiDict(headers)
            sent_headers.extend(transport.fixed_headers)
        kwargs: dict[str, Any] = {
            "headers": sent_headers,
            "data": data,
            "timeout": timeout,
            **transport.request_options,
        }
        if ssl_context is not None:
            kwargs["ssl"] = ssl_context
        if method != "GET" and self.write_fence is not None and not _UNFENCED.get():
            self.write_fence()  # the last moment before the write leaves: after every wait above
        sent = time.monotonic()
        try:
            response = await transport.session.request(method, url, **kwargs)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._count_error(verb, resource, 0)
            server = transport.host
            if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno == errno.ECONNREFUSED:
                raise ConnectionRefused(f"{method} {path}: connection refused by {server}", server=server) from exc
            raise TransportError(f"{method} {path}: {exc!r}", server=server) from exc
        if response.status == 401:
            transport.unauthorized()
        self._count_request(verb, resource, response.status, time.monotonic() - sent)
        if response.status >= 400:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError):
                raw = b""
            finally:
                response.close()
            self._count_error(verb, resource, response.status)
            error: ApiError = error_from_response(
                response.status, raw, retry_after_header=response.headers.get("Retry-After")
            )
            logger.debug("%s %s -> %s", method, path, error)
            raise error
        return response

    def _count_request(self, verb: str, resource: Resource | None, code: int, seconds: float) -> None:
        if self.metrics is not None:
            name = str(resource) if resource else ""
            self.metrics.api_requests.labels(verb, name, str(code)).inc()
            self.metrics.api_request_duration.labels(verb, name).observe(seconds)

    def _count_error(self, verb: str, resource: Resource | None, code: int) -> None:
        if self.metrics is not None:
            self.metrics.api_errors.labels(verb, str(resource) if resource else "", str(code)).inc()

    def _count_retry(self, verb: str, resource: str) -> None:
        if self.metrics is not None:
            self.metrics.api_retries.labels(verb, resource).inc()


async def _lines(response: aiohttp.ClientResponse, *, verb: str, resource: Resource) -> AsyncGenerator[bytes, None]:
    """Split a streamed body into lines, mapping a cut or silent connection to TransportError."""
    buffer = bytearray()
    try:
        async for chunk in response.content.iter_any():
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[start:end]).strip()
                start = end + 1
                if line:
                    yield line
            del buffer[:start]
    except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
        raise TransportError(f"{verb} {resource}: stream broke: {exc!r}") from exc
    tail = bytes(buffer).strip()
    if tail:
        yield tail


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def _writes(field_manager: str | None) -> dict[str, str]:
    return {"fieldManager": field_manager} if field_manager else {}


def _delete_options(
    propagation_policy: str | None,
    grace_period_seconds: int | None,
    uid: str | None,
    resource_version: str | None,
) -> dict[str, Any] | None:
    options: dict[str, Any] = {}
    if propagation_policy:
        options["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
    if preconditions:
        options["preconditions"] = preconditions
    if not options:
        return None
    return {"apiVersion": "v1", "kind": "DeleteOptions", **options}


def _log_query(
    *,
    container: str | None,
    tail_lines: int | None,
    since_seconds: int | None,
    limit_bytes: int | None,
    previous: bool,
    timestamps: bool,
    follow: bool,
) -> dict[str, str]:
    query: dict[str, str] = {}
    if container:
        query["container"] = container
    if tail_lines is not None:
        query["tailLines"] = str(tail_lines)
    if since_seconds is not None:
        query["sinceSeconds"] = str(since_seconds)
    if limit_bytes is not None:
        query["limitBytes"] = str(limit_bytes)
    if previous:
        query["previous"] = "true"
    if timestamps:
        query["timestamps"] = "true"
    if follow:
        query["follow"] = "true"
    return query
