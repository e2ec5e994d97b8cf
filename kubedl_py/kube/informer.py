"""Informer: a local cache of one kind of object, kept current by list + watch, with event handlers.

Why: a controller that asked the API server for every pod of a job on every reconcile would cost the
server O(jobs x pods) reads per resync. Instead each kind is listed once and then watched; reconcilers
read the cache (``get``, ``list`` by index) and write to the server.

How the cache stays correct: the list/watch loop of :mod:`kubedl_py.kube.listwatch` (shared with the SDK)
lists, then watches from the list's resourceVersion with bookmarks, resumes a watch that ended or broke
from the last resourceVersion seen, lists again on **410 Gone**, and backs off on failures, for ever. What
the informer adds: on every re-list it diffs the new list against the cache, so objects that vanished while
it was away are delivered as deletions and changed ones as updates, and handlers see every transition
they missed.

Handlers never see a stale object overwrite a newer one: an event whose resourceVersion is not newer
than the cached copy's is dropped (resourceVersions are opaque strings, but the API server's are
integers; when either is not an integer we trust the order of the stream).

Memory: a ``transform`` trims each object before it is cached (by default ``managedFields`` are dropped:
they are often the biggest part of an object and no controller reads them); ``label_selector`` and
``namespace`` keep the cache to what the controller owns.

Several namespaces (``namespaces=[...]``, a namespaced install): one list/watch per namespace, all feeding
the one cache, so readers and handlers see one informer. The API has no way to watch a set of namespaces in
one request (a field selector on ``metadata.namespace`` takes one value, ``=`` or ``!=``), and a cluster-wide
watch filtered here would need the cluster-wide ``list``/``watch`` rights a namespaced install exists to
avoid. The cost is one list and one watch stream per namespace instead of one in all (measured in
tests/kube/test_informer.py and docs/install.md). A re-list of one namespace (after a 410) reconciles only
that namespace's part of the cache, and the informer is synced once every namespace has been listed.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api.plain import Object
from kubedl_py.kube.client import KubeClient, WatchEvent
from kubedl_py.kube.listwatch import Listed, ListWatch, ListWatchSettings
from kubedl_py.kube.resources import Resource, object_key
from kubedl_py.kube.retry import RetrySettings

__all__ = [
    "OWNER_INDEX",
    "Handler",
    "IndexFunc",
    "Informer",
    "InformerSettings",
    "by_label",
    "by_owner_uid",
    "drop_managed_fields",
]

logger = logging.getLogger(__name__)

IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]
Transform = Callable[[Object], Object]

#: the conventional name of the by-owner-uid index
OWNER_INDEX = "owner-uid"


@dataclass(frozen=True)
class InformerSettings:
    """Timing of one informer's list/watch loop."""

    #: server-side ``timeoutSeconds`` of each watch request; the watch is then resumed (not re-listed)
    watch_timeout_seconds: int = 300
    #: a watch that delivers nothing (not even a bookmark) for this many seconds is presumed dead and
    #: resumed; longer than the server timeout so a healthy quiet watch ends on the server's terms
    inactivity_timeout: float = 330.0
    #: a watch that ends sooner than this, without any event, counts as a failure (backoff, not a spin)
    min_watch_duration: float = 1.0
    #: re-deliver every cached object to the update handlers this often (None: never); costs no API calls
    resync_period: float | None = None
    #: backoff between failed list/watch attempts (only the delays are used: attempts are unlimited)
    backoff: RetrySettings = field(default_factory=lambda: RetrySettings(initial_delay=0.1, max_delay=30.0, jitter=0.5))
    #: seconds of event handling after which the informer lets the rest of the process run. A watch read hands
    #: over every event the socket holds at once (hundreds in a burst) and handling them never waits, so
    #: without a pause the workers, and a failover among them, would wait for the whole burst.
    time_slice: float = 0.005


@dataclass(frozen=True)
class Handler:
    """Callbacks for cache changes; plain functions (enqueue a key), called in the informer's task."""

    on_add: Callable[[Object], None] | None = None
    on_update: Callable[[Object, Object], None] | None = None
    on_delete: Callable[[Object], None] | None = None


def drop_managed_fields(obj: Object) -> Object:
    """The default transform: drop ``metadata.managedFields`` (large, and no controller reads them)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def by_owner_uid(obj: Mapping[str, Any]) -> list[str]:
    """Index function: the uids of an object's owners (find a job's pods by the job's uid)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(ref["uid"]) for ref in refs if isinstance(ref, Mapping) and ref.get("uid")]


def by_label(label: str) -> IndexFunc:
    """Index function factory: the value of one label, namespaced (``ns/value``) so names do not collide."""

    def index(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata") or {}
        value = (meta.get("labels") or {}).get(label)
        if value is None:
            return []
        namespace = meta.get("namespace")
        return [f"{namespace}/{value}" if namespace else str(value)]

    return index


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(candidate: str, cached: str) -> bool:
    """Is ``candidate`` a later resourceVersion than ``cached``? (Unknown order counts as newer.)"""
    if candidate.isdigit() and cached.isdigit():
        return int(candidate) > int(cached)
    return candidate != cached


class Informer:
    """Cache of one resource (optionally one namespace, one label selector), kept by list + watch.

    Usage::

        pods = Informer(kube, PODS, namespace="ns", label_selector="app=x",
                        indexers={OWNER_INDEX: by_owner_uid})
        pods.add_handler(Handler(on_add=..., on_update=..., on_delete=...))
        task = asyncio.create_task(pods.run())
        await pods.wait_synced()
        pods.get("web-0", namespace="ns"); pods.list(OWNER_INDEX, job_uid)
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = drop_managed_fields,
        indexers: Mapping[str, IndexFunc] | None = None,
        settings: InformerSettings | None = None,
    ) -> None:
        if namespace is not None and namespaces:
            raise ValueError("give namespace or namespaces, not both")
        unique = tuple(dict.fromkeys(namespaces or ()))
        if len(unique) == 1:  # one namespace is the plain namespaced informer
            namespace, unique = unique[0], ()
        self.client = client
        self.resource = resource
        #: the namespaces watched, one list/watch each (module docstring); None: ``namespace`` (None: all)
        self.namespaces: tuple[str, ...] | None = unique or None
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.settings = settings or InformerSettings()
        self._transform = transform
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._items: dict[str, Object] = {}
        #: index name -> index value -> keys; and per key the values it is filed under (to unfile it)
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._filed: dict[str, dict[str, list[str]]] = {}
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._relists = 0
        scopes: list[str | None] = list(self.namespaces) if self.namespaces else [namespace]
        #: namespace (None: the one scope of a single list/watch) -> its list/watch
        self._list_watches: dict[str | None, ListWatch] = {
            scope: ListWatch(
                client,
                resource,
                namespace=scope,
                label_selector=label_selector,
                field_selector=field_selector,
                settings=ListWatchSettings(
                    watch_timeout_seconds=self.settings.watch_timeout_seconds,
                    read_timeout=self.settings.inactivity_timeout,
                    min_watch_duration=self.settings.min_watch_duration,
                    backoff=self.settings.backoff,
                ),
                # late-bound, so the hook can be replaced on the instance
                on_backoff=lambda failure, delay, failures: self._log_failure(failure, delay, failures),  # noqa: PLW0108
            )
            for scope in scopes
        }
        self._listed: set[str | None] = set()

    # ----------------------------------------------------------------------------------- configuration

    def add_handler(self, handler: Handler) -> None:
        """Register callbacks; added before :meth:`run`, they see every object of the first list as added."""
        self._handlers.append(handler)

    # -------------------------------------------------------------------------------------------- reads

    def get(self, name: str, *, namespace: str | None = None) -> Object | None:
        """The cached object, or None. Treat it as read-only: it is shared with every reader."""
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def get_by_key(self, key: str) -> Object | None:
        """The cached object under a ``ns/name`` key, or None."""
        return self._items.get(key)

    def list(self, index: str | None = None, value: str | None = None) -> builtins.list[Object]:
        """All cached objects, or those filed under ``value`` in ``index``."""
        if index is None:
            return list(self._items.values())
        keys = self._indices[index].get(value or "", set())
        return [self._items[key] for key in keys]

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def synced(self) -> bool:
        """True once the first list is in the cache (and has been delivered to the handlers)."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait until the first list is in the cache (bound it with ``asyncio.timeout``)."""
        await self._synced.wait()

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark): where a resumed watch starts; None with
        several namespaces (each stream has its own)."""
        if len(self._list_watches) != 1:
            return None
        return next(iter(self._list_watches.values())).resource_version

    @property
    def relists(self) -> int:
        """How many lists the informer has made (one per namespace after the first sync; +1 per 410)."""
        return self._relists

    @property
    def watches(self) -> int:
        """How many watch requests the informer has opened, in all its namespaces."""
        return sum(list_watch.watches for list_watch in self._list_watches.values())

    # ------------------------------------------------------------------------------------------- running

    async def run(self) -> None:
        """List and watch until cancelled; never returns on its own, whatever the server does."""
        resync: asyncio.Task[None] | None = None
        if self.settings.resync_period:
            resync = asyncio.create_task(self._resync_loop(self.settings.resync_period))
        try:
            if len(self._list_watches) == 1:
                ((scope, list_watch),) = self._list_watches.items()
                await self._consume(scope, list_watch)
            else:
                async with asyncio.TaskGroup() as group:
                    for scope, list_watch in self._list_watches.items():
                        group.create_task(self._consume(scope, list_watch), name=f"informer-{self.resource}-{scope}")
        finally:
            if resync is not None:
                resync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await resync

    async def _consume(self, scope: str | None, list_watch: ListWatch) -> None:
        """Feed one list/watch's events into the cache, for ever."""
        slice_ends = time.monotonic() + self.settings.time_slice
        async with contextlib.aclosing(list_watch.events()) as events:
            async for event in events:
                if isinstance(event, Listed):
                    self._relist(event, scope)
                else:
                    self._apply(event)
                if time.monotonic() >= slice_ends:
                    await asyncio.sleep(0)  # others' turn (see InformerSettings.time_slice)
                    slice_ends = time.monotonic() + self.settings.time_slice

    def _log_failure(self, failure: BaseException, delay: float, failures: int) -> None:
        logger.warning("informer %s: %s; retrying in %.2fs (attempt %d)", self._name, failure, delay, failures)

    @property
    def _name(self) -> str:
        where = ",".join(self.namespaces) if self.namespaces else self.namespace or "*"
        return f"{self.resource}[{where}{', ' + self.label_selector if self.label_selector else ''}]"

    def _relist(self, listed: Listed, scope: str | None = None) -> None:
        self._relists += 1
        fresh: dict[str, Object] = {}
        for item in listed.items:
            obj = self._trim(item)
            fresh[object_key(obj)] = obj
        # Whatever vanished while we were not watching was deleted: say so, with its last known state. With
        # several namespaces, only this list's namespace is in question.
        mine = (lambda key: True) if self.namespaces is None else (lambda key: key.startswith(f"{scope}/"))
        for key in [k for k in self._items if k not in fresh and mine(k)]:
            gone = self._items.pop(key)
            self._unfile(key)
            self._call("delete", gone)
        for key, obj in fresh.items():
            cached = self._items.get(key)
            if cached is None:
                self._store(key, obj)
                self._call("add", obj)
            elif _rv(obj) != _rv(cached) and _newer(_rv(obj), _rv(cached)):
                self._store(key, obj)
                self._call("update", cached, obj)
        logger.debug("informer %s: listed %d objects at %s", self._name, len(fresh), listed.resource_version)
        self._listed.add(scope)
        if len(self._listed) == len(self._list_watches):
            self._synced.set()

    def _apply(self, event: WatchEvent) -> None:
        kind, raw = event
        rv = _rv(raw)
        obj = self._trim(raw)
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        key = object_key(obj)
        cached = self._items.get(key)
        if cached is not None and rv and not _newer(rv, _rv(cached)):
            logger.debug("informer %s: dropping stale %s of %s at %s", self._name, kind, key, rv)
            return
        if kind == "DELETED":
            if cached is not None:
                self._items.pop(key)
                self._unfile(key)
            self._call("delete", obj)
        elif kind in ("ADDED", "MODIFIED"):
            self._store(key, obj)
            if cached is None:
                self._call("add", obj)
            else:
                self._call("update", cached, obj)
        else:
            logger.warning("informer %s: unknown watch event type %r", self._name, kind)

    async def _resync_loop(self, period: float) -> None:
        """Re-deliver the cache to the update handlers: a safety net for level-based reconcilers."""
        while True:
            await asyncio.sleep(period)
            if not self.synced:
                continue
            started = time.monotonic()
            for obj in list(self._items.values()):
                self._call("update", obj, obj)
            logger.debug(
                "informer %s: resynced %d objects in %.3fs", self._name, len(self._items), time.monotonic() - started
            )

    # --------------------------------------------------------------------------------------------- inner

    def _trim(self, obj: Object) -> Object:
        return self._transform(obj) if self._transform is not None else obj

    def _store(self, key: str, obj: Object) -> None:
        if key in self._items:
            self._unfile(key)
        self._items[key] = obj
        self._file(key, obj)

    def _file(self, key: str, obj: Object) -> None:
        filed = self._filed.setdefault(key, {})
        for name, func in self._indexers.items():
            values = list(func(obj))
            filed[name] = values
            index = self._indices[name]
            for value in values:
                index.setdefault(value, set()).add(key)

    def _unfile(self, key: str) -> None:
        for name, values in self._filed.pop(key, {}).items():
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _call(self, what: str, *objs: Object) -> None:
        for handler in self._handlers:
            callback: Callable[..., None] | None = getattr(handler, f"on_{what}")
            if callback is None:
                continue
            try:
                callback(*objs)
            except Exception:
                # A broken handler must not stop the cache (and every other handler) from updating.
                logger.exception("informer %s: %s handler failed", self._name, what)
