"""The garbage collector and the namespace controller.

Owner references only mean something if someone acts on them: when an owner goes away its dependents are
deleted (Background), or deleted first while the owner waits with the ``foregroundDeletion`` finalizer
(Foreground), or released by removing the reference (``orphan`` finalizer). Dependents whose owner uid does
not exist are collected too. Deleting a namespace deletes everything in it before the namespace goes.
Both run in-process against the store (no HTTP), reacting to store events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.patch import deepcopy_json
from kubedl_local.apiserver.registry import Registry
from kubedl_local.storage.store import Event, Obj, now_iso

log = logging.getLogger(__name__)

Loc = tuple[tuple[str, str], str, str]


class GarbageCollector:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.store = registry.store
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="local-gc")
        # Objects restored from disk may reference owners that are gone.
        for by_ns in list(self.store.data.values()):
            for objs in by_ns.values():
                for o in objs.values():
                    if o["metadata"].get("ownerReferences"):
                        self.queue.put_nowait(("check", o["metadata"]["uid"]))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _on_event(self, ev: Event) -> None:
        md = ev.obj["metadata"]
        if ev.type == "DELETED":
            uid = md.get("uid")
            if uid and uid in self.store.dependents:
                self.queue.put_nowait(("owner-gone", uid))
            # A dependent went away: a foreground owner may be free now.
            for ref in md.get("ownerReferences") or []:
                self.queue.put_nowait(("owner-check", ref.get("uid")))
            return
        fins = md.get("finalizers") or ()
        if md.get("deletionTimestamp") and ("foregroundDeletion" in fins or "orphan" in fins):
            self.queue.put_nowait(("owner-check", md.get("uid")))
        refs = md.get("ownerReferences")
        changed = refs and (ev.old is None or ev.old["metadata"].get("ownerReferences") != refs)
        if changed and any(r.get("uid") not in self.store.uids for r in refs):
            self.queue.put_nowait(("check", md.get("uid")))
        if ev.type == "MODIFIED" and md.get("deletionTimestamp") and refs:
            for ref in refs:
                self.queue.put_nowait(("owner-check", ref.get("uid")))

    async def _run(self) -> None:
        while True:
            kind, uid = await self.queue.get()
            try:
                if kind == "owner-gone":
                    for loc in list(self.store.dependents.get(uid, ())):
                        self._check_dependent(loc)
                elif kind == "check":
                    found = self.store.uids.get(uid)
                    if found is not None:
                        self._check_dependent(found)
                elif kind == "owner-check":
                    self._check_owner(uid)
            except ApiError as e:
                if e.code not in (404, 409):
                    log.warning("garbage collector: %s", e.message)
            except Exception:
                log.exception("garbage collector failed")

    def _owner_present(self, ref: dict[str, Any], dep_ns: str) -> bool:
        loc = self.store.uids.get(str(ref.get("uid")))
        if loc is None:
            return False
        rt = self.registry.catalogue.types.get(loc[0])
        # A namespaced owner must be in the dependent's namespace.
        return not (rt is not None and rt.namespaced and loc[1] != dep_ns)

    def _check_dependent(self, loc: Loc) -> None:
        rkey, ns, name = loc
        obj = self.store.get(rkey, ns, name)
        rt = self.registry.catalogue.types.get(rkey)
        if obj is None or rt is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return
        present = [r for r in refs if self._owner_present(r, ns)]
        if not present:
            if obj["metadata"].get("deletionTimestamp"):
                return
            # Every owner is gone: delete the dependent, its own dependents in the background (as the real
            # collector does for a dangling dependent; foreground owners are handled in _check_owner).
            self.registry.delete(rt, ns, name, {"propagationPolicy": "Background"})
            return
        if len(present) < len(refs):
            new = deepcopy_json(obj)
            new["metadata"]["ownerReferences"] = present
            self.registry._update(rt, obj, new, None)

    def _check_owner(self, uid: Any) -> None:
        loc = self.store.uids.get(str(uid))
        if loc is None:
            return
        rkey, ns, name = loc
        owner = self.store.get(rkey, ns, name)
        rt = self.registry.catalogue.types.get(rkey)
        if owner is None or rt is None or not owner["metadata"].get("deletionTimestamp"):
            return
        fins = list(owner["metadata"].get("finalizers") or [])
        deps = [
            d
            for d in (self.store.get(*loc2) for loc2 in list(self.store.dependents.get(str(uid), ())))
            if d is not None
        ]
        if "orphan" in fins:
            for d in deps:
                drt = self.registry.catalogue.types.get(self.store.uids[d["metadata"]["uid"]][0])
                if drt is None:
                    continue
                new = deepcopy_json(d)
                new["metadata"]["ownerReferences"] = [
                    r for r in d["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
                ]
                if not new["metadata"]["ownerReferences"]:
                    del new["metadata"]["ownerReferences"]
                self.registry._update(drt, d, new, None)
            self._drop_finalizer(rt, owner, "orphan")
            return
        if "foregroundDeletion" in fins:
            blocking = False
            for d in deps:
                dloc = self.store.uids[d["metadata"]["uid"]]
                drt = self.registry.catalogue.types.get(dloc[0])
                refs = d["metadata"].get("ownerReferences") or []
                ref: dict[str, Any] = next((r for r in refs if r.get("uid") == uid), {})
                if ref.get("blockOwnerDeletion"):
                    blocking = True
                if drt is not None and not d["metadata"].get("deletionTimestamp"):
                    self.registry.delete(drt, dloc[1], dloc[2], {"propagationPolicy": "Foreground"})
            if not blocking:
                owner = self.store.get(rkey, ns, name) or owner
                self._drop_finalizer(rt, owner, "foregroundDeletion")

    def _drop_finalizer(self, rt: Any, obj: Obj, fin: str) -> None:
        new = deepcopy_json(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != fin]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        self.registry._update(rt, obj, new, None)


class NamespaceController:
    """Empties terminating namespaces, then removes their ``kubernetes`` finalizer."""

    def __init__(self, registry: Registry, interval: float = 0.2) -> None:
        self.registry = registry
        self.store = registry.store
        self.pending: set[str] = set()
        self.wake = asyncio.Event()
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    def start(self) -> None:
        for ns in self.store.iter(("", "namespaces")):
            if ns["metadata"].get("deletionTimestamp"):
                self.pending.add(ns["metadata"]["name"])
        self._task = asyncio.create_task(self._run(), name="local-namespace-controller")
        self.wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _on_event(self, ev: Event) -> None:
        if ev.rkey == ("", "namespaces") and ev.type != "DELETED" and ev.obj["metadata"].get("deletionTimestamp"):
            self.pending.add(ev.obj["metadata"]["name"])
            self.wake.set()
        elif ev.type == "DELETED" and self.pending and ev.obj["metadata"].get("namespace") in self.pending:
            self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            for ns in list(self.pending):
                try:
                    if self._sync(ns):
                        self.pending.discard(ns)
                except Exception:
                    log.exception("namespace controller failed for %s", ns)
            if self.pending:
                await asyncio.sleep(self.interval)  # re-check lingering objects (finalizers, graceful pods)
                self.wake.set()

    def _conditions(self, ns: str, remaining: dict[str, int], finalizers: dict[str, int]) -> None:
        """namespaceConditionUpdater: the five deletion conditions, written when they change."""
        nso = self.store.get(("", "namespaces"), "", ns)
        if nso is None:
            return
        found: dict[str, tuple[str, str, str]] = {
            "NamespaceDeletionDiscoveryFailure": (
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            "NamespaceDeletionGroupVersionParsingFailure": (
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            "NamespaceDeletionContentFailure": (
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            "NamespaceContentRemaining": ("False", "ContentRemoved", "All content successfully removed"),
            "NamespaceFinalizersRemaining": (
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        }
        if remaining:
            listed = sorted(f"{res} has {n} resource instances" for res, n in remaining.items())
            found["NamespaceContentRemaining"] = (
                "True",
                "SomeResourcesRemain",
                "Some resources are remaining: " + ", ".join(listed),
            )
        if finalizers:
            listed = sorted(f"{fin} in {n} resource instances" for fin, n in finalizers.items())
            found["NamespaceFinalizersRemaining"] = (
                "True",
                "SomeFinalizersRemain",
                "Some content in the namespace has finalizers remaining: " + ", ".join(listed),
            )
        old = list((nso.get("status") or {}).get("conditions") or [])
        by_type = {c.get("type"): c for c in old}
        changed = False
        conditions = list(old)
        for kind, (status, reason, message) in found.items():
            current = by_type.get(kind)
            if current is None:
                conditions.append(
                    {
                        "type": kind,
                        "status": status,
                        "lastTransitionTime": now_iso(),
                        "reason": reason,
                        "message": message,
                    }
                )
                changed = True
            elif (current.get("status"), current.get("reason"), current.get("message")) != (status, reason, message):
                updated = dict(current, status=status, reason=reason, message=message)
                if current.get("status") != status:
                    updated["lastTransitionTime"] = now_iso()
                conditions[conditions.index(current)] = updated
                changed = True
        if not changed:
            return
        new = deepcopy_json(nso)
        new.setdefault("status", {})["conditions"] = conditions
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(("", "namespaces"), new, nso)

    def _sync(self, ns: str) -> bool:
        """True when the namespace is gone."""
        nso = self.store.get(("", "namespaces"), "", ns)
        if nso is None:
            return True
        # As the real namespace deleter: pods first, the rest once no pod is left; what remains (and which
        # finalizers hold it) is reported in the namespace's status conditions.
        kinds = [rt for rt in self.registry.catalogue.types.values() if rt.namespaced]
        kinds.sort(key=lambda rt: rt.key != ("", "pods"))
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rt in kinds:
            for obj in list(self.store.iter(rt.key, ns)):
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        self.registry.delete(rt, ns, obj["metadata"]["name"], {})
            for obj in self.store.iter(rt.key, ns):
                remaining[f"{rt.plural}.{rt.group}"] = remaining.get(f"{rt.plural}.{rt.group}", 0) + 1
                for fin in obj["metadata"].get("finalizers") or []:
                    finalizers[fin] = finalizers.get(fin, 0) + 1
            if rt.key == ("", "pods") and remaining:
                self._conditions(ns, {}, {})
                return False
        self._conditions(ns, remaining, finalizers)
        if remaining:
            return False
        nso = self.store.get(("", "namespaces"), "", ns) or nso  # the conditions may have been written
        if nso["metadata"].get("finalizers"):
            # Held by a metadata finalizer: clear spec.finalizers once, then wait without writing.
            if (nso.get("spec") or {}).get("finalizers"):
                new = deepcopy_json(nso)
                new.setdefault("spec", {})["finalizers"] = []
                new["metadata"]["resourceVersion"] = str(self.store.next_rv())
                self.store.put(("", "namespaces"), new, nso)
            return False
        self.store.remove(("", "namespaces"), nso)
        return True
