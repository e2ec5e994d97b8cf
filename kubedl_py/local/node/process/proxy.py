"""Userspace Service proxy: accept on clusterIP:port, pick the backend per connection, splice bytes.

Why per-connection lookup: the host-network feature re-points a Service's ``targetPort`` to a failed-over
pod's new host port. Asking the resolver for the backend on *every new connection* makes that change take
effect for the next connection, while connections already established keep their backend — the behaviour of
kube-proxy. The resolver returns candidates in preference order; a refused or timed-out connect falls
through to the next one, and with none left (or no endpoints at all) the client connection is reset at
once, the closest a userspace proxy can get to the "connection refused" an iptables REJECT gives.

Why asyncio *protocols* for splicing: ``data_received`` -> ``transport.write`` does no per-chunk coroutine
scheduling, reads up to 256 KiB per syscall, and flow control maps directly onto ``pause_writing`` /
``resume_writing`` (a slow receiver pauses reading on the other side, so memory stays bounded). Half-close is
forwarded (``eof_received`` -> ``write_eof``); the pair closes when both directions have ended or on any
error (an error on one side aborts the other, so a reset propagates as a reset).

ClusterIPs in 127.0.0.0/8 need no address configuration: Linux treats the whole /8 as local on ``lo``, so
binding 127.1.2.3 just works (verified in the tests). Pods in their own network namespace reach the same
clusterIPs because the proxy also opens each listener inside every attached pod netns (see ``netns.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .netns import bind_listener

log = logging.getLogger(__name__)


class ServicePort(NamedTuple):
    """Identifies one listener: a port of a Service. Passed to the resolver."""

    namespace: str
    name: str
    port: int


class Backend(NamedTuple):
    ip: str
    port: int


#: Given the Service port a client connected to, return the backends to try, in order (empty: no endpoints).
Resolver = Callable[[ServicePort], Sequence[Backend] | Awaitable[Sequence[Backend]]]


@dataclass
class ProxyStats:
    accepted: int = 0
    active: int = 0
    rejected: int = 0  # no endpoints, or every backend refused
    bytes_up: int = 0  # client -> backend
    bytes_down: int = 0  # backend -> client


class _Side(asyncio.Protocol):
    """One socket of a spliced pair; forwards what it reads to its peer's transport."""

    def __init__(self, conn: _Splice, upstream: bool) -> None:
        self.conn = conn
        self.upstream = upstream  # True for the client side (its data goes up to the backend)
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.upstream:
            self.conn.client_connected(self)

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        if self.upstream:
            self.conn.stats.bytes_up += len(data)
        else:
            self.conn.stats.bytes_down += len(data)
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if (
            peer is not None
            and peer.transport is not None
            and not peer.transport.is_closing()
            and peer.transport.can_write_eof()
        ):
            peer.transport.write_eof()
        if peer is None or peer.eof:
            self.conn.close()  # both directions are done; close() still flushes buffered data
            return False
        return True  # keep our write side open: the peer may still send

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.conn.abort()
        else:
            self.conn.close()


class _Splice:
    """A client connection and the backend connection it was paired with."""

    def __init__(self, proxy: ServiceProxy, service: ServicePort) -> None:
        self.proxy = proxy
        self.service = service
        self.stats = proxy.stats
        self.client: _Side | None = None
        self.backend: _Side | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.done = False

    def client_connected(self, side: _Side) -> None:
        self.client = side
        assert side.transport is not None
        side.transport.pause_reading()  # buffered in the kernel until the backend is connected
        self.stats.accepted += 1
        self.stats.active += 1
        self.proxy._splices.add(self)
        self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        assert self.client is not None and self.client.transport is not None
        try:
            backends = await self.proxy._resolve(self.service)
        except Exception:
            log.exception("resolver failed for %s/%s:%s", *self.service)
            backends = []
        loop = asyncio.get_running_loop()
        for b in backends:
            try:
                async with asyncio.timeout(self.proxy.connect_timeout):
                    _, side = await loop.create_connection(lambda: _Side(self, upstream=False), b.ip, b.port)
            except (OSError, TimeoutError) as e:
                log.debug("%s/%s:%s -> %s:%s failed: %s", *self.service, b.ip, b.port, e)
                continue
            if self.done:  # the client went away while we were connecting
                assert side.transport is not None
                side.transport.close()
                return
            self.backend = side
            side.peer, self.client.peer = self.client, side
            self.client.transport.resume_reading()
            return
        if not backends:
            log.info("%s/%s:%s has no endpoints; resetting client connection", *self.service)
        else:
            log.info("%s/%s:%s: no backend of %s accepted; resetting client", *self.service, list(backends))
        self.stats.rejected += 1
        self.abort()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.stats.active -= 1
            self.proxy._splices.discard(self)
            if self.connecting is not None and not self.connecting.done():
                self.connecting.cancel()

    def close(self) -> None:
        self._finish()
        for side in (self.client, self.backend):
            if side is not None and side.transport is not None:
                side.transport.close()

    def abort(self) -> None:
        self._finish()
        for side in (self.client, self.backend):
            if side is not None and side.transport is not None:
                side.transport.abort()


class _Listener:
    def __init__(self, service: ServicePort, ip: str, port: int) -> None:
        self.service = service
        self.ip = ip
        self.port = port
        self.servers: dict[str | None, asyncio.Server] = {}  # netns name (None = host) -> server


class ServiceProxy:
    """Listeners for Service ports, in the host netns and in every attached pod netns.

    ``set_listeners({ServicePort: (clusterIP, port)})`` reconciles to the desired set whenever Services
    change; the backends are *not* part of it — they come from ``resolver`` on each new connection.
    """

    def __init__(self, resolver: Resolver, *, connect_timeout: float = 3.0) -> None:
        self._resolver = resolver
        self.connect_timeout = connect_timeout
        self.stats = ProxyStats()
        self._listeners: dict[ServicePort, _Listener] = {}
        self._netns: set[str] = set()
        self._splices: set[_Splice] = set()

    async def _resolve(self, service: ServicePort) -> Sequence[Backend]:
        result = self._resolver(service)
        if inspect.isawaitable(result):
            result = await result
        return [Backend(*b) for b in result]

    async def _serve(self, listener: _Listener, netns: str | None) -> None:
        sock = bind_listener(listener.ip, listener.port, netns=netns)
        loop = asyncio.get_running_loop()

        def factory() -> _Side:
            return _Side(_Splice(self, listener.service), upstream=True)

        listener.servers[netns] = await loop.create_server(factory, sock=sock)

    async def add_listener(self, service: ServicePort, ip: str, port: int) -> None:
        """Listen on ``ip:port`` for ``service`` (raises ``OSError`` if the host address is taken)."""
        old = self._listeners.get(service)
        if old is not None:
            if (old.ip, old.port) == (ip, port):
                return
            await self.remove_listener(service)
        listener = _Listener(service, ip, port)
        await self._serve(listener, None)
        self._listeners[service] = listener
        for ns in self._netns:
            try:
                await self._serve(listener, ns)
            except OSError as e:
                log.error("cannot listen on %s:%s in pod netns %s: %s", ip, port, ns, e)
        log.info("proxy listening for %s/%s:%s on %s:%s", *service, ip, port)

    async def remove_listener(self, service: ServicePort) -> None:
        """Stop accepting for ``service``; established connections continue until they end."""
        listener = self._listeners.pop(service, None)
        if listener is None:
            return
        for server in listener.servers.values():
            server.close()
        listener.servers.clear()

    async def set_listeners(self, desired: Mapping[ServicePort, tuple[str, int]]) -> dict[ServicePort, OSError]:
        """Reconcile to exactly ``desired``; returns the ports that could not be bound (and logs them)."""
        failed: dict[ServicePort, OSError] = {}
        for service in [s for s in self._listeners if s not in desired]:
            await self.remove_listener(service)
        for service, (ip, port) in desired.items():
            try:
                await self.add_listener(service, ip, port)
            except OSError as e:
                log.error("cannot listen on %s:%s for %s/%s:%s: %s", ip, port, *service, e)
                failed[service] = e
        return failed

    async def attach_netns(self, netns: str) -> None:
        """Open every listener inside pod network namespace ``netns`` too (call after creating it)."""
        if netns in self._netns:
            return
        self._netns.add(netns)
        for listener in self._listeners.values():
            try:
                await self._serve(listener, netns)
            except OSError as e:
                log.error("cannot listen on %s:%s in pod netns %s: %s", listener.ip, listener.port, netns, e)

    async def detach_netns(self, netns: str) -> None:
        """Close the listeners in ``netns`` (call before deleting the netns)."""
        self._netns.discard(netns)
        for listener in self._listeners.values():
            server = listener.servers.pop(netns, None)
            if server is not None:
                server.close()

    def listeners(self) -> dict[ServicePort, tuple[str, int]]:
        return {s: (lst.ip, lst.port) for s, lst in self._listeners.items()}

    async def close(self) -> None:
        """Stop all listeners and reset all connections."""
        for service in list(self._listeners):
            await self.remove_listener(service)
        self._netns.clear()
        for splice in list(self._splices):
            splice.abort()
        # Let the aborted transports run their connection_lost callbacks before the loop may close.
        await asyncio.sleep(0)
