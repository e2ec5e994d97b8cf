"""EventRecorder: core/v1 Events about the objects a controller manages (what ``kubectl describe`` shows).

Why aggregate: a reconciler that fails the same way on every resync would otherwise create a new Event
each time, flooding etcd and burying the useful ones. Like client-go's correlator, a repeat of the same
(object, type, reason, message) within a short memory becomes a PATCH of ``count`` and ``lastTimestamp``
on the existing Event instead of a new object. The memory is an in-process LRU: cheap, and losing it (a
restart) costs one extra Event, not a wrong one.

Events are best effort: a failure to record one is logged and swallowed, never raised into a reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import KubeError, NotFound
from kubedl_py.kube.resources import EVENTS

__all__ = ["EventRecorder", "EventType"]

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int


class _KeyLock:
    """The lock of one aggregation key, and how many calls hold or await it (a lock's own ``locked()``
    is False between a release and the next waiter's wake-up, so it cannot tell "unused")."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


def _timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Posts Events on behalf of one component (``source.component``, e.g. ``kubedl-py``)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        host: str | None = None,
        cache_size: int = 4096,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self._cache_size = cache_size
        self._now = now
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        # One lock per aggregation key: two concurrent repeats must not both create a new Event. A key
        # keeps its lock while it is in _seen or in use; see event().
        self._locks: dict[tuple[str, ...], _KeyLock] = {}

    async def normal(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """Record a Normal event about ``obj``."""
        await self.event(obj, type="Normal", reason=reason, message=message)

    async def warning(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """Record a Warning event about ``obj``."""
        await self.event(obj, type="Warning", reason=reason, message=message)

    async def event(self, obj: Mapping[str, Any], *, type: EventType, reason: str, message: str) -> None:
        """Record an event about ``obj`` (a raw object with apiVersion, kind and metadata)."""
        meta = obj.get("metadata") or {}
        involved = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        key = (
            str(involved["kind"]),
            str(involved["namespace"]),
            str(involved["name"]),
            str(involved["uid"]),
            type,
            reason,
            message,
        )
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = _KeyLock()
        entry.users += 1
        try:
            async with entry.lock:
                await self._record(key, involved, type=type, reason=reason, message=message)
        except KubeError as exc:
            logger.warning(
                "event %s %s on %s/%s not recorded: %s", type, reason, involved["namespace"], involved["name"], exc
            )
        finally:
            entry.users -= 1
            # Nobody holds or awaits it, and nothing to aggregate into (the create failed, or the key was
            # evicted): drop it, or keys whose Events are never created would pile up for ever.
            if entry.users == 0 and key not in self._seen and self._locks.get(key) is entry:
                del self._locks[key]

    async def _record(
        self, key: tuple[str, ...], involved: dict[str, Any], *, type: str, reason: str, message: str
    ) -> None:
        now = _timestamp(self._now())
        seen = self._seen.get(key)
        if seen is not None:
            try:
                await self.client.patch(
                    EVENTS,
                    seen.name,
                    {"count": seen.count + 1, "lastTimestamp": now},
                    namespace=seen.namespace,
                )
            except NotFound:
                # The Event expired (the server's event TTL) or was deleted: start a new one.
                del self._seen[key]
            else:
                seen.count += 1
                self._seen.move_to_end(key)
                return
        namespace = involved["namespace"] or "default"
        # client-go's naming: the object's name and a hex timestamp, unique enough and readable.
        name = f"{involved['name']}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "reason": reason,
            "message": message,
            "type": type,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        created = await self.client.create(EVENTS, body, namespace=namespace)
        created_name = str((created.get("metadata") or {}).get("name") or name)
        self._seen[key] = _Seen(name=created_name, namespace=namespace, count=1)
        self._seen.move_to_end(key)
        while len(self._seen) > self._cache_size:
            evicted, _ = self._seen.popitem(last=False)
            old = self._locks.get(evicted)
            if old is not None and old.users == 0:
                del self._locks[evicted]
            # (in use: its last user drops it, the key being no longer in _seen)
