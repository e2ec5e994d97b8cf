"""The embedded cluster's etcd plus watch cache: objects, one resourceVersion counter, watch history.

Everything that changes the cluster goes through :class:`Store` in a single thread of the event loop, so
each write is atomic without locks. Stored objects are never mutated after they are committed (writers build
new dicts), which lets lists, watches and in-process components share them without copying. Each committed
change becomes an :class:`Event` kept in a bounded per-resource history so a watch can resume from any
resourceVersion still in the window, and older ones get 410 Expired as from the real watch cache.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson

log = logging.getLogger(__name__)

Obj = dict[str, Any]
RKey = tuple[str, str]  # (group, plural)
OKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped


def now_iso() -> str:
    """The time now as the API server writes it (RFC 3339, seconds, UTC)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_disruption(pod: Obj, reason: str, message: str) -> Obj | None:
    """The pod with Kubernetes' ``DisruptionTarget=True`` condition (what the Eviction API, the taint manager and
    the pod garbage collector add before they delete a pod), or None when it has ended or is already deleting."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    conditions.append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_iso(),
        }
    )
    return dict(pod, status=dict(status, conditions=conditions))


class Event:
    """One committed change. ``frames`` caches encoded watch frames per output variant."""

    __slots__ = ("before", "frames", "obj", "old", "rkey", "rv", "type")

    def __init__(
        self, type_: str, rkey: RKey, obj: Obj, old: Obj | None, rv: int, *, before: Obj | None = None
    ) -> None:
        self.type = type_
        self.rkey = rkey
        self.obj = obj
        self.old = old
        self.rv = rv
        #: the object as it was just before this event (MODIFIED: ``old``; DELETED: before its removal)
        self.before = before if before is not None else old
        self.frames: dict[Any, bytes] = {}


class LabelMatcher(Protocol):
    """A label selector as the store needs it (the API server's ``selection.LabelSelector``): storage sits
    below the API server and takes its selectors by shape, importing nothing of it."""

    @property
    def empty(self) -> bool: ...

    def matches(self, labels: dict[str, str] | None) -> bool: ...


class ObjectMatcher(Protocol):
    """A field selector as the store needs it (``selection.FieldSelector``)."""

    @property
    def empty(self) -> bool: ...

    def matches(self, obj: Obj) -> bool: ...


class Watcher:
    """A subscription to one resource type; events arrive on ``queue`` (``None`` means: stop)."""

    def __init__(self, rkey: RKey, namespace: str | None, labels: LabelMatcher, fields: ObjectMatcher) -> None:
        self.rkey = rkey
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[tuple[str, Event] | None] = asyncio.Queue()
        self.filtered = not labels.empty or not fields.empty

    def _match(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace", "") != self.namespace:
            return False
        if not self.filtered:
            return True
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def translate(self, ev: Event) -> str | None:
        """The event type this watcher sees, or None (as the watch cache does for selector transitions)."""
        now = self._match(ev.obj)
        if ev.type != "MODIFIED" or ev.old is None:
            return ev.type if now else None
        was = self._match(ev.old)
        if now and was:
            return "MODIFIED"
        if now:
            return "ADDED"
        if was:
            return "DELETED"
        return None

    def offer(self, ev: Event) -> None:
        t = self.translate(ev)
        if t is not None:
            self.queue.put_nowait((t, ev))

    def close(self) -> None:
        self.queue.put_nowait(None)


class Store:
    def __init__(self, history: int = 10000, data_dir: str | os.PathLike[str] | None = None) -> None:
        self.rv = 0
        self.history_size = history
        self.data: dict[RKey, dict[str, dict[str, Obj]]] = {}
        self.uids: dict[str, tuple[RKey, str, str]] = {}
        self.dependents: dict[str, set[tuple[RKey, str, str]]] = {}  # owner uid -> dependents
        self.history: dict[RKey, deque[Event]] = {}
        self.compacted: dict[RKey, int] = {}  # highest rv no longer in history (per resource)
        self.restored_rv = 0  # rv at load: no history before it survives a restart, for any resource
        self.watchers: dict[RKey, set[Watcher]] = {}
        self.listeners: list[Callable[[Event], None]] = []
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._wal: Any = None
        self._flush_handle: asyncio.TimerHandle | None = None
        if self.data_dir is not None:
            self._load()

    # ---- reads --------------------------------------------------------------------------------------------

    def get(self, rkey: RKey, ns: str, name: str) -> Obj | None:
        by_ns = self.data.get(rkey)
        if by_ns is None:
            return None
        objs = by_ns.get(ns)
        return objs.get(name) if objs is not None else None

    def iter(self, rkey: RKey, ns: str | None = None) -> Iterator[Obj]:
        by_ns = self.data.get(rkey)
        if not by_ns:
            return
        if ns is not None:
            objs = by_ns.get(ns)
            if objs:
                yield from objs.values()
            return
        for objs in by_ns.values():
            yield from objs.values()

    def count(self, rkey: RKey, ns: str | None = None) -> int:
        by_ns = self.data.get(rkey) or {}
        if ns is not None:
            return len(by_ns.get(ns) or {})
        return sum(len(v) for v in by_ns.values())

    def by_uid(self, uid: str) -> Obj | None:
        loc = self.uids.get(uid)
        if loc is None:
            return None
        return self.get(*loc)

    # ---- writes -------------------------------------------------------------------------------------------

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, rkey: RKey, obj: Obj, old: Obj | None) -> Event:
        """Store ``obj`` (its metadata.resourceVersion already set to a fresh rv) and emit ADDED/MODIFIED."""
        md = obj["metadata"]
        ns = md.get("namespace", "")
        name = md["name"]
        self.data.setdefault(rkey, {}).setdefault(ns, {})[name] = obj
        uid = md.get("uid")
        if uid:
            self.uids[uid] = (rkey, ns, name)
        self._index_owners(rkey, ns, name, old, obj)
        ev = Event("MODIFIED" if old is not None else "ADDED", rkey, obj, old, int(md["resourceVersion"]))
        self._commit(ev)
        return ev

    def remove(self, rkey: RKey, obj: Obj) -> Event:
        """Remove ``obj``; the DELETED event carries it with a fresh resourceVersion, as the real server does."""
        md = obj["metadata"]
        ns = md.get("namespace", "")
        name = md["name"]
        by_ns = self.data.get(rkey, {})
        objs = by_ns.get(ns)
        old = objs.pop(name, None) if objs is not None else None
        if objs is not None and not objs:
            del by_ns[ns]
        uid = md.get("uid")
        if uid and self.uids.get(uid) == (rkey, ns, name):
            del self.uids[uid]
        self._index_owners(rkey, ns, name, old, None)
        rv = self.next_rv()
        final = dict(obj)
        final["metadata"] = dict(md, resourceVersion=str(rv))
        ev = Event("DELETED", rkey, final, None, rv, before=obj)
        self._commit(ev)
        return ev

    def _index_owners(self, rkey: RKey, ns: str, name: str, old: Obj | None, new: Obj | None) -> None:
        before = {r.get("uid") for r in (old or {}).get("metadata", {}).get("ownerReferences") or []}
        after = {r.get("uid") for r in (new or {}).get("metadata", {}).get("ownerReferences") or []}
        if before == after:
            return
        loc = (rkey, ns, name)
        for uid in before - after:
            deps = self.dependents.get(str(uid))
            if deps is not None:
                deps.discard(loc)
                if not deps:
                    del self.dependents[str(uid)]
        for uid in after - before:
            self.dependents.setdefault(str(uid), set()).add(loc)

    def _commit(self, ev: Event) -> None:
        hist = self.history.get(ev.rkey)
        if hist is None:
            hist = self.history[ev.rkey] = deque()
        hist.append(ev)
        while len(hist) > self.history_size:
            dropped = hist.popleft()
            self.compacted[ev.rkey] = dropped.rv
        for w in self.watchers.get(ev.rkey, ()):
            w.offer(ev)
        for listener in self.listeners:
            try:
                listener(ev)
            except Exception:  # a broken component must not break writes
                log.exception("store listener failed")
        if self._wal is not None:
            md = ev.obj["metadata"]
            rec = [
                ev.type == "DELETED",
                ev.rkey[0],
                ev.rkey[1],
                md.get("namespace", ""),
                md["name"],
                None if ev.type == "DELETED" else ev.obj,
                self.rv,
            ]
            self._wal.write(orjson.dumps(rec) + b"\n")
            self._schedule_flush()

    def drop_resource(self, rkey: RKey) -> None:
        """Forget a resource type entirely (CRD deleted); its watchers are ended."""
        for w in list(self.watchers.get(rkey, ())):
            w.close()
        self.watchers.pop(rkey, None)
        self.history.pop(rkey, None)
        self.compacted.pop(rkey, None)
        self.data.pop(rkey, None)

    # ---- watch --------------------------------------------------------------------------------------------

    def open_window(self) -> None:
        """The watch cache starts now: a watch (or list) from an earlier resourceVersion is too old (410), as
        from a real API server whose watch cache was filled at its start."""
        self.restored_rv = max(self.restored_rv, self.rv)

    def window_start(self, rkey: RKey) -> int:
        """The oldest resourceVersion a watch on ``rkey`` can resume from."""
        return max(self.compacted.get(rkey, 0), self.restored_rv)

    def too_old(self, rkey: RKey, rv: int) -> bool:
        return rv < self.window_start(rkey)

    def state_at(self, rkey: RKey, rv: int, ns: str | None = None) -> list[Obj] | None:
        """The objects of ``rkey`` (in ``ns``) as they were at resourceVersion ``rv``, worked back from the
        current state through the history; None when the history no longer reaches back that far (what
        etcd calls compacted). Lists at a resourceVersion and the pages after the first read this."""
        if self.too_old(rkey, rv):
            return None
        state = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in self.iter(rkey, ns)}
        for ev in reversed(self.history.get(rkey, ())):
            if ev.rv <= rv:
                break
            md = ev.obj["metadata"]
            key = (md.get("namespace", ""), md["name"])
            if ns is not None and key[0] != ns:
                continue
            if ev.type == "ADDED":
                state.pop(key, None)
            elif ev.before is not None:
                state[key] = ev.before
        return list(state.values())

    def expire_history(self, rkey: RKey | None = None) -> None:
        """Drop watch history (a test hook: the next resumption from an older rv gets 410)."""
        for key in [rkey] if rkey is not None else list(self.history):
            self.history.get(key, deque()).clear()
            self.compacted[key] = self.rv

    def subscribe(self, w: Watcher, since: int | None) -> None:
        """Register ``w``; with ``since``, replay retained events newer than it first."""
        if since is not None:
            for ev in self.history.get(w.rkey, ()):
                if ev.rv > since:
                    w.offer(ev)
        self.watchers.setdefault(w.rkey, set()).add(w)

    def unsubscribe(self, w: Watcher) -> None:
        ws = self.watchers.get(w.rkey)
        if ws is not None:
            ws.discard(w)

    def close_watchers(self) -> None:
        for ws in self.watchers.values():
            for w in ws:
                w.close()
        self.watchers.clear()

    # ---- persistence --------------------------------------------------------------------------------------

    def _schedule_flush(self) -> None:
        if self._flush_handle is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_handle = loop.call_later(0.05, self.flush)

    def flush(self) -> None:
        self._flush_handle = None
        if self._wal is not None:
            self._wal.flush()

    def _load(self) -> None:
        assert self.data_dir is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        snap = self.data_dir / "snapshot.json"
        wal = self.data_dir / "wal.jsonl"
        if snap.exists():
            doc = orjson.loads(snap.read_bytes())
            self.rv = int(doc["rv"])
            for rec in doc["objects"]:
                self._restore(rec[0], rec[1], rec[2])
        if wal.exists():
            for line in wal.read_bytes().splitlines():
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    break  # torn last line after a crash
                deleted, group, plural, ns, name, obj, rv = rec
                rkey = (group, plural)
                if deleted:
                    objs = self.data.get(rkey, {}).get(ns, {})
                    gone = objs.pop(name, None)
                    if gone is not None:
                        self.uids.pop(gone["metadata"].get("uid", ""), None)
                        self._index_owners(rkey, ns, name, gone, None)
                else:
                    self._restore(group, plural, obj)
                self.rv = max(self.rv, int(rv))
        # Everything before a restart is outside the watch window, as after an apiserver restart -- also for
        # resource types with no objects left (their deletions are history too).
        self.restored_rv = self.rv
        self._write_snapshot()
        self._wal = wal.open("wb")

    def _restore(self, group: str, plural: str, obj: Obj) -> None:
        rkey = (group, plural)
        md = obj["metadata"]
        ns, name = md.get("namespace", ""), md["name"]
        old = self.get(rkey, ns, name)
        self.data.setdefault(rkey, {}).setdefault(ns, {})[name] = obj
        if md.get("uid"):
            self.uids[md["uid"]] = (rkey, ns, name)
        self._index_owners(rkey, ns, name, old, obj)

    def _write_snapshot(self) -> None:
        assert self.data_dir is not None
        objects = [[g, p, o] for (g, p), by_ns in self.data.items() for objs in by_ns.values() for o in objs.values()]
        tmp = self.data_dir / "snapshot.json.tmp"
        tmp.write_bytes(orjson.dumps({"rv": self.rv, "objects": objects}))
        tmp.replace(self.data_dir / "snapshot.json")

    def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._wal is not None:
            self._wal.close()
            self._wal = None
            self._write_snapshot()
            (self.data_dir / "wal.jsonl").write_bytes(b"")  # type: ignore[operator]
