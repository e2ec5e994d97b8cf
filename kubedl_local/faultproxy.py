"""Fault injection and request accounting in front of any API server, as an HTTP proxy.

Why: reliability tests make the API server misbehave (500s, 429s, cut watches, 410 on resume) and count
what clients sent. The embedded server has those hooks inside; a real kube-apiserver does not, so the same
:class:`~kubedl_local.faults.Faults` rules and :class:`~kubedl_local.faults.RequestLog` run here, in a
proxy the clients under test talk to, and everything else goes through to the real server unchanged.

Identity is preserved: a request's ``Authorization`` header (a service account's bearer token) is forwarded
as it came, so the real server authenticates and authorizes the client under test, not the proxy. Only a
request without one is sent with the proxy's own credentials (the administrator's client certificate).

Requests are classified the way kube-apiserver's RequestInfoFactory does (verb, resource, subresource,
namespace, name), from the URL alone, so rules and the log speak the same terms on both tiers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import time
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from kubedl_local.faults import Faults, RequestInfo, RequestLog, RequestRecord, verb_of

log = logging.getLogger(__name__)

#: subresources of a Namespace itself (``/api/v1/namespaces/<name>/status``), not namespaced resources
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
#: hop-by-hop headers a proxy must not forward
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def request_info(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """Verb, group, resource, subresource, namespace and name of an API request, from its URL."""
    parts = [part for part in path.split("/") if part]
    if not parts or parts[0] not in ("api", "apis"):
        return RequestInfo(method, path, "")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    group = "" if parts[0] == "api" else (parts[1] if len(parts) > 1 else "")
    namespace = ""
    if len(rest) > 1 and rest[0] == "namespaces":
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return RequestInfo(method, path, "", group)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name:
        namespace = ""
    verb = verb_of(method, named=bool(name), query=query)
    return RequestInfo(method, path, verb, group, resource, subresource, namespace, name)


class FaultProxy:
    """Serve on ``127.0.0.1:<port>`` over plain HTTP, forwarding to ``upstream`` (HTTPS).

    ``ssl_context`` trusts the upstream's CA and carries the proxy's own client certificate, used only for
    requests without credentials of their own: a client certificate is authenticated before a bearer token,
    so presenting it beside a client's token would make every client the administrator. ``trust`` (the
    upstream's CA alone) carries the others."""

    def __init__(
        self, upstream: str, ssl_context: ssl.SSLContext, trust: ssl.SSLContext, *, faults: Faults | None = None
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.ssl_context = ssl_context
        self.trust = trust
        self.faults = faults or Faults()
        self.request_log = RequestLog()
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None  # as the proxy (administrator)
        self._passthrough: aiohttp.ClientSession | None = None  # clients' own credentials
        self._streams: set[asyncio.Task[object]] = set()

    async def start(self) -> None:
        # No total timeout: watches and followed logs stream for minutes; the client sets its own.
        no_timeout = aiohttp.ClientTimeout(total=None)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context, limit=0), timeout=no_timeout, auto_decompress=False
        )
        self._passthrough = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.trust, limit=0), timeout=no_timeout, auto_decompress=False
        )
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        for task in list(self._streams):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for session in (self._session, self._passthrough):
            if session is not None:
                await session.close()
        self._session = self._passthrough = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        query = dict(parse_qsl(request.query_string, keep_blank_values=True))
        info = request_info(request.method, request.path, query)
        status = 502
        try:
            response = await self._serve(request, info, query)
            status = response.status
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            status = 499
            raise
        finally:
            self.request_log.add(
                RequestRecord.of(
                    info,
                    query=request.query_string,
                    status=status,
                    started=started,
                    user_agent=request.headers.get("User-Agent", ""),
                )
            )

    async def _serve(self, request: web.Request, info: RequestInfo, query: dict[str, str]) -> web.StreamResponse:
        rule = self.faults.pick(info, "status") if info.verb else None
        if rule is not None:
            headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
            return _status(rule.status, rule.message or f"injected fault (HTTP {rule.status})", headers, rule.reason)
        resuming = query.get("resourceVersion", "") not in ("", "0") and query.get("sendInitialEvents") != "true"
        if info.verb == "watch" and resuming and self.faults.pick(info, "expire-watch") is not None:
            return await _expired_watch(request, query["resourceVersion"])
        cut = self.faults.pick(info, "cut-watch") if info.verb == "watch" else None
        # a multidict: a header may repeat (one Impersonate-Group line per group), and every line is forwarded
        forwarded = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP)
        session = self._passthrough if "Authorization" in request.headers else self._session
        assert session is not None
        body = await request.read() if request.can_read_body else None
        upstream = await session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=forwarded,
            data=body,
            allow_redirects=False,
        )
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-encoding":
                    response.headers.add(key, value)  # repeated ones (Warning, Audit-Id...) all come back
            if upstream.headers.get("Content-Encoding"):
                response.headers["Content-Encoding"] = upstream.headers["Content-Encoding"]
            task = asyncio.current_task()
            if task is not None:
                self._streams.add(task)
            try:
                await response.prepare(request)
                deadline = time.monotonic() + cut.after_seconds if cut is not None else None
                while True:
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        break  # the injected cut: end the stream as a dropped connection would
                    try:
                        chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                    except TimeoutError:
                        break
                    if not chunk:
                        break
                    try:
                        await response.write(chunk)
                    except ConnectionResetError:  # the client went away (a stopped watch): so do we
                        return response
                with contextlib.suppress(ConnectionResetError):
                    await response.write_eof()
            finally:
                if task is not None:
                    self._streams.discard(task)
            return response
        finally:
            upstream.release()


def _status(code: int, message: str, headers: dict[str, str], reason: str | None = None) -> web.Response:
    reasons = {
        400: "BadRequest",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else reasons.get(code, ""),
        "code": code,
    }
    if code == 429 and "Retry-After" in headers:
        body["details"] = {"retryAfterSeconds": int(headers["Retry-After"])}
    return web.Response(status=code, text=json.dumps(body), content_type="application/json", headers=headers)


async def _expired_watch(request: web.Request, since: str) -> web.StreamResponse:
    """What kube-apiserver sends to a watch resuming from a compacted resourceVersion: one ERROR event."""
    gone = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {since} (injected)",
        "reason": "Expired",
        "code": 410,
    }
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
    await response.write_eof()
    return response
