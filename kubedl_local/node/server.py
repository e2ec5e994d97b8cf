"""The kubelet's HTTPS endpoint: what ``kubectl logs`` reaches through the API server.

Why a real endpoint: kube-apiserver serves ``pods/{name}/log`` by connecting to
``https://<node InternalIP>:<status.daemonEndpoints.kubeletEndpoint.Port>/containerLogs/{ns}/{pod}/{container}``
with its kubelet client certificate, and so does the embedded API server, so logs work the same way
against either. One listener per node address (simulated nodes each have their own IP); a request is
answered for the node whose address it arrived on, so a pod on another node is unknown here, as on a real
kubelet (404).

TLS as the kubelet: a serving certificate from the caller (PEM), or a self-signed one made in memory; with a
client CA, a client certificate signed by it is required (the handshake fails without one); without, any
client is served (the kubelet's anonymous mode). Answers: 200 text (chunked when following); 404 "pod ...
does not exist" / "container ... not found in pod ..."; 400 for a container that has not started, for
``previous`` without a previous instance, and for malformed parameters.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from kubedl_local import pki
from kubedl_local.node.execs import ExecError, ExecRequest, ExecTarget, serve
from kubedl_local.node.logs import LogError, LogQuery, LogStream, render

log = logging.getLogger(__name__)

#: ``(local address, namespace, pod, container, previous) -> LogStream`` (raises LogError)
LogProvider = Callable[[str, str, str, str, bool], LogStream]
#: ``(local address, namespace, pod, container) -> ExecTarget`` (raises ExecError)
ExecProvider = Callable[[str, str, str, str], ExecTarget]


@dataclass(frozen=True)
class KubeletTLS:
    """The kubelet endpoint's TLS material: ``serving`` (None: self-signed), ``client_ca_pem`` (None: any
    client is served). Build from files with :meth:`from_files`."""

    serving: pki.KeyPair | None = None
    client_ca_pem: bytes | None = None

    @classmethod
    def from_files(
        cls, cert_file: str | None = None, key_file: str | None = None, client_ca_file: str | None = None
    ) -> KubeletTLS:
        if (cert_file is None) != (key_file is None):
            raise ValueError("give both the kubelet serving certificate and its key, or neither")
        serving = pki.read_pair(cert_file, key_file) if cert_file and key_file else None
        ca = Path(client_ca_file).read_bytes() if client_ca_file else None
        return cls(serving, ca)


class KubeletServer:
    """One aiohttp app serving ``/containerLogs``, ``/exec`` (execs.py) and ``/healthz`` on any number of node
    addresses."""

    def __init__(
        self,
        provider: LogProvider,
        tls: KubeletTLS,
        san_ips: list[str],
        name: str,
        *,
        exec_provider: ExecProvider | None = None,
    ) -> None:
        self._provider = provider
        self._exec_provider = exec_provider
        pair = tls.serving or pki.self_signed(name, [*san_ips, name, "localhost"])
        self.ssl = pki.server_context(pair, client_ca_pem=tls.client_ca_pem)
        self._runner: web.AppRunner | None = None
        self._sites: dict[tuple[str, int], web.BaseSite] = {}
        self._streams: set[asyncio.Task[object]] = set()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_route("*", "/exec/{namespace}/{pod}/{container}", self._exec)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()

    async def listen(self, ip: str, port: int) -> int:
        """Serve on ``ip:port`` (0: any free port); returns the port."""
        assert self._runner is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.setblocking(False)
        site = web.SockSite(self._runner, sock, ssl_context=self.ssl)
        await site.start()
        bound = int(sock.getsockname()[1])
        self._sites[(ip, bound)] = site
        return bound

    async def unlisten(self, ip: str, port: int) -> None:
        site = self._sites.pop((ip, port), None)
        if site is not None:
            await site.stop()

    async def stop(self) -> None:
        for t in list(self._streams):
            t.cancel()
        if self._streams:
            await asyncio.gather(*self._streams, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._sites.clear()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        local_ip = str(sockname[0]) if sockname else ""
        m = request.match_info
        try:
            if self._exec_provider is None:
                raise ExecError(400, "exec is not supported on this node")
            exec_request = ExecRequest.parse(request.query, request.query.getall("command", []))
            target = self._exec_provider(local_ip, m["namespace"], m["pod"], m["container"])
        except ExecError as e:
            log.debug("exec %s on %s: %s %s", request.path, local_ip, e.status, e.message)
            return web.Response(status=e.status, text=e.message)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.Response(status=400, text="exec needs a WebSocket upgrade (v5.channel.k8s.io)")
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            return await serve(request, target, exec_request)
        finally:
            self._streams.discard(task)

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        local_ip = str(sockname[0]) if sockname else ""
        m = request.match_info
        try:
            q = LogQuery.parse(request.query)
            stream = self._provider(local_ip, m["namespace"], m["pod"], m["container"], q.previous)
        except LogError as e:
            log.debug("containerLogs %s on %s: %s %s", request.path, local_ip, e.status, e.message)
            return web.Response(status=e.status, text=e.message)
        if not q.follow:
            body = b"".join([chunk async for chunk in render(stream, q)])
            return web.Response(body=body, content_type="text/plain")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            await resp.prepare(request)
            async for chunk in render(stream, q):
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._streams.discard(task)
        return resp


def client_ssl(pair: pki.KeyPair | None, ca_pem: bytes | None = None) -> ssl.SSLContext:
    """How the API server side connects to a kubelet (re-exported for tests and tools)."""
    return pki.client_context(pair, ca_pem=ca_pem)
