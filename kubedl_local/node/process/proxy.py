"""Userspace Service proxy: accept on clusterIP:port, pick the backend per connection, splice bytes.

Why per-connection lookup: the host-network feature re-points a Service's ``targetPort`` to a failed-over
pod's new host port. Asking the resolver for the backend on *every new connection* makes that change take
effect for the next connection, while connections already established keep their backend — the behaviour of
kube-proxy. The resolver returns candidates in preference order; a refused or timed-out connect falls
through to the next one.

Why a Service port's listener is **closed while no backend accepts**: a real cluster's kube-proxy REJECTs a
connection to a Service with no reachable endpoint, and the client sees ECONNREFUSED -- which every client
library treats as "not up yet, try again" (torch's TCPStore retries quietly). A userspace proxy cannot
refuse a connection the kernel has already accepted: the best it can do then is reset it, and a reset
after a successful connect reads as a crash (torch printed ~30 lines of C++ stack trace for ECONNRESET
while the master's port was not bound yet). So the refusal is made before the kernel accepts anything:

- A listener starts **closed** (no socket on clusterIP:port, so a connect is refused by the kernel) and is
  **opened** only once a backend accepts a TCP connect from the proxy (a probe, as a TCP readiness probe
  does: connect, then close at once). The first probe runs as soon as the listener is added.
- While closed it probes on every endpoint change (:meth:`ServiceProxy.backends_changed`, also called on
  each :meth:`ServiceProxy.set_listeners`) and in a short retry loop (every :data:`PROBE_MIN_INTERVAL`
  seconds, doubling to :data:`PROBE_MAX_INTERVAL` while nothing answers).
- While open, a connection for which no backend accepts is reset (it was already accepted), and the
  listener **closes again**, so the next client is refused until a probe finds a backend.

Trade-offs, chosen knowingly:

- After a backend starts listening, clients keep being refused until the next probe (at most
  ``PROBE_MAX_INTERVAL``, sooner after an endpoint change); refused clients retry, so this costs latency,
  not failures. A client connecting right after a backend went away is reset once (the one connection
  that finds out), not refused.
- Every backend sees the probes as connections that close without data. Servers handle that (TCP
  readiness probes do the same); a server that logs each connection logs them.
- Services nobody listens behind (a PyTorch worker's, say) are probed for as long as they stay closed, at
  the slow end of the loop: one loopback connect attempt per ``PROBE_MAX_INTERVAL`` each.
- While closed the address is not held: the proxy binds again when it opens (``SO_REUSEADDR``); a port
  taken meanwhile by someone else is reported by the open, as a taken port is at :meth:`add_listener`.

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
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .netns import bind_listener, run_in_netns

log = logging.getLogger(__name__)

#: first delay of a closed listener's probe loop, seconds; it doubles while no backend accepts
PROBE_MIN_INTERVAL = 0.05
#: cap of that delay, seconds: the longest a client is refused after its backend started listening
PROBE_MAX_INTERVAL = 0.5
#: how long one probe connect may take before that backend counts as not accepting
PROBE_CONNECT_TIMEOUT = 1.0


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
    rejected: int = 0  # accepted, then reset: no backend accepted (the listener closes then)
    probes: int = 0  # TCP connects to backends while a listener was closed
    opened: int = 0  # closed -> open transitions (a backend accepted a probe)
    closed: int = 0  # open -> closed transitions (a connection found no backend)
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

    def __init__(self, proxy: ServiceProxy, listener: _Listener) -> None:
        self.proxy = proxy
        self.listener = listener
        self.service = listener.service
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
            log.info("%s/%s:%s has no endpoints; resetting client connection, refusing the next", *self.service)
        else:
            log.info(
                "%s/%s:%s: no backend of %s accepted; resetting client, refusing the next",
                *self.service,
                list(backends),
            )
        self.stats.rejected += 1
        self.abort()
        self.proxy._no_backend(self.listener)

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


_LISTEN = "0A"  # TCP state in /proc/net/tcp


def _proc_address(hexed: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(hexed)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _is_local(ip: str) -> bool:
    """Is ``ip`` an address of this thread's network namespace? (Binding it says so, without any traffic.)"""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def listening(ip: str, port: int) -> bool | None:
    """Does a socket LISTEN on ``ip:port`` (or on the wildcard) in this thread's network namespace? None when
    ``ip`` is not an address of this namespace (ask the namespace it belongs to)."""
    if not _is_local(ip):
        return None
    wanted = ipaddress.ip_address(ip)
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/thread-self/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != _LISTEN:
                continue
            host, _, hexport = fields[1].partition(":")
            if int(hexport, 16) != port:
                continue
            local = _proc_address(host)
            mapped = local.ipv4_mapped if isinstance(local, ipaddress.IPv6Address) else None
            # A wildcard takes its own family's addresses; "::" (dual-stack) IPv4's too.
            wildcard = local.is_unspecified and local.version in (wanted.version, 6)
            if wildcard or wanted in (local, mapped):
                return True
    return False


class _Listener:
    """One Service port: open (sockets listening in the host and every pod netns) or closed (none: refused)."""

    def __init__(self, service: ServicePort, ip: str, port: int) -> None:
        self.service = service
        self.ip = ip
        self.port = port
        self.servers: dict[str | None, asyncio.Server] = {}  # netns name (None = host) -> server
        self.prober: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()  # an endpoint change: probe now
        self.opened = asyncio.Event()  # set while open

    @property
    def open(self) -> bool:
        return None in self.servers


class ServiceProxy:
    """Listeners for Service ports, in the host netns and in every attached pod netns.

    ``set_listeners({ServicePort: (clusterIP, port)})`` reconciles to the desired set whenever Services
    change; the backends are *not* part of it — they come from ``resolver`` on each new connection and
    each probe. A listener is open only while a backend accepts (see the module docstring).
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

    # ---- open and closed ------------------------------------------------------------------------------

    async def _serve(self, listener: _Listener, netns: str | None) -> None:
        sock = bind_listener(listener.ip, listener.port, netns=netns)
        loop = asyncio.get_running_loop()

        def factory() -> _Side:
            return _Side(_Splice(self, listener), upstream=True)

        listener.servers[netns] = await loop.create_server(factory, sock=sock)

    async def _open(self, listener: _Listener) -> None:
        """Listen in the host netns (``OSError`` if the address is taken) and in every pod netns."""
        if listener.open:
            return
        await self._serve(listener, None)
        for ns in self._netns:
            try:
                await self._serve(listener, ns)
            except OSError as e:
                log.error("cannot listen on %s:%s in pod netns %s: %s", listener.ip, listener.port, ns, e)
        self.stats.opened += 1
        listener.opened.set()
        log.debug("proxy %s/%s:%s open: a backend accepts", *listener.service)

    def _close(self, listener: _Listener) -> None:
        listener.opened.clear()
        for server in listener.servers.values():
            server.close()
        listener.servers.clear()

    def _no_backend(self, listener: _Listener) -> None:
        """A connection found no backend: refuse the next ones until a probe finds one."""
        if self._listeners.get(listener.service) is not listener or not listener.open:
            return
        self._close(listener)
        self.stats.closed += 1
        self._start_prober(listener)

    def _start_prober(self, listener: _Listener) -> None:
        if listener.prober is None or listener.prober.done():
            listener.prober = asyncio.get_running_loop().create_task(
                self._probe_until_open(listener), name=f"proxy-probe {listener.service.name}:{listener.service.port}"
            )

    async def _listens(self, ip: str, port: int) -> bool | None:
        """Whether the backend listens, read from the kernel's socket table of the namespace that owns ``ip``
        (the host's, else an attached pod netns): no connection is made. None when no namespace we know owns
        ``ip`` or it cannot be read (not root)."""
        found = listening(ip, port)
        for netns in sorted(self._netns):
            if found is not None:
                break
            try:
                found = await asyncio.to_thread(run_in_netns, netns, lambda: listening(ip, port))
            except OSError:
                return None
        return found

    async def _backend_accepts(self, listener: _Listener) -> bool:
        """Does any backend of the Service port accept a TCP connection now?

        Asked of the kernel's socket table where it can be (a passive look, as kube-proxy never connects to
        a backend either): a probe connection that closes without a byte breaks servers that take every
        connection for a peer (XGBoost's Rabit tracker fails its handshake and the job). Only a backend in a
        namespace we cannot look into is probed with a TCP connect, closed again at once.
        """
        try:
            backends = await self._resolve(listener.service)
        except Exception:
            log.exception("resolver failed for %s/%s:%s", *listener.service)
            return False
        for b in backends:
            self.stats.probes += 1
            listens = await self._listens(b.ip, b.port)
            if listens is not None:
                if listens:
                    return True
                continue
            try:
                async with asyncio.timeout(PROBE_CONNECT_TIMEOUT):
                    _, writer = await asyncio.open_connection(b.ip, b.port)
            except (OSError, TimeoutError):
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False

    async def _probe_until_open(self, listener: _Listener) -> None:
        delay = PROBE_MIN_INTERVAL
        while self._listeners.get(listener.service) is listener and not listener.open:
            listener.wake.clear()
            if await self._backend_accepts(listener):
                if self._listeners.get(listener.service) is not listener or listener.open:
                    return
                try:
                    await self._open(listener)
                except OSError as e:
                    log.error(
                        "cannot listen on %s:%s for %s/%s:%s: %s", listener.ip, listener.port, *listener.service, e
                    )
                else:
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listener.wake.wait(), delay)
            delay = PROBE_MIN_INTERVAL if listener.wake.is_set() else min(delay * 2, PROBE_MAX_INTERVAL)

    def backends_changed(self) -> None:
        """Endpoints (or targetPorts) may have changed: closed listeners probe their backends now."""
        for listener in self._listeners.values():
            listener.wake.set()

    # ---- the set of listeners -------------------------------------------------------------------------

    async def add_listener(self, service: ServicePort, ip: str, port: int) -> None:
        """Serve ``service`` on ``ip:port``: closed (refusing) until a probe finds a backend that accepts,
        which starts at once. Raises ``OSError`` if the host address is taken."""
        old = self._listeners.get(service)
        if old is not None:
            if (old.ip, old.port) == (ip, port):
                return
            await self.remove_listener(service)
        # Closed, but the address must be ours to open later: find a conflict now, as an open would.
        bind_listener(ip, port).close()
        listener = _Listener(service, ip, port)
        self._listeners[service] = listener
        self._start_prober(listener)
        log.info("proxy serving %s/%s:%s on %s:%s", *service, ip, port)

    async def remove_listener(self, service: ServicePort) -> None:
        """Stop accepting for ``service``; established connections continue until they end."""
        listener = self._listeners.pop(service, None)
        if listener is None:
            return
        self._close(listener)
        if listener.prober is not None:
            listener.prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener.prober

    async def set_listeners(self, desired: Mapping[ServicePort, tuple[str, int]]) -> dict[ServicePort, OSError]:
        """Reconcile to exactly ``desired``; returns the ports that could not be bound (and logs them).

        Called whenever Services change, so the closed listeners also probe again (targetPorts may have)."""
        failed: dict[ServicePort, OSError] = {}
        for service in [s for s in self._listeners if s not in desired]:
            await self.remove_listener(service)
        for service, (ip, port) in desired.items():
            try:
                await self.add_listener(service, ip, port)
            except OSError as e:
                log.error("cannot listen on %s:%s for %s/%s:%s: %s", ip, port, *service, e)
                failed[service] = e
        self.backends_changed()
        return failed

    async def attach_netns(self, netns: str) -> None:
        """Open every open listener inside pod network namespace ``netns`` too (call after creating it)."""
        if netns in self._netns:
            return
        self._netns.add(netns)
        for listener in self._listeners.values():
            if not listener.open:
                continue  # opened there too when it opens
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

    def is_open(self, service: ServicePort) -> bool:
        """Whether ``service``'s listener accepts now (a backend accepted), or refuses."""
        listener = self._listeners.get(service)
        return listener is not None and listener.open

    async def wait_open(self, service: ServicePort) -> None:
        """Return once ``service``'s listener is open (bound it with ``asyncio.timeout``)."""
        await self._listeners[service].opened.wait()

    async def close(self) -> None:
        """Stop all listeners and reset all connections."""
        for service in list(self._listeners):
            await self.remove_listener(service)
        self._netns.clear()
        for splice in list(self._splices):
            splice.abort()
        # Let the aborted transports run their connection_lost callbacks before the loop may close.
        await asyncio.sleep(0)
