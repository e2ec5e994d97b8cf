"""A cross-cutting feature as a feature author writes it: one file (tests/steps/test_steps.py registers it with the
one line a feature author adds to ``FEATURES`` in ``kubedl_py/controllers/setup.py``).

It takes part in what a queueing feature such as Kueue's needs, and in nothing else: it holds a job its user
marks, like a suspended one (``Gates``), shapes every pod being built (``ShapesPods``), owns one object per job,
made before the pods (``OwnsObjects``), and says when the job has finished (``Finishes``). It implements no other
contract, so the runner calls it for nothing else.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.kinds import OwnedObject
from kubedl_py.controllers.observation import Replica
from kubedl_py.controllers.plan import Plan
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import CONFIGMAPS

#: while a job has this annotation, the feature holds it
HOLD = "stamp.example.com/hold"
#: the label the feature puts on every pod
STAMPED = "stamp.example.com/stamped"


def install(wiring: Wiring[object]) -> Stamp:
    return Stamp(wiring.recorder)


class Stamp:
    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self.said: set[str] = set()

    async def hold(self, plan: Plan) -> str | None:
        if HOLD in (plan.job.metadata.annotations or {}):
            return f"held by the stamp feature until its {HOLD} annotation is removed"
        return None

    async def admit(self, plan: Plan) -> bool:
        return True

    def owned_objects(self, plan: Plan, addressing: Addressing) -> list[OwnedObject]:
        job = plan.job
        hosts = [addressing.service_host(job.name, *slot) for slot in sorted(plan.seen.replicas)]
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{job.name}-stamp"},
            "data": {"replicas": "\n".join(hosts)},
        }
        return [OwnedObject(CONFIGMAPS, body)]

    def shape_pod(self, plan: Plan, replica: Replica, pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"][STAMPED] = f"{replica.replica_type.lower()}-{replica.index}"

    async def finished(self, plan: Plan) -> None:
        uid = plan.job.metadata.uid or ""
        if uid not in self.said:
            self.said.add(uid)
            await self.recorder.normal(
                plan.seen.raw, "Stamped", f"{plan.key} finished; the stamp feature saw it through"
            )
