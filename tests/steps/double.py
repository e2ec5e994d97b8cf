"""A cross-cutting step as a step author writes it: one file (tests/steps/test_steps.py registers it with the
one line a step author adds to ``STEPS`` in ``kubedl_py/controllers/setup.py``).

It takes part in the phases a queueing step such as Kueue's needs: it holds a job its user marks, like a
suspended one (``hold``), adds to every pod being built (``build_pod``), owns one object per job, made before
the pods (``owned_objects``), and says when the job has finished (``finish``).
"""

from __future__ import annotations

from typing import Any

from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds import OwnedObject
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.steps import Step, Wiring
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import CONFIGMAPS

#: while a job has this annotation, the step holds it
HOLD = "stamp.example.com/hold"
#: the label the step puts on every pod
STAMPED = "stamp.example.com/stamped"


def install(wiring: Wiring[object]) -> Stamp:
    return Stamp(wiring.recorder)


class Stamp(Step):
    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self.said: set[str] = set()

    async def hold(self, seen: Observation) -> str | None:
        if HOLD in (seen.job.metadata.annotations or {}):
            return f"held by the stamp step until its {HOLD} annotation is removed"
        return None

    def owned_objects(self, seen: Observation, addressing: Addressing) -> list[OwnedObject]:
        job = seen.job
        hosts = [addressing.service_host(job.name, *slot) for slot in sorted(seen.replicas)]
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{job.name}-stamp"},
            "data": {"replicas": "\n".join(hosts)},
        }
        return [OwnedObject(CONFIGMAPS, body)]

    def build_pod(self, seen: Observation, replica: Replica, pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"][STAMPED] = f"{replica.replica_type.lower()}-{replica.index}"

    async def finish(self, seen: Observation) -> None:
        uid = seen.job.metadata.uid or ""
        if uid not in self.said:
            self.said.add(uid)
            await self.recorder.normal(seen.raw, "Stamped", f"{seen.key} finished; the stamp step saw it through")
