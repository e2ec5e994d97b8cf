"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that of several replicas only one acts.

The protocol is client-go's ``leaderelection`` (read it for the reasoning); in short:

- The Lease names its holder (``holderIdentity``), for how long a renewal counts
  (``leaseDurationSeconds``), and when it was acquired and last renewed.
- A candidate takes the Lease when it is free (no holder: released) or when the holder has not renewed
  it for ``lease_duration``. "Not renewed" is judged by **our own clock** — the time we last saw the
  Lease record change — never by comparing the holder's ``renewTime`` with our wall clock, so clock skew
  between machines cannot make two leaders.
- Every write is a PUT carrying the resourceVersion we read: if two candidates race, the API server lets
  exactly one win (the other gets Conflict).
- The leader renews every ``retry_period``. If it cannot renew for ``renew_deadline`` it **steps down**:
  stops acting, before any other candidate may take over (``renew_deadline < lease_duration``). That
  ordering is what guarantees that two electors never both lead.
- On graceful shutdown the leader releases the Lease (empty holder), so a successor takes over at its next
  try instead of waiting out the lease.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubedl_py.kube.client import KubeClient, unfenced
from kubedl_py.kube.errors import AlreadyExists, Conflict, KubeError, NotFound, NotLeader
from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.resources import LEASES

__all__ = ["LeaderElectionSettings", "LeaderElector", "LeadershipLost", "default_identity"]

logger = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """The elector could not renew its Lease in time and stepped down."""


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Which Lease to compete for, and the three durations of the protocol (seconds)."""

    name: str
    namespace: str
    #: our name in ``holderIdentity``; unique per process (default: hostname + random suffix)
    identity: str = ""
    #: how long a renewal keeps others away; a dead leader is replaced after at most this long
    lease_duration: float = 15.0
    #: a leader that has not renewed for this long steps down; must be shorter than lease_duration
    renew_deadline: float = 10.0
    #: how often to try to acquire (as candidate) or renew (as leader)
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")


def default_identity() -> str:
    """Hostname (the pod name in a cluster) plus a random suffix, so two processes never share one."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Competes for one Lease. ``await elector.run()`` loops until cancelled or leadership is lost.

    ``leading`` is an :class:`asyncio.Event` set while we lead; ``lost`` is set when we stepped down after
    failing to renew (then :meth:`run` raises :class:`LeadershipLost`). Cancel :meth:`run` to stop; call
    :meth:`release` after that to hand the Lease on at once.
    """

    def __init__(
        self,
        client: KubeClient,
        settings: LeaderElectionSettings,
        *,
        metrics: Metrics | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.settings = settings
        self.identity = settings.identity or default_identity()
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._metrics = metrics
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._now = now
        #: the last Lease we read or wrote, and when (our clock) we saw its spec change
        self._observed: dict[str, Any] | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def fence(self) -> None:
        """The write fence (``KubeClient.write_fence``): raise :class:`NotLeader` unless we lead and our last
        renewal was sent less than ``renew_deadline`` ago by our clock. No other candidate may take the Lease
        before ``lease_duration`` has passed since it saw that renewal, so a write that passes here cannot race
        a successor's, also when this process was paused (SIGSTOP, a stalled VM) past its lease and has not yet
        run the renewal that would tell it so: the monotonic clock kept going meanwhile."""
        if not self.leading.is_set():
            raise NotLeader(f"lease {self.settings.namespace}/{self.settings.name}: {self.identity} is not the leader")
        since = self._clock() - self._last_renew
        if since >= self.settings.renew_deadline:
            raise NotLeader(
                f"lease {self.settings.namespace}/{self.settings.name}: last renewed {since:.1f}s ago, over the renew "
                f"deadline ({self.settings.renew_deadline}s): another replica may lead now; the write is not sent"
            )

    @property
    def holder(self) -> str | None:
        """The holder named in the Lease as last observed (None when unknown or free)."""
        if self._observed_spec is None:
            return None
        return self._observed_spec.get("holderIdentity") or None

    async def run(self) -> None:
        """Acquire, then renew until cancelled; raise :class:`LeadershipLost` if a renewal deadline passes."""
        s = self.settings
        while True:
            if await self._try_acquire_or_renew():
                break
            await asyncio.sleep(s.retry_period)
        self._became_leader()
        try:
            while True:
                await asyncio.sleep(s.retry_period)
                remaining = s.renew_deadline - (self._clock() - self._last_renew)
                renewed = False
                if remaining > 0:
                    try:
                        # A hung request must not keep us "leading" past the deadline.
                        async with asyncio.timeout(remaining):
                            renewed = await self._try_acquire_or_renew()
                    except TimeoutError:
                        renewed = False
                if renewed:
                    continue
                if self._clock() - self._last_renew >= s.renew_deadline:
                    self._step_down()
                    raise LeadershipLost(f"lease {s.namespace}/{s.name}: not renewed for {s.renew_deadline}s")
        except asyncio.CancelledError:
            if self.is_leader:
                self._set_leading(False)
            raise

    async def release(self) -> None:
        """Give the Lease up (if we hold it) so the next candidate takes over without waiting it out.

        The copy we hold may be one write behind: a renewal cancelled by the stop can have reached the server
        without its reply reaching us. The release then gets Conflict; it re-reads the Lease and, if it is
        still ours, releases that version (a few tries, never a loop)."""
        if self._observed is None or self.holder != self.identity:
            return
        lease: dict[str, Any] | None = dict(self._observed)
        try:
            with unfenced():
                await self._release(lease)
        except KubeError as exc:
            logger.warning("lease %s/%s: release failed (successor waits out the lease): %s", *self._where(), exc)
        finally:
            self._observed = None
            if self.is_leader:
                self._set_leading(False)

    async def _release(self, lease: dict[str, Any] | None) -> None:
        for _ in range(3):
            assert lease is not None
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return  # someone else holds it now: nothing of ours to give up
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(self._now()))
            lease["spec"] = spec
            try:
                await self.client.replace(LEASES, lease, namespace=self.settings.namespace)
            except Conflict:
                lease = await self.client.get(LEASES, self.settings.name, namespace=self.settings.namespace)
                continue
            logger.info("lease %s/%s released by %s", self.settings.namespace, self.settings.name, self.identity)
            return
        logger.warning("lease %s/%s: release kept conflicting; the successor waits it out", *self._where())

    def _where(self) -> tuple[str, str]:
        return self.settings.namespace, self.settings.name

    # --------------------------------------------------------------------------------------------- inner

    async def _try_acquire_or_renew(self) -> bool:
        with unfenced():  # the Lease's own writes are what the fence judges by
            return await self._acquire_or_renew()

    async def _acquire_or_renew(self) -> bool:
        s = self.settings
        now_wall = _micro_time(self._now())
        try:
            lease = await self.client.get(LEASES, s.name, namespace=s.namespace)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": self._spec(acquire_time=now_wall, renew_time=now_wall, transitions=0),
            }
            sent = self._clock()
            try:
                created = await self.client.create(LEASES, body, namespace=s.namespace)
            except (AlreadyExists, Conflict):
                return False  # another candidate created it first
            except KubeError as exc:
                logger.warning("lease %s/%s: create failed: %s", s.namespace, s.name, exc)
                return False
            self._observe(created)
            self._last_renew = sent
            return True
        except KubeError as exc:
            logger.warning("lease %s/%s: read failed: %s", s.namespace, s.name, exc)
            return False

        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or s.lease_duration)
        if holder and holder != self.identity and self._clock() < self._observed_at + duration:
            return False  # someone else holds it and has renewed within the lease, as far as we saw
        if holder == self.identity:
            new_spec = self._spec(
                acquire_time=spec.get("acquireTime") or now_wall,
                renew_time=now_wall,
                transitions=int(spec.get("leaseTransitions") or 0),
            )
        else:
            new_spec = self._spec(
                acquire_time=now_wall,
                renew_time=now_wall,
                # Like client-go: every change of holder counts, a takeover of a released lease too.
                transitions=int(spec.get("leaseTransitions") or 0) + 1,
            )
        updated = dict(lease)
        updated["spec"] = new_spec  # metadata.resourceVersion rides along: a racing writer gets Conflict
        sent = self._clock()  # the lease counts from when the renewal left, not from when its answer came
        try:
            written = await self.client.replace(LEASES, updated, namespace=s.namespace)
        except KubeError as exc:
            if not isinstance(exc, Conflict):
                logger.warning("lease %s/%s: update failed: %s", s.namespace, s.name, exc)
            return False
        self._observe(written)
        self._last_renew = sent
        return True

    def _spec(self, *, acquire_time: str, renew_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            # Whole seconds on the wire: round up, so others never wait less than we were told.
            "leaseDurationSeconds": max(1, math.ceil(self.settings.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": renew_time,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock()
        self._observed = lease

    def _became_leader(self) -> None:
        logger.info("lease %s/%s: %s is now the leader", self.settings.namespace, self.settings.name, self.identity)
        self._set_leading(True)

    def _step_down(self) -> None:
        logger.error(
            "lease %s/%s: %s could not renew within %.1fs; stepping down",
            self.settings.namespace,
            self.settings.name,
            self.identity,
            self.settings.renew_deadline,
        )
        self.lost.set()
        self._set_leading(False)

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self.leading.set()
        else:
            self.leading.clear()
        if self._metrics is not None:
            self._metrics.leader.labels(f"{self.settings.namespace}/{self.settings.name}").set(int(leading))
        callback = self._on_started if leading else self._on_stopped
        if callback is not None:
            try:
                callback()
            except Exception:
                logger.exception("leader election callback failed")
