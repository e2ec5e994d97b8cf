"""Whose an object is: the owner reference every object of a job carries, and what a job finds in its place.

Its own module because pods, Services, PodGroups and the kinds' extra objects (MPI's ConfigMap and Secret)
all need it, and those modules import one another otherwise.

A job's objects have deterministic names (``<job>-<type>-<i>``), so the name a job needs may already be taken:
by an object of the same job (a lagging cache), by the job's predecessor of the same name (deleted and
resubmitted: the garbage collector has not removed its objects yet), or by something else entirely (a
stranger's Service named ``<job>-master-0``). Only the first may be used. A job's ranks must never be wired
to an object it does not control: its peers would dial a stranger's Service (``MASTER_ADDR``, ``TF_CONFIG``) or
read a stranger's hostfile. The others are :class:`Conflict` s: the job says which object and whose it is,
and makes no pod until the name is free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object

#: condition reasons of a job whose objects' names are taken (``Running`` False)
NAME_IN_USE = "NameInUse"
PREVIOUS_JOB_TERMINATING = "PreviousJobTerminating"


def owner_reference(job: TrainingJob) -> dict[str, Any]:
    """The job as the controlling owner (``blockOwnerDeletion``: foreground deletion waits for its objects)."""
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Object) -> dict[str, Any] | None:
    """The owner reference marked ``controller: true``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


@dataclass(frozen=True)
class Conflict:
    """An object with the name a job needs that the job does not control."""

    kind: str
    namespace: str
    name: str
    #: who controls it, in words ("nothing", "Deployment web", ...)
    owner: str
    #: it belongs to a previous job of the same name and kind, on its way out
    predecessor: bool

    @property
    def reason(self) -> str:
        return PREVIOUS_JOB_TERMINATING if self.predecessor else NAME_IN_USE

    @property
    def message(self) -> str:
        what = f"{self.kind} {self.namespace}/{self.name}"
        if self.predecessor:
            return (
                f"{what} still belongs to {self.owner}, a previous job of this name that is being deleted; "
                "this job's pods are made once it is gone"
            )
        return (
            f"{what} exists and is not this job's (controlled by {self.owner}): no pod of the job is made while it "
            "exists, so no rank is wired to it; delete or rename it, or resubmit the job under another name"
        )


def conflict_of(owner: Mapping[str, Any], found: Object, kind: str) -> Conflict | None:
    """Whether ``found`` (the object in the place of one of a job's, by name; ``owner``: the job's
    :func:`owner_reference`) is the job's own (None) or a :class:`Conflict`."""
    meta = found.get("metadata") or {}
    ref = controller_of(found)
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if ref is not None and str(ref.get("uid")) == str(owner.get("uid")):
        return None
    if ref is None:
        return Conflict(kind, namespace, name, "nothing (no controlling owner)", predecessor=False)
    described = f"{ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"
    labels = meta.get("labels") or {}
    predecessor = (
        ref.get("kind") == owner.get("kind")
        and ref.get("name") == owner.get("name")
        and str(ref.get("apiVersion") or "").split("/")[0] == str(owner.get("apiVersion") or "").split("/")[0]
        and labels.get(c.LABEL_CONTROLLER) == c.CONTROLLER_NAME
    )
    return Conflict(kind, namespace, name, described, predecessor=predecessor)
