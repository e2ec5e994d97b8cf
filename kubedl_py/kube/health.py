"""The manager's HTTP endpoints: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for kubelet probes.

Two ways to serve them. Plain (``kubedl-py controller --metrics-addr``, what local runs and benchmarks use):
one HTTP server answers all three to anyone. Secure (``--metrics-secure``, what the install manifests and the
chart run): ``/metrics`` is served over HTTPS (:mod:`kubedl_py.kube.tls`) to callers the API server
authenticates and authorizes (:mod:`kubedl_py.kube.delegation`), and the probes stay plain HTTP on their own
port (``--health-addr``), as kubelets probe them: they say only "ok", and a kubelet has no token to show.

Why both probes: liveness (``/healthz``) answers as long as the event loop runs — a wedged loop cannot
answer, and that is what a restart fixes. Readiness (``/readyz``) answers 200 only when the caches are
synced and, with leader election, we are the leader actually running reconcilers; a standby replica is
alive but not ready. The checks are plain callables so the manager decides what "ready" means.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping

from aiohttp import web

from kubedl_py.kube.delegation import DelegatedAuth
from kubedl_py.kube.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["HealthServer", "parse_addr"]

logger = logging.getLogger(__name__)

Check = Callable[[], bool]


def parse_addr(addr: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (or ``":PORT"``, ``"[::1]:PORT"``) -> ``(host, port)``; an empty host means all."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {addr!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class HealthServer:
    """An aiohttp server for the endpoints; port 0 binds a free port (see :attr:`port`).

    ``metrics`` None serves the probes only; ``probes`` False serves ``/metrics`` only. With ``ssl_context`` it serves
    HTTPS, and with ``auth`` every ``/metrics`` request must pass :meth:`DelegatedAuth.check` (the probes are
    never behind it).
    """

    def __init__(
        self,
        metrics: Metrics | None,
        *,
        addr: str,
        ready_checks: Mapping[str, Check] | None = None,
        live_checks: Mapping[str, Check] | None = None,
        probes: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        auth: DelegatedAuth | None = None,
    ) -> None:
        self.metrics = metrics
        self.host, self.port = parse_addr(addr)
        self.ready_checks = dict(ready_checks or {})
        self.live_checks = dict(live_checks or {})
        self.probes = probes
        self.ssl = ssl_context
        self.auth = auth
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        served = []
        if self.metrics is not None:
            app.router.add_get("/metrics", self._metrics)
            served.append("/metrics")
        if self.probes:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/readyz", self._readyz)
            served += ["/healthz", "/readyz"]
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl)
        await site.start()
        if self.port == 0:
            server = site._server  # aiohttp exposes the bound port only through the asyncio server
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.port = int(sockets[0].getsockname()[1])
        how = "HTTPS, authorized by the API server" if self.auth is not None else "HTTPS" if self.ssl else "HTTP"
        logger.info("serving %s on %s:%d (%s)", " ".join(served), self.host, self.port, how)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.ssl is not None else 'http'}://{host}:{self.port}"

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        if self.auth is not None:
            decision = await self.auth.check(request.headers.get("Authorization"), path=request.path)
            if not decision.allowed:
                return web.Response(status=decision.status, text=decision.reason + "\n")
        body = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return _report(self.live_checks)

    async def _readyz(self, request: web.Request) -> web.Response:
        return _report(self.ready_checks)


def _report(checks: Mapping[str, Check]) -> web.Response:
    lines = []
    ok = True
    for name, check in checks.items():
        try:
            passed = bool(check())
        except Exception:
            logger.exception("health check %s failed", name)
            passed = False
        ok &= passed
        lines.append(f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}")
    lines.append("ok" if ok else "not ok")
    return web.Response(status=200 if ok else 503, text="\n".join(lines) + "\n")
