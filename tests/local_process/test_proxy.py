"""Service proxy over real loopback sockets: per-connection backend choice, half-close, refusal without a backend."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubedl_local.node.process import Backend, ServicePort, ServiceProxy
from tests.local_process.conftest import free_port, random_cluster_ip, wait_until

REPO = Path(__file__).resolve().parents[2]
SVC = ServicePort("ns", "svc", 80)


class Tagged:
    """A backend that answers each chunk with ``<tag>:<chunk>`` and says ``bye-<tag>`` after the client's EOF."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0

    async def start(self) -> Tagged:
        return await self.start_on(0)

    async def start_on(self, port: int) -> Tagged:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                writer.write(f"{self.tag}:".encode() + data)
                await writer.drain()
            writer.write(f"bye-{self.tag}".encode())
            await writer.drain()
        finally:
            writer.close()

    @property
    def backend(self) -> Backend:
        return Backend("127.0.0.1", self.port)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def backends() -> AsyncIterator[tuple[Tagged, Tagged]]:
    a, b = await Tagged("A").start(), await Tagged("B").start()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


class Routing:
    """The resolver under test's control: what it returns is what the kubelet's endpoints say now."""

    def __init__(self) -> None:
        self.backends: list[Backend] = []
        self.calls = 0

    async def __call__(self, sp: ServicePort) -> list[Backend]:
        assert sp == SVC
        self.calls += 1
        return list(self.backends)


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[ServiceProxy, Routing, tuple[str, int]]]:
    routing = Routing()
    p = ServiceProxy(routing, connect_timeout=1.0)
    ip = random_cluster_ip()
    addr = (ip, free_port(ip))
    await p.add_listener(SVC, *addr)
    try:
        yield p, routing, addr
    finally:
        await p.close()


async def opened(p: ServiceProxy, service: ServicePort = SVC) -> None:
    """Tell the proxy its backends changed (as the kubelet does) and wait until it accepts for ``service``."""
    p.backends_changed()
    await wait_until(lambda: p.is_open(service), deadline_s=5, what=f"{service} open")


async def roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, msg: bytes) -> bytes:
    writer.write(msg)
    await writer.drain()
    return await asyncio.wait_for(reader.read(65536), 5)


def test_any_127_address_is_bindable_without_configuration() -> None:
    ip = random_cluster_ip()
    with socket.socket() as s:
        s.bind((ip, 0))
        s.listen()
        with socket.create_connection(s.getsockname(), timeout=5):
            conn, _ = s.accept()
            conn.close()


async def test_repointed_backend_used_by_next_connection_only(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    p, routing, addr = proxy
    a, b = backends
    routing.backends = [a.backend]
    await opened(p)
    r1, w1 = await asyncio.open_connection(*addr)
    assert await roundtrip(r1, w1, b"x") == b"A:x"

    routing.backends = [b.backend]  # the Service's targetPort was re-pointed
    r2, w2 = await asyncio.open_connection(*addr)
    assert await roundtrip(r2, w2, b"y") == b"B:y"
    assert await roundtrip(r1, w1, b"z") == b"A:z", "established connection keeps its backend"
    assert p.stats.active == 2
    for w in (w1, w2):
        w.close()
        await w.wait_closed()


async def test_half_close_is_forwarded_both_ways(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    p, routing, addr = proxy
    routing.backends = [backends[0].backend]
    await opened(p)
    reader, writer = await asyncio.open_connection(*addr)
    writer.write(b"hello")
    writer.write_eof()  # the backend sees EOF, still answers, then closes
    assert await asyncio.wait_for(reader.read(), 5) == b"A:hellobye-A"
    writer.close()


async def test_large_transfer_is_intact(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    p, routing, addr = proxy
    routing.backends = [backends[0].backend]
    await opened(p)
    reader, writer = await asyncio.open_connection(*addr)
    payload = bytes(range(256)) * 40000  # 10 MB: exercises flow control (pause/resume)

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()

    sender = asyncio.create_task(send())
    got = await asyncio.wait_for(reader.read(), 20)
    await sender
    assert got.replace(b"A:", b"").removesuffix(b"bye-A") == payload
    writer.close()


async def closed_by_proxy(reader: asyncio.StreamReader) -> bool:
    """The proxy resets (or at least closes) a connection it cannot serve, within a short deadline."""
    try:
        async with asyncio.timeout(2):
            return await reader.read(10) == b""
    except ConnectionResetError:
        return True


async def test_no_endpoints_refuses_the_connection(proxy: tuple[ServiceProxy, Routing, tuple[str, int]]) -> None:
    p, routing, addr = proxy
    routing.backends = []
    p.backends_changed()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(*addr)
    assert not p.is_open(SVC) and p.stats.accepted == 0 and p.stats.rejected == 0


async def test_a_client_is_refused_until_the_backend_listens_then_served(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]],
) -> None:
    """As behind kube-proxy: connecting before the backend's port is bound gives ECONNREFUSED (which clients
    retry quietly), never an accepted connection that is then reset (which torch reports as a crash)."""
    p, routing, addr = proxy
    port = free_port()
    routing.backends = [Backend("127.0.0.1", port)]
    p.backends_changed()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(*addr)
    late = await Tagged("L").start_on(port)
    try:
        # No endpoint change is announced: the proxy's own retry loop finds the backend.
        served: list[bytes] = []

        async def try_once() -> bool:
            try:
                reader, writer = await asyncio.open_connection(*addr)
            except ConnectionRefusedError:
                return False  # refused, never reset, until then
            served.append(await roundtrip(reader, writer, b"hi"))
            writer.close()
            return True

        await wait_until(try_once, deadline_s=5, what="the proxy to open once the backend listens")
        assert served == [b"L:hi"]
        assert p.stats.rejected == 0, "no client was accepted and then reset"
    finally:
        late.close()


async def test_the_proxy_opens_without_ever_connecting_to_the_backend(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    """Whether a backend listens is read from the kernel's socket table, as kube-proxy never connects to a
    backend: a probe connection closing without a byte fails XGBoost's tracker (it takes it for a worker)."""
    p, routing, addr = proxy
    a, _ = backends
    routing.backends = [a.backend]
    p.backends_changed()
    await opened(p)
    assert a.connections == 0, "the proxy connected to the backend to find out whether it listens"
    reader, writer = await asyncio.open_connection(*addr)
    assert await roundtrip(reader, writer, b"x") == b"A:x"
    writer.close()
    assert a.connections == 1


async def test_a_backend_gone_resets_one_connection_then_refuses_and_a_repointed_port_is_used(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    p, routing, addr = proxy
    a, b = backends
    routing.backends = [a.backend]
    await opened(p)
    a.close()
    # The listener was open: the one connection that finds the backend gone is reset (the kernel had
    # accepted it), and the listener closes, so the next ones are refused.
    reader, writer = await asyncio.open_connection(*addr)
    assert await closed_by_proxy(reader)
    writer.close()
    assert p.stats.rejected == 1
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(*addr)
    # The Service is re-pointed to B's port (a failover): the next connection goes there.
    routing.backends = [b.backend]
    await opened(p)
    reader, writer = await asyncio.open_connection(*addr)
    assert await roundtrip(reader, writer, b"again") == b"B:again"
    writer.close()


async def test_refused_backend_falls_through_to_next(
    proxy: tuple[ServiceProxy, Routing, tuple[str, int]], backends: tuple[Tagged, Tagged]
) -> None:
    p, routing, addr = proxy
    routing.backends = [Backend("127.0.0.1", free_port()), backends[1].backend]
    await opened(p)
    reader, writer = await asyncio.open_connection(*addr)
    assert await roundtrip(reader, writer, b"q") == b"B:q"
    writer.close()


async def test_listeners_follow_services(backends: tuple[Tagged, Tagged]) -> None:
    p = ServiceProxy(lambda _sp: [backends[0].backend])
    ip = random_cluster_ip()
    port1, port2 = free_port(ip), free_port(ip)
    other = ServicePort("ns", "other", 81)
    try:
        failed = await p.set_listeners({SVC: (ip, port1), other: (ip, port2)})
        assert failed == {} and set(p.listeners()) == {SVC, other}
        await opened(p, other)
        await p.set_listeners({SVC: (ip, port1)})
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(ip, port2)
        await opened(p)
        reader, writer = await asyncio.open_connection(ip, port1)
        assert await roundtrip(reader, writer, b"k") == b"A:k"
        writer.close()
        # A port taken by someone else is reported, not fatal for the other listeners.
        with socket.socket() as squatter:
            squatter.bind((ip, 0))
            squatter.listen()
            taken = squatter.getsockname()[1]
            failed = await p.set_listeners({SVC: (ip, port1), other: (ip, taken)})
            assert set(failed) == {other}
    finally:
        await p.close()


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_proxy.py"), "--mb", "64", "--conns", "200"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    ).stdout
    assert "MB/s" in out and "connections/s" in out, out
