"""The kubelet's status manager: pod status goes to the API server only through ``pods/{name}/status``.

Why a manager and not a write per change: a runtime changes a pod's status several times in a burst (a
container exits, the pod turns terminal) and thousands of simulated pods change at once. Runtimes only say
what the status should be (:meth:`PodStatusWriter.set`); a small pool of workers sends the latest wish of
each pod, so bursts coalesce into one PATCH per pod and the number of requests in flight stays bounded.

What is sent, as the kubelet does: a strategic merge patch of ``status`` with ``metadata.uid`` as a
precondition, so a write meant for a deleted pod never lands on a new pod of the same name (the server
answers 409). Conditions merge by ``type``, so conditions others own (PodScheduled from the scheduler,
DisruptionTarget from the taint manager) survive; ``containerStatuses`` is replaced whole (it is atomic).
A real API server ignores ``status`` in a normal pod update, which is why nothing else is used.

Per pod the order is kept: the final status is written before the deletion is confirmed (DELETE with
``gracePeriodSeconds=0`` and a uid precondition, :meth:`PodStatusWriter.confirm_deletion`).

Why the workers take the nodes in turn and not the pods in one line: every real kubelet has a status manager
(and an API client) of its own, so a node that starts 50 pods delays its own writes, never another node's.
One writer serves every simulated node here; with a single first-in-first-out line, the deletion a quiet
node confirms would wait behind every other node's backlog. Each node keeps its own line and the workers go
round the nodes that have work, so a node waits for its own backlog and one turn of the others. (It is for
fidelity: in ``bench/real_failover.py`` under a 200-job burst an alternating A/B against the single line
showed no difference in the old pod's deletion time, which kube-apiserver's CPU bounds there.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import Conflict, KubeError, NotFound
from kubedl_py.kube.resources import PODS

log = logging.getLogger(__name__)
#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

Obj = dict[str, Any]
Key = tuple[str, str]


@dataclass
class _Entry:
    key: Key
    uid: str
    node: str
    desired: Obj | None = None
    written: Obj | None = None
    forced: bool = False
    delete: bool = False
    queued: bool = False
    busy: bool = False
    failures: int = 0
    last: Obj | None = None  # the pod as the last successful write returned it
    waiters: list[asyncio.Future[Obj | None]] = field(default_factory=list)

    def pending(self) -> bool:
        return self.delete or (self.desired is not None and (self.forced or self.desired != self.written))


class PodStatusWriter:
    """Writes pods' status (and deletion confirmations) for the agent; see the module docstring.

    ``frozen(node)`` says a node is lost (no writes for its pods until :meth:`resync`); ``current_uid(ns,
    name)`` is the agent's cached uid of a pod, to tell an injected 409 from a replaced pod.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        workers: int = 16,
        frozen: Callable[[str], bool],
        current_uid: Callable[[str, str], str | None],
    ) -> None:
        self.client = client
        self._frozen = frozen
        self._current_uid = current_uid
        self._entries: dict[Key, _Entry] = {}
        self._lines: dict[str, deque[Key]] = {}  # per node, the pods with something to write, in order
        self._turns: asyncio.Queue[str] = asyncio.Queue()  # the nodes whose line is not empty, in turn
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight: dict[str, int] = defaultdict(int)
        self._idle: dict[str, asyncio.Event] = {}
        self.writes = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"pod-status-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for e in self._entries.values():
            self._resolve(e)

    # ---- what runtimes call -----------------------------------------------------------------------------

    def set(self, pod: Obj, status: Obj, *, force: bool = False) -> None:
        """The pod's status should now be ``status`` (a complete kubelet status; do not mutate it later)."""
        e = self._entry(pod)
        e.desired = status
        e.forced = e.forced or force
        self._enqueue(e)

    def confirm_deletion(self, pod: Obj) -> None:
        """After the status written last: DELETE with grace 0 and the pod's uid as precondition."""
        e = self._entry(pod)
        e.delete = True
        self._enqueue(e)

    def forget(self, namespace: str, name: str, uid: str) -> None:
        """The pod object is gone: drop whatever was still to be written for it."""
        e = self._entries.get((namespace, name))
        if e is not None and e.uid == uid:
            del self._entries[e.key]
            self._resolve(e)

    async def flush(self, namespace: str, name: str) -> Obj | None:
        """Wait until everything asked for this pod is written; the pod as last written (None if gone)."""
        e = self._entries.get((namespace, name))
        if e is None:
            return None
        if not e.pending() and not e.busy:
            return e.last
        fut: asyncio.Future[Obj | None] = asyncio.get_running_loop().create_future()
        e.waiters.append(fut)
        return await fut

    def resync(self, node: str) -> None:
        """Write every known pod status of ``node`` again (the node is back; others may have changed them)."""
        for e in self._entries.values():
            if e.node == node and e.desired is not None:
                e.forced = True
                self._enqueue(e)

    async def quiesce(self, node: str) -> None:
        """Wait for writes already in flight for pods of ``node`` (call after freezing it)."""
        while self._inflight.get(node):
            ev = self._idle.setdefault(node, asyncio.Event())
            ev.clear()
            await ev.wait()

    # ---- inner --------------------------------------------------------------------------------------------

    def _entry(self, pod: Obj) -> _Entry:
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        e = self._entries.get(key)
        if e is None or e.uid != md["uid"]:
            if e is not None:
                self._resolve(e)
            e = self._entries[key] = _Entry(key, md["uid"], (pod.get("spec") or {}).get("nodeName") or "")
        return e

    def _enqueue(self, e: _Entry) -> None:
        if not e.queued and not e.busy:
            e.queued = True
            line = self._lines.get(e.node)
            if line is None:
                line = self._lines[e.node] = deque()
            if not line:
                self._turns.put_nowait(e.node)  # the node joins the round
            line.append(e.key)

    def _next(self, node: str) -> Key | None:
        """The first pod in ``node``'s line; the node goes to the back of the round if more are waiting."""
        line = self._lines.get(node)
        if not line:
            return None
        key = line.popleft()
        if line:
            self._turns.put_nowait(node)
        else:
            del self._lines[node]
        return key

    def _retry_later(self, e: _Entry) -> None:
        e.failures += 1
        delay = min(5.0, 0.05 * 2 ** min(e.failures, 8)) * (0.5 + _RNG.random())

        def again() -> None:
            if self._entries.get(e.key) is e:
                self._enqueue(e)

        asyncio.get_running_loop().call_later(delay, again)

    def _resolve(self, e: _Entry) -> None:
        waiters, e.waiters = e.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(e.last)

    async def _work(self) -> None:
        while True:
            key = self._next(await self._turns.get())
            if key is None:
                continue
            e = self._entries.get(key)
            if e is None:
                continue
            e.queued = False
            if self._frozen(e.node):
                continue  # kept pending: resync() sends it when the node is back
            e.busy = True
            self._inflight[e.node] += 1
            try:
                await self._write(e)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing the status of pod %s/%s", *e.key)
                self._retry_later(e)
            finally:
                e.busy = False
                self._inflight[e.node] -= 1
                if not self._inflight[e.node]:
                    ev = self._idle.get(e.node)
                    if ev is not None:
                        ev.set()
            if self._entries.get(key) is e:
                if e.pending() and not e.queued:
                    if e.failures == 0:
                        self._enqueue(e)
                elif not e.pending():
                    self._resolve(e)

    async def _write(self, e: _Entry) -> None:
        ns, name = e.key
        if e.desired is not None and (e.forced or e.desired != e.written):
            status = e.desired
            patch = {"metadata": {"uid": e.uid}, "status": status}
            try:
                pod = await self.client.patch(
                    PODS, name, patch, namespace=ns, patch_type="strategic", subresource="status"
                )
            except NotFound:
                self._drop(e)
                return
            except Conflict:
                if self._current_uid(ns, name) not in (None, e.uid):
                    self._drop(e)  # the name belongs to a new pod now
                else:
                    self._retry_later(e)  # an optimistic-concurrency or injected conflict: try again
                return
            except KubeError as exc:
                log.info("status of pod %s/%s not written (%s); retrying", ns, name, exc)
                self._retry_later(e)
                return
            self.writes += 1
            e.failures = 0
            e.last = pod
            e.written = status
            if e.desired is status:
                e.forced = False
            if e.desired is not status:
                return  # changed meanwhile: the worker loop queues it again
        if e.delete:
            try:
                await self.client.delete(PODS, name, namespace=ns, grace_period_seconds=0, uid=e.uid)
            except NotFound:
                pass  # gone already
            except Conflict:
                if self._current_uid(ns, name) == e.uid:
                    self._retry_later(e)  # our pod is still there: the conflict was not about its uid
                    return
                # the name is a new pod's: nothing of ours to confirm
            except KubeError as exc:
                log.info("deletion of pod %s/%s not confirmed (%s); retrying", ns, name, exc)
                self._retry_later(e)
                return
            self._drop(e)

    def _drop(self, e: _Entry) -> None:
        if self._entries.get(e.key) is e:
            del self._entries[e.key]
        with contextlib.suppress(Exception):
            self._resolve(e)


def pod_conditions(status: Obj, ready: bool, terminal: bool = False, *, now: str) -> list[Obj]:
    """The conditions the kubelet owns (and PodScheduled, which it also reports), keeping each one's
    ``lastTransitionTime`` while its status does not change."""
    old = {c.get("type"): c for c in status.get("conditions") or []}

    def cond(t: str, ok: bool, reason: str | None = None) -> Obj:
        s = "True" if ok else "False"
        prev = old.get(t)
        c: Obj = {
            "type": t,
            "status": s,
            "lastProbeTime": None,
            "lastTransitionTime": prev.get("lastTransitionTime", now) if prev and prev.get("status") == s else now,
            # Explicit nulls: the strategic merge patch must clear a reason left from an earlier state.
            "reason": reason if reason and not ok else None,
        }
        return c

    reason = "PodCompleted" if terminal else "ContainersNotReady"
    return [
        cond("PodReadyToStartContainers", not terminal),
        cond("Initialized", True),
        cond("Ready", ready, reason),
        cond("ContainersReady", ready, reason),
        cond("PodScheduled", True),
    ]


def all_containers_restarting(status: Obj, *, restarting: bool, now: str) -> Obj | None:
    """The pod's ``AllContainersRestarting`` condition (kubelet 1.37, ``status/generate.go``
    ``GenerateAllContainersRestartingCondition``): True, reason ``RestartAllContainersStarted``, while the pod
    restarts whole; False once its containers are removed. None for a pod that has not restarted whole yet (the
    kubelet reports it False for every pod with such a rule; here it appears with the first restart)."""
    old = next((c for c in status.get("conditions") or [] if c.get("type") == "AllContainersRestarting"), None)
    if old is None and not restarting:
        return None
    value = "True" if restarting else "False"
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == value else None
    return {
        "type": "AllContainersRestarting",
        "status": value,
        "reason": "RestartAllContainersStarted" if restarting else None,
        "message": "container exited with restart policy rule" if restarting else None,
        "lastProbeTime": None,
        "lastTransitionTime": since or now,
    }
