"""The reconcile's cross-cutting steps behind one contract: what a step is, and the runner that calls them.

Why: host-network ports, gang PodGroups, RDMA and placement, the kinds' owned objects, Kueue's
Workloads each add to the same reconcile at the same moments: before pods are made, while a pod is built,
when the job is suspended or finishes. Called one by one, each with methods of its own, they made the
reconcile a hub that knew every step. Here each is a :class:`Step`, the reconcile calls each *phase* once
for all of them through :class:`Steps`, in a fixed order, and knows no step by name (a test parses
``job.py`` to keep it so). In the spirit of Kubeflow Trainer v2's per-phase plug-in interfaces, but one
class whose phases all default to "nothing", so a step overrides only the phases it takes part in.

The phases, in the order of one reconcile (docs/architecture.md draws it):

- ``forget(key)``: the job is gone (deleted); drop what is kept about it.
- ``begin(seen)``: this reconcile's instance of the step: ``self``, or a fresh object for a step that keeps
  state for one reconcile only (host network: the ports it reserved, the events it owes).
- ``finish(seen)``: the job has finished (Succeeded or Failed); give back what it held.
- ``hold(seen)``: a reason to keep the job from running, like a suspended job (no pods), or None. Kueue's
  step holds a queued job until its Workload is admitted.
- ``suspend(seen)`` / ``resume(seen)``: the job is (or is held) suspended, its pods gone / it runs again.
- ``observe(seen)``: the job as found, before anything is written (events about it).
- ``recreate(seen)``: replicas whose pods this step wants made again; the reconcile deletes those pods and
  replaces them like any other (host network: a pod no node can take for its host port).
- ``replacing(seen, terminating)``: replicas whose pods are terminating and will be replaced.
- ``admit(seen)``: whether the job's pods may be made now (a gang's PodGroup admitted); False: nothing more
  is made in this reconcile.
- ``owned_objects(seen, addressing)``: objects the job owns besides pods and Services, made before its pods
  (the kinds' ConfigMaps and Secrets).
- ``reserve(seen, missing)``: the replicas about to get pods; a step may write first (host network:
  re-point each one's Service to the port it reserves).
- ``address(seen, addressing, served=...)``: how replicas are reached, for the pods and Services being
  built (``served``: as the job's Services forward now, for comparing them).
- ``build_pod(seen, replica, pod)``: add to a pod being built (RDMA, placement, the gang's scheduler); an
  exception keeps the pod from being made (``JobFailure`` fails the job).
- ``not_created(seen, replica)``: a pod ``reserve`` was told about was not made.
- ``report(seen)``: what this reconcile owes to say (events), also when it failed.
- ``settle(seen)``: after the creates, put right what the step keeps (a Service pointing at its live pod).

The order is the contract, and part of it is a guard: a replica that fails over in host-network mode gets its
Service re-pointed (``replacing``, else ``reserve``) before its new port is reserved for the pod and before
the pod is created; its peers never reach a port no live pod of theirs has (docs/host-network.md).

A step is one module with a factory ``install(wiring) -> Step | None`` (None: not used with these options),
and one line in ``STEPS`` (``setup.py``). ``Wiring`` is what a factory gets: the controller's client,
recorder and options, informers of what the controller owns, and objects shared by every kind's reconciler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from kubedl_py.api import constants as c
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import OwnedObject
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import OWNER_INDEX, Informer, by_owner_uid
from kubedl_py.kube.manager import Manager
from kubedl_py.kube.resources import Resource

Object = dict[str, Any]
#: what the controller made: its informers cache only objects with this label
OWNED_SELECTOR = f"{c.LABEL_CONTROLLER}={c.CONTROLLER_NAME}"

O_co = TypeVar("O_co", covariant=True)
T = TypeVar("T")


class Step:
    """One cross-cutting part of the reconcile. Every phase does nothing by default (see the module docstring
    for what each means and when it runs); a step overrides the phases it takes part in."""

    def watches(self) -> tuple[Informer, ...]:
        """Informers of objects the jobs own (their owner reference) whose changes wake the owning job."""
        return ()

    def forget(self, key: str) -> None:
        """The job ``key`` is gone."""

    def begin(self, seen: Observation) -> Step:
        """This reconcile's instance: ``self``, unless the step keeps state for one reconcile."""
        return self

    async def finish(self, seen: Observation) -> None:
        """The job has finished."""

    async def hold(self, seen: Observation) -> str | None:
        """Why the job may not run now (it is then treated as suspended), or None."""
        return None

    async def suspend(self, seen: Observation) -> None:
        """The job is suspended (or held): its pods and Services are being removed."""

    async def resume(self, seen: Observation) -> None:
        """The job was suspended and runs again."""

    async def observe(self, seen: Observation) -> None:
        """The job as found, before this reconcile writes anything."""

    def recreate(self, seen: Observation) -> list[Replica]:
        """Replicas whose pods should be deleted and made again."""
        return []

    async def replacing(self, seen: Observation, terminating: list[Replica]) -> None:
        """Replicas whose pods are terminating and will be replaced."""

    async def admit(self, seen: Observation) -> bool:
        """Whether the job's pods may be made now."""
        return True

    def owned_objects(self, seen: Observation, addressing: Addressing) -> list[OwnedObject]:
        """Objects the job owns besides pods and Services, made before any of its pods."""
        return []

    async def reserve(self, seen: Observation, missing: list[Replica]) -> None:
        """The replicas about to get pods in this reconcile."""

    def address(self, seen: Observation, addressing: Addressing, *, served: bool = False) -> Addressing:
        """How the replicas are reached (``served``: as the job's Services forward now)."""
        return addressing

    def build_pod(self, seen: Observation, replica: Replica, pod: Object) -> None:
        """Add to ``pod`` (in place), the pod of ``replica`` being built."""

    def not_created(self, seen: Observation, replica: Replica) -> None:
        """The pod of ``replica``, announced by ``reserve``, was not made."""

    async def report(self, seen: Observation) -> None:
        """Say what this reconcile owes to say."""

    async def settle(self, seen: Observation) -> None:
        """Put right what the step keeps, once the reconcile's creates are done."""


class Steps(Step):
    """The steps of one reconciler, in registry order: each phase called on every step, in that order."""

    def __init__(self, steps: tuple[Step, ...] = ()) -> None:
        self.steps = steps

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def watches(self) -> tuple[Informer, ...]:
        return tuple(informer for step in self.steps for informer in step.watches())

    def forget(self, key: str) -> None:
        for step in self.steps:
            step.forget(key)

    def begin(self, seen: Observation) -> Steps:
        return Steps(tuple(step.begin(seen) for step in self.steps))

    async def finish(self, seen: Observation) -> None:
        for step in self.steps:
            await step.finish(seen)

    async def hold(self, seen: Observation) -> str | None:
        for step in self.steps:
            why = await step.hold(seen)
            if why is not None:
                return why
        return None

    async def suspend(self, seen: Observation) -> None:
        for step in self.steps:
            await step.suspend(seen)

    async def resume(self, seen: Observation) -> None:
        for step in self.steps:
            await step.resume(seen)

    async def observe(self, seen: Observation) -> None:
        for step in self.steps:
            await step.observe(seen)

    def recreate(self, seen: Observation) -> list[Replica]:
        due: list[Replica] = []
        for step in self.steps:
            due += [replica for replica in step.recreate(seen) if replica not in due]
        return due

    async def replacing(self, seen: Observation, terminating: list[Replica]) -> None:
        for step in self.steps:
            await step.replacing(seen, terminating)

    async def admit(self, seen: Observation) -> bool:
        for step in self.steps:
            if not await step.admit(seen):
                return False  # the later steps make nothing for a job that may not start yet
        return True

    def owned_objects(self, seen: Observation, addressing: Addressing) -> list[OwnedObject]:
        return [item for step in self.steps for item in step.owned_objects(seen, addressing)]

    async def reserve(self, seen: Observation, missing: list[Replica]) -> None:
        for step in self.steps:
            await step.reserve(seen, missing)

    def address(self, seen: Observation, addressing: Addressing, *, served: bool = False) -> Addressing:
        for step in self.steps:
            addressing = step.address(seen, addressing, served=served)
        return addressing

    def build_pod(self, seen: Observation, replica: Replica, pod: Object) -> None:
        for step in self.steps:
            step.build_pod(seen, replica, pod)

    def not_created(self, seen: Observation, replica: Replica) -> None:
        for step in self.steps:
            step.not_created(seen, replica)

    async def report(self, seen: Observation) -> None:
        for step in self.steps:
            await step.report(seen)

    async def settle(self, seen: Observation) -> None:
        for step in self.steps:
            await step.settle(seen)


@dataclass(frozen=True)
class Wiring(Generic[O_co]):
    """What a step's factory gets, once per reconciler (one per kind and API group).

    ``options`` are the controller's (``setup.ControllerOptions``); a factory declares the part it reads as a
    Protocol (``Wiring[HostNetworkSettings]``), which the registry's type checks against the real options.
    """

    client: KubeClient
    recorder: EventRecorder
    manager: Manager
    options: O_co
    #: the namespaces the controller watches (None: all)
    namespaces: tuple[str, ...] | None = None
    #: the (group, plural) pairs the API server serves (None: not known, assume all)
    served: frozenset[tuple[str, str]] | None = None
    _shared: dict[str, Any] = field(default_factory=dict)

    def serves(self, resource: Resource) -> bool:
        return self.served is None or (resource.group, resource.plural) in self.served

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """One object for the whole controller, made by ``make`` the first time ``name`` is asked for."""
        if name not in self._shared:
            self._shared[name] = make()
        return cast(T, self._shared[name])

    def owned_informer(self, resource: Resource) -> Informer:
        """The (shared) informer of the objects of ``resource`` this controller made, indexed by owner."""
        return self.shared(
            f"owned:{resource.api_version}/{resource.plural}",
            lambda: self.manager.informer(
                resource,
                namespaces=self.namespaces,
                label_selector=OWNED_SELECTOR,
                indexers={OWNER_INDEX: by_owner_uid},
            ),
        )


#: a step's factory: ``install(wiring)`` in the step's module
StepFactory = Callable[[Wiring[T]], Step | None]
