"""Manager and Controller: the glue from watched objects to reconcile calls.

The flow (controller-runtime's, in asyncio)::

    Informer (list+watch cache) --handler--> map object to key(s) --> WorkQueue --> N workers
        --> reconciler.reconcile(key) --> Result: done / requeue (with backoff) / requeue_after(seconds)

Why keys and not events: reconcilers are level-based. They are told *which* object to look at, never
*what happened*; they read the current state from the informers' caches and make the world match it.
So any number of events collapse into one reconcile, a missed event is repaired by the next resync, and a
controller restart needs no memory. An owned object's event (a pod) enqueues its owner's key (the job),
found through the ``ownerReferences`` entry with ``controller: true`` or through a label.

A :class:`Manager` runs the informers, the controllers' workers, optionally only while it holds a
leader-election Lease, and the ``/metrics`` ``/healthz`` ``/readyz`` endpoint. :meth:`Manager.stop` (the
CLI calls it on SIGTERM) stops handing out keys, lets in-flight reconciles finish (up to a timeout),
releases the Lease so a standby takes over at once, and returns from :meth:`Manager.run`.

Nothing here knows what a training job is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubedl_py.api.plain import Object
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.delegation import DelegatedAuth, DelegationSettings
from kubedl_py.kube.errors import KubeError
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.health import HealthServer
from kubedl_py.kube.informer import Handler, IndexFunc, Informer, InformerSettings, drop_managed_fields
from kubedl_py.kube.leader import LeaderElectionSettings, LeaderElector, LeadershipLost
from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.priority import OrdinaryLimit, WriteGate
from kubedl_py.kube.resources import Resource, object_key
from kubedl_py.kube.tls import server_context
from kubedl_py.kube.workqueue import BackoffSettings, ExponentialBackoff, ShutDown, WorkQueue, namespace_of

__all__ = [
    "Controller",
    "Manager",
    "ManagerSettings",
    "Mapper",
    "Reconciler",
    "Result",
    "label_key",
    "own_key",
    "owner_key",
]

logger = logging.getLogger(__name__)

#: maps a watched object to the keys of the objects to reconcile
Mapper = Callable[[Mapping[str, Any]], Iterable[str]]


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next.

    - ``Result()``: done; reconcile again only when something changes.
    - ``Result(requeue=True)``: not done (waiting on something); again after the per-key backoff.
    - ``Result(requeue_after=s)``: again in ``s`` seconds (a deadline, a TTL); resets the backoff.

    Raising an exception counts as ``requeue=True`` and is logged with the key.
    """

    requeue: bool = False
    requeue_after: float | None = None


class Reconciler(Protocol):
    """Makes the world match the desired state of the object named by ``key`` (``namespace/name``)."""

    async def reconcile(self, key: str) -> Result | None: ...


def own_key(obj: Mapping[str, Any]) -> list[str]:
    """Mapper for the primary kind: the object's own key."""
    return [object_key(obj)]


def owner_key(kind: str, *, api_version: str | None = None) -> Mapper:
    """Mapper for owned objects: the key of the controlling owner (``controller: true``) of ``kind``."""

    def mapper(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if not ref.get("controller") or ref.get("kind") != kind:
                continue
            if api_version is not None and ref.get("apiVersion") != api_version:
                continue
            namespace = meta.get("namespace")
            return [f"{namespace}/{ref['name']}" if namespace else str(ref["name"])]
        return []

    return mapper


def label_key(label: str) -> Mapper:
    """Mapper for owned objects: ``namespace/<value of label>`` (when ownerReferences are not set yet)."""

    def mapper(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata") or {}
        value = (meta.get("labels") or {}).get(label)
        if not value:
            return []
        namespace = meta.get("namespace")
        return [f"{namespace}/{value}" if namespace else str(value)]

    return mapper


class Controller:
    """One reconciler, its work queue and its workers. Made by :meth:`Manager.add_controller`."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        workers: int,
        metrics: Metrics,
        backoff: BackoffSettings | None = None,
        urgent_workers: int = 0,
        write_gate: WriteGate | None = None,
        repair_workers: int | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        #: workers beside ``workers`` that take urgent keys only (:class:`WorkQueue`): a failover does not wait
        #: for one of the others to finish its reconcile when new work keeps them all busy
        self.urgent_workers = urgent_workers
        #: held while a key from the urgent lane is reconciled: the process's other writes wait for it
        self.write_gate = write_gate
        #: ordinary reconciles at once while the write gate's repair window is open (None: ``workers``)
        self.ordinary: OrdinaryLimit | None = None
        if write_gate is not None and repair_workers is not None and repair_workers < workers:
            self.ordinary = OrdinaryLimit(
                write_gate, normal=workers, repairing=repair_workers, name=name, metrics=metrics
            )
        self.metrics = metrics
        # Keys are namespace/name: one namespace's burst does not hold another's jobs back (workqueue.py).
        self.queue: WorkQueue[str] = WorkQueue(
            name=name, backoff=ExponentialBackoff(backoff), metrics=metrics, tenant=namespace_of
        )
        self._tasks: list[asyncio.Task[None]] = []

    def watch(
        self,
        informer: Informer,
        *,
        map: Mapper = own_key,
        urgent: Callable[[Object], bool] | None = None,
        urgent_delete: bool = False,
        batch: float = 0.0,
    ) -> None:
        """Enqueue the keys ``map`` gives for every added, updated (and resynced) or deleted object.

        On an update both the old and the new object are mapped, so moving an object from one owner to
        another wakes both owners. An update whose new object ``urgent`` says so, and with ``urgent_delete``
        a deletion, puts the keys at the front of the queue (:meth:`WorkQueue.add`): recovery before new work.
        ``batch`` (seconds): an addition or an ordinary update enqueues its keys within that long
        (:meth:`WorkQueue.add_soon`), so that the events of one owner's objects in that time are one reconcile.
        """

        def soon(key: str) -> None:
            if batch > 0:
                self.queue.add_soon(key, batch)
            else:
                self.queue.add(key)

        def on_add(obj: Object) -> None:
            for key in map(obj):
                soon(key)

        def on_update(old: Object, new: Object) -> None:
            keys = set(map(new))
            if old is not new:
                keys.update(map(old))
            hurry = urgent is not None and urgent(new)
            for key in keys:
                if hurry:
                    self.queue.add(key, urgent=True)
                else:
                    soon(key)

        def on_delete(obj: Object) -> None:
            for key in map(obj):
                self.queue.add(key, urgent=urgent_delete)

        informer.add_handler(Handler(on_add=on_add, on_update=on_update, on_delete=on_delete))

    def enqueue(self, key: str, *, after: float | None = None) -> None:
        """Ask for ``key`` to be reconciled (now, or in ``after`` seconds)."""
        if after:
            self.queue.add_after(key, after)
        else:
            self.queue.add(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        self._tasks += [
            asyncio.create_task(self._worker(urgent_only=True), name=f"{self.name}-urgent-worker-{i}")
            for i in range(self.urgent_workers)
        ]

    async def stop(self, *, grace: float) -> None:
        """Stop handing out keys; wait up to ``grace`` seconds for in-flight reconciles, then cancel them."""
        self.queue.shutdown()
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(self._tasks, timeout=grace)
        if pending:
            logger.warning(
                "controller %s: %d reconciles still running after %.1fs; cancelling", self.name, len(pending), grace
            )
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._tasks = []

    async def _worker(self, *, urgent_only: bool = False) -> None:
        while True:
            # While the repair window is open, a worker that may take ordinary keys first waits for one of the
            # fewer slots, and only then takes a key: a key taken and then held while waiting would be
            # "processing", and an urgent add of the same key (its job just lost a pod) would wait for it.
            limit = self.ordinary if self.ordinary is not None and not urgent_only else None
            async with limit.slot() if limit is not None else contextlib.nullcontext():
                try:
                    key, urgent = await self.queue.take(urgent_only=urgent_only)
                except ShutDown:
                    return
                try:
                    if urgent and self.write_gate is not None:
                        with self.write_gate.urgent():
                            await self._reconcile(key)
                    else:
                        await self._reconcile(key)
                finally:
                    self.queue.done(key)

    async def _reconcile(self, key: str) -> None:
        started = time.monotonic()
        outcome = "error"
        try:
            result = await self.reconciler.reconcile(key) or Result()
        except asyncio.CancelledError:
            raise
        except KubeError as exc:
            # The API server refused or did not answer: expected under load and faults, not a bug.
            self.queue.add_rate_limited(key)
            logger.warning(
                "controller %s: reconcile of %s failed (failure #%d): %s; retrying with backoff",
                self.name,
                key,
                self.queue.num_requeues(key),
                exc,
            )
        except Exception:
            self.queue.add_rate_limited(key)
            logger.exception(
                "controller %s: reconcile of %s failed (failure #%d); retrying with backoff",
                self.name,
                key,
                self.queue.num_requeues(key),
            )
        else:
            if result.requeue_after is not None and result.requeue_after > 0:
                outcome = "requeue_after"
                self.queue.forget(key)
                self.queue.add_after(key, result.requeue_after)
            elif result.requeue:
                outcome = "requeue"
                self.queue.add_rate_limited(key)
            else:
                outcome = "success"
                self.queue.forget(key)
        finally:
            elapsed = time.monotonic() - started
            self.metrics.reconcile_duration.labels(self.name, outcome).observe(elapsed)
            self.metrics.reconcile_total.labels(self.name, outcome).inc()


@dataclass(frozen=True)
class ManagerSettings:
    """How a :class:`Manager` runs."""

    #: workers per controller unless ``add_controller`` says otherwise (``--workers``)
    workers: int = 16
    #: more workers per controller that take urgent keys only (owners of deleted or failing pods)
    urgent_workers: int = 4
    #: while such a key is reconciled, the process's other writes wait, this many seconds at most (0: never;
    #: kubedl_py.kube.priority)
    urgent_write_hold: float = 1.0
    #: seconds after the last repair of a running job (a lost pod replaced, a Service re-pointed) during which
    #: each controller runs at most ``repair_workers`` ordinary reconciles at once (0: never; kubedl_py.kube.priority)
    repair_window: float = 5.0
    repair_workers: int = 2
    #: ``HOST:PORT`` of /metrics (``--metrics-addr``), and of /healthz /readyz too unless ``health_addr`` is set
    #: or the metrics are secure; None: no metrics server
    metrics_addr: str | None = None
    #: serve /metrics over HTTPS to callers the API server authorizes (``--metrics-secure``; health.py)
    metrics_secure: bool = False
    #: ``tls.crt`` and ``tls.key`` of the HTTPS metrics endpoint (``--metrics-cert-dir``); None: self-signed
    metrics_cert_dir: str | None = None
    #: ``HOST:PORT`` of /healthz /readyz alone, plain HTTP (``--health-addr``); None: on the metrics server
    #: when that is plain, nowhere when it is secure
    health_addr: str | None = None
    #: how long the metrics endpoint reuses an answer of the API server about a token (delegation.py)
    delegation: DelegationSettings = field(default_factory=DelegationSettings)
    #: compete for this Lease and reconcile only while holding it (``--leader-elect``); None: always act
    leader_election: LeaderElectionSettings | None = None
    #: seconds in-flight reconciles get to finish on stop before they are cancelled
    shutdown_timeout: float = 30.0
    #: per-key backoff of failing reconciles
    backoff: BackoffSettings = field(default_factory=BackoffSettings)
    #: list/watch timing of informers made by :meth:`Manager.informer` (unless given their own)
    informer: InformerSettings | None = None


class Manager:
    """Runs informers, controllers and (optionally) leader election and the health endpoint.

    Build everything before :meth:`run`; run until :meth:`stop`.
    """

    def __init__(
        self, client: KubeClient, *, settings: ManagerSettings | None = None, metrics: Metrics | None = None
    ) -> None:
        self.client = client
        self.settings = settings or ManagerSettings()
        self.metrics = metrics or client.metrics or Metrics()
        if client.metrics is None:
            client.metrics = self.metrics
        self.write_gate = WriteGate(
            self.settings.urgent_write_hold, repair_window=self.settings.repair_window, metrics=self.metrics
        )
        client.write_gate = self.write_gate
        self.informers: list[Informer] = []
        self.controllers: list[Controller] = []
        self.elector: LeaderElector | None = None
        if self.settings.leader_election is not None:
            self.elector = LeaderElector(client, self.settings.leader_election, metrics=self.metrics)
            # Every write of this process is fenced by the Lease: none leaves once it may have lost it.
            client.write_fence = self.elector.fence
        #: the plain server of the probes (and of /metrics when not secure)
        self.health: HealthServer | None = None
        #: the HTTPS metrics server (``metrics_secure``)
        self.metrics_server: HealthServer | None = None
        self._servers: list[HealthServer] = []
        self._stop = asyncio.Event()
        self._running = False

    # --------------------------------------------------------------------------------------- building

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[Object], Object] | None = drop_managed_fields,
        indexers: Mapping[str, IndexFunc] | None = None,
        settings: InformerSettings | None = None,
    ) -> Informer:
        """A new informer that the manager will run (and wait for before starting any worker)."""
        informer = Informer(
            self.client,
            resource,
            namespace=namespace,
            namespaces=namespaces,
            label_selector=label_selector,
            field_selector=field_selector,
            transform=transform,
            indexers=indexers,
            settings=settings or self.settings.informer,
        )
        self.informers.append(informer)
        return informer

    def add_controller(self, name: str, reconciler: Reconciler, *, workers: int | None = None) -> Controller:
        """A new controller; connect it to informers with :meth:`Controller.watch`."""
        controller = Controller(
            name,
            reconciler,
            workers=workers or self.settings.workers,
            metrics=self.metrics,
            backoff=self.settings.backoff,
            urgent_workers=self.settings.urgent_workers,
            write_gate=self.write_gate,
            repair_workers=self.settings.repair_workers,
        )
        self.controllers.append(controller)
        return controller

    def recorder(self, component: str) -> EventRecorder:
        """An event recorder posting as ``component``."""
        return EventRecorder(self.client, component=component)

    # ---------------------------------------------------------------------------------------- state

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers)

    @property
    def running(self) -> bool:
        """True while workers run (with leader election: while we lead)."""
        return self._running

    def ready(self) -> bool:
        """Caches synced and reconcilers running: what ``/readyz`` reports."""
        return self.synced and self._running

    # --------------------------------------------------------------------------------------- running

    def stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully (safe from a signal handler)."""
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`stop`; raise :class:`LeadershipLost` if the Lease could not be renewed."""
        background: list[asyncio.Task[None]] = []
        elector_task: asyncio.Task[None] | None = None
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            await self._serve_endpoints()
            # Caches start at once, also on a standby replica: a new leader is ready the moment it wins.
            background = [asyncio.create_task(i.run(), name=f"informer-{i.resource}") for i in self.informers]
            if not await self._until(self._all_synced(), stop_wait, *background):
                return
            logger.info("manager: %d informers synced", len(self.informers))
            if self.elector is not None:
                with WriteGate.exempt():  # the task copies the mark: a Lease renewal never waits for a failover
                    elector_task = asyncio.create_task(self.elector.run(), name="leader-election")
                if not await self._until(self.elector.leading.wait(), stop_wait, elector_task, *background):
                    return
            for controller in self.controllers:
                controller.start()
            self._running = True
            started = (f"{c.name} x{c.workers} (+{c.urgent_workers} for urgent keys)" for c in self.controllers)
            logger.info("manager: started %s", ", ".join(started))
            lost = asyncio.create_task(self.elector.lost.wait()) if self.elector is not None else None
            watched = [t for t in (stop_wait, lost, elector_task) if t is not None]
            try:
                await asyncio.wait([*watched, *background], return_when=asyncio.FIRST_COMPLETED)
            finally:
                if lost is not None:
                    lost.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await lost
            self._raise_background_failure(background)
            if self.elector is not None and self.elector.lost.is_set():
                raise LeadershipLost(f"lost lease {self.elector.settings.namespace}/{self.elector.settings.name}")
        finally:
            await self._shutdown(background, elector_task, stop_wait)

    async def _serve_endpoints(self) -> None:
        """Start the metrics and probe servers the settings ask for (health.py: plain or secure)."""
        settings = self.settings
        checks: dict[str, Any] = {
            "ready_checks": {"informers-synced": lambda: self.synced, "reconcilers-running": self.ready},
            "live_checks": {"event-loop": lambda: True},
        }
        if settings.metrics_addr and settings.metrics_secure:
            self.metrics_server = HealthServer(
                self.metrics,
                addr=settings.metrics_addr,
                probes=False,
                ssl_context=server_context(settings.metrics_cert_dir),
                auth=DelegatedAuth(self.client, settings=settings.delegation),
            )
            self._servers.append(self.metrics_server)
            await self.metrics_server.start()
        elif settings.metrics_addr:
            self.health = HealthServer(self.metrics, addr=settings.metrics_addr, **checks)
            self._servers.append(self.health)
            await self.health.start()
        if settings.health_addr:
            probes = HealthServer(None, addr=settings.health_addr, **checks)
            self._servers.append(probes)
            await probes.start()
            self.health = self.health or probes

    async def _all_synced(self) -> None:
        for informer in self.informers:
            await informer.wait_synced()

    async def _until(self, condition: Any, stop_wait: asyncio.Task[bool], *others: asyncio.Task[Any]) -> bool:
        """Wait for ``condition`` unless stop (False) or one of ``others`` ends first (its error raised)."""
        waiter = asyncio.ensure_future(condition)
        try:
            await asyncio.wait([waiter, stop_wait, *others], return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                waiter.result()
                return True
            self._raise_background_failure(list(others))
            return False
        finally:
            # Also when run() itself is cancelled mid-wait: never leave the waiter behind.
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter

    @staticmethod
    def _raise_background_failure(tasks: list[asyncio.Task[Any]]) -> None:
        for task in tasks:
            if task.done() and not task.cancelled():
                error = task.exception()
                if error is not None:
                    raise error

    async def _shutdown(
        self,
        background: list[asyncio.Task[None]],
        elector_task: asyncio.Task[None] | None,
        stop_wait: asyncio.Task[bool],
    ) -> None:
        logger.info("manager: shutting down")
        self._running = False
        # In-flight reconciles finish first (they may still need the lease and the caches).
        await asyncio.gather(
            *(c.stop(grace=self.settings.shutdown_timeout) for c in self.controllers), return_exceptions=True
        )
        tasks = [t for t in (elector_task, stop_wait, *background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.elector is not None:
            await self.elector.release()
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        logger.info("manager: stopped")
