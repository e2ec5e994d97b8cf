"""The manager's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for kubelet probes.

Why both probes: liveness (``/healthz``) answers as long as the event loop runs — a wedged loop cannot
answer, and that is what a restart fixes. Readiness (``/readyz``) answers 200 only when the caches are
synced and, with leader election, we are the leader actually running reconcilers; a standby replica is
alive but not ready. The checks are plain callables so the manager decides what "ready" means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from aiohttp import web

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
    """An aiohttp server for the three endpoints; port 0 binds a free port (see :attr:`port`)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        addr: str,
        ready_checks: Mapping[str, Check] | None = None,
        live_checks: Mapping[str, Check] | None = None,
    ) -> None:
        self.metrics = metrics
        self.host, self.port = parse_addr(addr)
        self.ready_checks = dict(ready_checks or {})
        self.live_checks = dict(live_checks or {})
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            server = site._server  # aiohttp exposes the bound port only through the asyncio server
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.port = int(sockets[0].getsockname()[1])
        logger.info("serving /metrics /healthz /readyz on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    async def _metrics(self, request: web.Request) -> web.Response:
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
