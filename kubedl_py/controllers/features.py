"""What cuts across every kind (host network, gang PodGroups, Kueue, RDMA and placement) as *features* of the
reconcile, each behind the narrow contracts it takes part in, and the runner that calls them.

A feature is one module with a factory ``install(wiring) -> feature | None`` (None: not used with these
options) and one line in ``FEATURES`` (``setup.py``). It implements only the protocols below that it takes part
in; the runner (:class:`Features`) finds them by type and calls them in registry order. The reconcile
(``job.py``) names no feature (a test parses it to keep it so).

The contracts, and where in a reconcile each is called (``job.py``'s module docstring is the one place that
gives the whole order of a reconcile; docs/architecture.md draws it):

- :class:`Watches`: informers of objects the jobs own whose changes wake the owning job.
- :class:`Remembers`: ``forget(key)`` when a job is gone.
- :class:`PerReconcile`: ``begin(plan)`` gives this reconcile's instance of the feature, for a feature that keeps
  state for one reconcile (host network: the ports it reserved, the events it owes; Kueue: the job's gate); the
  instance implements the other protocols.
- :class:`Gates`: ``hold(plan)``, a reason to keep the job from running (treated as suspended: Kueue's queued
  job), and ``admit(plan)``, whether its pods may be made now (a gang's PodGroup admitted).
- :class:`ShapesPods`: ``shape_pod(plan, replica, pod)`` adds to a pod being built (RDMA, placement, the gang's
  scheduler, Kueue's flavors); an exception keeps the pod from being made (``JobFailure`` fails the job).
- :class:`OwnsObjects`: objects the job owns besides pods and Services, made before its pods.
- :class:`Suspends` / :class:`Finishes`: the job is suspended (its pods gone) / runs again; the job has finished.
- :class:`AroundCreates`: what a feature does around the reconcile's creates; host network only: ``observe``
  (events about the job as found), ``recreate`` (replicas whose pods it wants made again), ``replacing`` (the
  replacements of terminating pods prepared), ``reserve`` (the replicas about to get pods), ``address`` (how
  replicas are reached, for the pods and Services being built; ``served``: as the job's Services forward now),
  ``not_created`` (a pod ``reserve`` was told about was not made), ``report`` (the events owed, also when the
  reconcile failed), ``settle`` (after the creates: a Service pointing at its live pod).

Part of the order is a guard: a replica that fails over in host-network mode gets its Service re-pointed
(``replacing``, else ``reserve``) before its new port is reserved for the pod and before the pod is created; its
peers never reach a port no live pod of theirs has (docs/host-network.md).

``Wiring`` is what a factory gets: the controller's client, recorder and options, informers of what the
controller owns, and objects shared by every kind's reconciler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import OwnedObject
from kubedl_py.controllers.observation import Replica
from kubedl_py.controllers.plan import Plan
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import OWNER_INDEX, Informer, by_owner_uid
from kubedl_py.kube.manager import Manager
from kubedl_py.kube.resources import Resource

#: what the controller made: its informers cache only objects with this label
OWNED_SELECTOR = f"{c.LABEL_CONTROLLER}={c.CONTROLLER_NAME}"

O_co = TypeVar("O_co", covariant=True)
T = TypeVar("T")


class Watches(Protocol):
    def watches(self) -> tuple[Informer, ...]:
        """Informers of objects the jobs own (their owner reference) whose changes wake the owning job."""
        ...


class Remembers(Protocol):
    def forget(self, key: str) -> None:
        """The job ``key`` is gone: drop what is kept about it."""
        ...


class PerReconcile(Protocol):
    def begin(self, plan: Plan) -> object:
        """This reconcile's instance of the feature (it implements the feature's other protocols)."""
        ...


class Gates(Protocol):
    async def hold(self, plan: Plan) -> str | None:
        """Why the job may not run now (it is then treated as suspended), or None."""
        ...

    async def admit(self, plan: Plan) -> bool:
        """Whether the job's pods may be made now."""
        ...


class ShapesPods(Protocol):
    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        """Add to ``pod`` (in place), the pod of ``replica`` being built."""
        ...


class OwnsObjects(Protocol):
    def owned_objects(self, plan: Plan, addressing: Addressing) -> list[OwnedObject]:
        """Objects the job owns besides pods and Services, made before any of its pods."""
        ...


class Suspends(Protocol):
    async def suspended(self, plan: Plan) -> None:
        """The job is suspended (or held): its pods and Services are being removed."""
        ...

    async def resumed(self, plan: Plan) -> None:
        """The job was suspended and runs again."""
        ...


class Finishes(Protocol):
    async def finished(self, plan: Plan) -> None:
        """The job has finished (Succeeded or Failed): give back what it held."""
        ...


class AroundCreates(Protocol):
    async def observe(self, plan: Plan) -> None: ...

    def recreate(self, plan: Plan) -> list[Replica]: ...

    async def replacing(self, plan: Plan, terminating: list[Replica]) -> None: ...

    async def reserve(self, plan: Plan, missing: list[Replica]) -> None: ...

    def address(self, plan: Plan, addressing: Addressing, *, served: bool = False) -> Addressing: ...

    def not_created(self, plan: Plan, replica: Replica) -> None: ...

    async def report(self, plan: Plan) -> None: ...

    async def settle(self, plan: Plan) -> None: ...


class Features:
    """The features of one reconciler, in registry order (``setup.FEATURES``); each call goes to the features that
    implement its protocol, in that order."""

    def __init__(self, features: tuple[object, ...] = ()) -> None:
        self.features = features
        self._per_reconcile = any(PerReconcile in _roles(type(f)) for f in features)

    def __iter__(self) -> Iterator[object]:
        return iter(self.features)

    def watches(self) -> tuple[Informer, ...]:
        watching: list[Watches] = _having(self.features, Watches)
        return tuple(informer for f in watching for informer in f.watches())

    def forget(self, key: str) -> None:
        remembering: list[Remembers] = _having(self.features, Remembers)
        for feature in remembering:
            feature.forget(key)

    def begin(self, plan: Plan) -> Session:
        """The features of one reconcile: those with per-reconcile state begun for it."""
        if not self._per_reconcile:
            return Session(self.features)
        return Session(
            tuple(cast(PerReconcile, f).begin(plan) if PerReconcile in _roles(type(f)) else f for f in self.features)
        )


_ROLES: dict[type, frozenset[object]] = {}
_CONTRACTS: tuple[Any, ...] = ()


def _roles(kind: type) -> frozenset[object]:
    """The contracts a class of feature implements (found once per class: a protocol's isinstance is slow)."""
    roles = _ROLES.get(kind)
    if roles is None:
        roles = frozenset(c for c in _CONTRACTS if all(hasattr(kind, name) for name in _members(c)))
        _ROLES[kind] = roles
    return roles


def _members(contract: type) -> tuple[str, ...]:
    return tuple(name for name in vars(contract) if not name.startswith("_"))


def _having(features: tuple[object, ...], contract: object) -> list[Any]:
    return [f for f in features if contract in _roles(type(f))]


class Session:
    """The features of one reconcile, each protocol's implementers found once."""

    def __init__(self, features: tuple[object, ...]) -> None:
        self.features = features
        self.gates: list[Gates] = _having(features, Gates)
        self.shapers: list[ShapesPods] = _having(features, ShapesPods)
        self.owners: list[OwnsObjects] = _having(features, OwnsObjects)
        self.suspenders: list[Suspends] = _having(features, Suspends)
        self.finishers: list[Finishes] = _having(features, Finishes)
        self.around: list[AroundCreates] = _having(features, AroundCreates)

    async def finished(self, plan: Plan) -> None:
        for feature in self.finishers:
            await feature.finished(plan)

    async def hold(self, plan: Plan) -> str | None:
        for feature in self.gates:
            why = await feature.hold(plan)
            if why is not None:
                return why
        return None

    async def admit(self, plan: Plan) -> bool:
        for feature in self.gates:
            if not await feature.admit(plan):
                return False  # the later features make nothing for a job that may not start yet
        return True

    async def suspended(self, plan: Plan) -> None:
        for feature in self.suspenders:
            await feature.suspended(plan)

    async def resumed(self, plan: Plan) -> None:
        for feature in self.suspenders:
            await feature.resumed(plan)

    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        for feature in self.shapers:
            feature.shape_pod(plan, replica, pod)

    def owned_objects(self, plan: Plan, addressing: Addressing) -> list[OwnedObject]:
        return [item for feature in self.owners for item in feature.owned_objects(plan, addressing)]

    async def observe(self, plan: Plan) -> None:
        for feature in self.around:
            await feature.observe(plan)

    def recreate(self, plan: Plan) -> list[Replica]:
        due: list[Replica] = []
        for feature in self.around:
            due += [replica for replica in feature.recreate(plan) if replica not in due]
        return due

    async def replacing(self, plan: Plan, terminating: list[Replica]) -> None:
        for feature in self.around:
            await feature.replacing(plan, terminating)

    async def reserve(self, plan: Plan, missing: list[Replica]) -> None:
        for feature in self.around:
            await feature.reserve(plan, missing)

    def address(self, plan: Plan, *, served: bool = False) -> Addressing:
        """How the job's replicas are reached, as the features say (host network: each on its host port)."""
        addressing = plan.addressing
        for feature in self.around:
            addressing = feature.address(plan, addressing, served=served)
        return addressing

    def not_created(self, plan: Plan, replica: Replica) -> None:
        for feature in self.around:
            feature.not_created(plan, replica)

    async def report(self, plan: Plan) -> None:
        for feature in self.around:
            await feature.report(plan)

    async def settle(self, plan: Plan) -> None:
        for feature in self.around:
            await feature.settle(plan)


_CONTRACTS = (Watches, Remembers, PerReconcile, Gates, ShapesPods, OwnsObjects, Suspends, Finishes, AroundCreates)


@dataclass(frozen=True)
class Wiring(Generic[O_co]):
    """What a feature's factory gets, once per reconciler (one per kind and API group).

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

    def discovered(self, resource: Resource) -> bool:
        """Whether discovery found ``resource`` served (unlike :meth:`serves`, no discovery is no)."""
        return self.served is not None and (resource.group, resource.plural) in self.served

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


#: a feature's factory: ``install(wiring)`` in the feature's module (None: not used with these options)
FeatureFactory = Callable[[Wiring[T]], object | None]
