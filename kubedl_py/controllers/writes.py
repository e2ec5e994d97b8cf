"""Where a reconcile writes the job's pods, Services and owned objects: creates, deletes, patches.

Every write of those objects goes through :class:`Writes` (the features write their own objects: host network
its Services' target ports, gang its PodGroups, Kueue its Workloads). Writes are bounded per kind
(``--write-concurrency``), with a few slots of their own for replacing a running job's pods, and *expected*
(``observation.Expectations``) so a lagging cache does not cause a second one. Names are deterministic
(``<job>-<type>-<i>``), so a create that races a stale cache gets AlreadyExists, which is not an error when the
object is the job's own (``ownership.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object
from kubedl_py.controllers.memory import Memories
from kubedl_py.controllers.observation import Expectations
from kubedl_py.controllers.ownership import Conflict, conflict_of
from kubedl_py.controllers.refusals import Outcome, Refusal, classify_refusal
from kubedl_py.controllers.status_pacing import StatusYield
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import PODS, SERVICES, Resource

logger = logging.getLogger(__name__)


#: pod/Service writes in flight per job kind, shared by its reconciles (default of ``--write-concurrency``)
WRITE_CONCURRENCY = 32
#: writes in flight per job kind for replacing pods of running jobs, beside WRITE_CONCURRENCY
URGENT_WRITE_CONCURRENCY = 8


class Vanished:
    """``take_over`` found no object: the one that refused our create went meanwhile."""


VANISHED = Vanished()


class Writes:
    def __init__(
        self, client: KubeClient, memories: Memories, status_yield: StatusYield, *, concurrency: int = WRITE_CONCURRENCY
    ) -> None:
        self.client = client
        self.memories = memories
        self.status_yield = status_yield
        self.expectations = Expectations()
        self._writes = asyncio.Semaphore(concurrency)
        # Replacements of a running job's pods (and their Services) do not queue behind the writes of jobs
        # being created: a few slots of their own.
        self._urgent_writes = asyncio.Semaphore(URGENT_WRITE_CONCURRENCY)
        #: the resource of each kind a Conflict was found for (``take_over``), to read it again
        self.conflict_resources: dict[str, Resource] = {PODS.kind: PODS, SERVICES.kind: SERVICES}

    def repairing(self) -> None:
        """Open (or extend) the repair window: kubedl_py.kube.priority."""
        if self.client.write_gate is not None:
            self.client.write_gate.repaired()

    async def gather(self, calls: Iterable[Awaitable[Any]], *, urgent: bool = False) -> list[Any]:
        # A reconcile from the urgent lane always writes through the urgent slots: the shared ones may all be
        # held by other jobs' writes that wait for it at the write gate (kubedl_py.kube.priority).
        slots = self._urgent_writes if urgent or WriteGate.passing() else self._writes

        async def bounded(call: Awaitable[Any]) -> Any:
            with self.status_yield.writing():
                async with slots:
                    return await call

        # Every call runs to its end (no half-cancelled batch); then the first failure is raised.
        results = await asyncio.gather(*(bounded(call) for call in calls), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    async def create(self, resource: Resource, body: Object) -> Refusal | Conflict | None:
        """Create; AlreadyExists is success when the object there is the job's own (deterministic names), and a
        :class:`Conflict` when it is not (``ownership.py``). A refusal of the object (400, 403, 422) is returned
        classified, not raised, so a batch of creates can tell it from a failure a retry may fix."""
        meta = body["metadata"]
        # Strict for pods: a typo in the user's template is refused by name, not dropped (refusals.py).
        strict = "Strict" if resource == PODS else None
        for attempt in (1, 2):
            try:
                await self.client.create(resource, body, namespace=meta["namespace"], field_validation=strict)
            except errors.AlreadyExists:
                taken = await self.take_over(resource, body)
                if not isinstance(taken, Vanished):
                    return taken
                # The object there went between our create and our read: the name is free, so create again.
                # Counting it made would let a pod start before its Service (found by a test, 2026-11-28).
                if attempt == 2:
                    raise RuntimeError(
                        f"{resource.kind} {meta['namespace']}/{meta['name']}: the name was taken and freed twice "
                        "while it was created; trying again later"
                    ) from None
                logger.info("%s/%s: freed while it was created; creating it again", meta["namespace"], meta["name"])
                continue
            except (errors.Invalid, errors.BadRequest, errors.Forbidden, errors.NotFound) as exc:
                refusal = classify_refusal(exc)
                if refusal.outcome is Outcome.GONE:
                    # The namespace is going away, or the job was deleted: nothing to do, but it was not made
                    # (what was reserved for it is given back: a port of a host-network pod).
                    logger.info("%s/%s: not created: %s", meta["namespace"], meta["name"], exc)
                return refusal
            return None
        return None  # unreachable: the second attempt returns or raises

    async def take_over(self, resource: Resource, body: Object) -> Conflict | Vanished | None:
        """An object with the name of one of the job's is there. Usually the job's own (an earlier reconcile, or
        one racing a lagging cache, made it); it may be the job's own made by the controller we replace (KubeDL
        or the Training Operator: same job, so same uid), which our informers do not see for want of our
        labels: it gets them, so the job counts it, and keeps running. Anything else is a Conflict: never used.
        Verified ownership is remembered per job, so the kinds' extra objects (tried while any pod is missing)
        cost one read per job, not one per reconcile."""
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        owner = meta["ownerReferences"][0]
        memory = self.memories.of(f"{namespace}/{owner['name']}")
        if memory.owned is None or memory.owned[0] != owner["uid"]:
            memory.owned = (owner["uid"], set())
        known = memory.owned[1]
        if (resource.plural, name) in known:
            return None
        if resource.plural == "secrets":
            # The controller may not read Secrets (they hold keys): a job's Secret is named after its uid, which
            # no one knows before the job exists (MPI's ``secret_name``).
            return None
        try:
            existing = await self.client.get(resource, name, namespace=namespace)
        except errors.NotFound:
            return VANISHED  # gone since our create was refused: the caller creates again
        conflict = conflict_of(owner, existing, resource.kind)
        if conflict is not None:
            self.conflict_resources[resource.kind] = resource
            logger.info("%s/%s: %s", namespace, name, conflict.message)
            return conflict
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if resource in (PODS, SERVICES) and labels.get(c.LABEL_CONTROLLER) != c.CONTROLLER_NAME:
            patch = {"metadata": {"labels": meta["labels"]}}
            with contextlib.suppress(errors.NotFound):
                await self.client.patch(resource, name, patch, namespace=namespace)
                logger.info("%s/%s: adopted %s made by another controller", namespace, name, resource.kind)
        elif resource not in (PODS, SERVICES):
            known.add((resource.plural, name))
        return None

    async def delete_pod(self, pod: Object) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        self.expectations.expect_delete(uid)
        try:
            await self.client.delete(PODS, str(meta.get("name")), namespace=meta.get("namespace"), uid=uid)
        except errors.NotFound:
            self.expectations.deletes.pop(uid, None)
        except Exception:
            # Conflict (the uid precondition: a newer pod took the name) or a server error: forget the
            # expectation and let the reconcile fail, so it runs again on what the cache then shows.
            self.expectations.deletes.pop(uid, None)
            raise

    async def delete_pods(self, pods: Iterable[Object]) -> None:
        await self.gather(self.delete_pod(pod) for pod in pods)

    async def force_delete_pod(self, pod: Object) -> None:
        """Delete a pod on a lost node at once (grace period 0): no kubelet will confirm a graceful deletion."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        self.expectations.expect_delete(uid)
        try:
            await self.client.delete(
                PODS, str(meta.get("name")), namespace=meta.get("namespace"), uid=uid, grace_period_seconds=0
            )
        except (errors.NotFound, errors.Conflict):
            self.expectations.deletes.pop(uid, None)  # gone already, or a newer pod has the name

    def leaving(self, pod: Object) -> bool:
        """Whether a pod is on its way out already (being deleted, or a delete of it expected)."""
        meta = pod.get("metadata") or {}
        return bool(meta.get("deletionTimestamp")) or self.expectations.pending_delete(str(meta.get("uid")))

    async def annotate_pods(self, pods: Iterable[Object], annotations: dict[str, str]) -> list[Object]:
        """Set ``annotations`` on each pod, on its uid (a JSON patch testing it: a newer pod of the name is not
        touched); a pod gone or replaced meanwhile is skipped (the next reconcile sees it). Returns the pods
        not patched."""

        async def annotate(pod: Object) -> Object | None:
            meta = pod.get("metadata") or {}
            ops: list[Object] = [{"op": "test", "path": "/metadata/uid", "value": str(meta.get("uid"))}]
            if meta.get("annotations") is None:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            for key, value in annotations.items():
                path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
                ops.append({"op": "add", "path": path, "value": value})
            try:
                await self.client.patch(
                    PODS, str(meta.get("name")), ops, namespace=meta.get("namespace"), patch_type="json"
                )
            except (errors.NotFound, errors.Conflict, errors.Invalid):
                return pod
            return None

        return [pod for pod in await self.gather(annotate(pod) for pod in pods) if pod is not None]

    async def delete_service(self, service: Object) -> None:
        """Delete one of the job's Services, on its uid: if the name now holds another Service (ours went and a
        stranger's took the name), that one is not ours to delete. That Conflict fails the reconcile, which
        runs again on what the cache then shows (the stranger's is not the job's, so it is left alone)."""
        meta = service.get("metadata") or {}
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(
                SERVICES, str(meta.get("name")), namespace=meta.get("namespace"), uid=str(meta.get("uid"))
            )

    async def delete_services(self, services: Iterable[Object]) -> None:
        await self.gather(self.delete_service(service) for service in services)

    async def patch_service(self, name: str, namespace: str, patch: Object) -> None:
        with contextlib.suppress(errors.NotFound):
            await self.client.patch(SERVICES, name, patch, namespace=namespace)
