"""The kinds' owned objects as a step of the reconcile: what a job owns besides its pods and Services.

A kind plug-in says which (``KindController.owned_objects``: MPI's hostfile ConfigMap and SSH key Secret);
this step hands them to the reconcile in the ``owned_objects`` phase (``steps.py``), which makes them before
any pod, with the job as their owner, and tells a name taken by someone else's object from the job's own.
"""

from __future__ import annotations

from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds import OwnedObject, controller_for
from kubedl_py.controllers.observation import Observation
from kubedl_py.controllers.steps import Step, Wiring


def install(wiring: Wiring[object]) -> KindObjects:
    """The step's factory (``setup.STEPS``): the same for every kind, which decides through its plug-in."""
    return KindObjects()


class KindObjects(Step):
    def owned_objects(self, seen: Observation, addressing: Addressing) -> list[OwnedObject]:
        return controller_for(seen.job.kind).owned_objects(seen.job, addressing)
