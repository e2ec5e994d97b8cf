"""One reconcile's decisions about a job, made once from one observation: the plan the reconcile acts on.

What every part of a reconcile used to decide again for itself is decided here, once: the kind's plug-in
(resolved once per reconciler, which serves one kind), the network mode (the one the job's existing objects
were made in, else what it asks for), the addressing (the framework's ports from the templates: built once,
on first use, and given host ports with ``with_ports``) and the replicas peers dial. A plan is immutable; the
observation it carries (``seen``) is where the reconcile stages the status it will write.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import Kind, Slot
from kubedl_py.controllers.observation import Observation
from kubedl_py.controllers.pods import addressing_for
from kubedl_py.controllers.rendezvous import service_slots


@dataclass(frozen=True)
class Plan:
    seen: Observation
    #: the kind's controller half (``controllers/kinds``)
    kind: Kind[Any]
    #: the job's effective network mode: host network or not
    host: bool
    #: why a requested change of network mode is refused, if one is (``network_mode``)
    mode_refusal: str | None = None
    cluster_domain: str | None = None

    @property
    def job(self) -> TrainingJob:
        return self.seen.job

    @property
    def key(self) -> str:
        return self.seen.key

    @functools.cached_property
    def addressing(self) -> Addressing:
        """How replicas are reached, without host ports: built once per reconcile (it reads every template)."""
        return replace(addressing_for(self.job, cluster_domain=self.cluster_domain), host=self.host)

    def with_ports(self, host_ports: dict[Slot, int]) -> Addressing:
        """The addressing with these host ports (host-network mode)."""
        return replace(self.addressing, host_ports=dict(host_ports))

    @functools.cached_property
    def dialed(self) -> frozenset[Slot]:
        """The replicas that get a Service (``rendezvous.service_slots``)."""
        return service_slots(self.job, self.kind)


def make_plan(seen: Observation, kind: Kind[Any], *, cluster_domain: str | None = None) -> Plan:
    host, refusal = network_mode(seen)
    return Plan(seen, kind, host, refusal, cluster_domain)


def network_mode(seen: Observation) -> tuple[bool, str | None]:
    """The job's effective mode (the one its existing objects were made in, else what it asks for:
    ``TrainingJob.host_network``), and why a requested change is refused, if one is."""
    wanted = seen.job.host_network
    actual: bool | None = None
    for replica in seen.replicas.values():
        if replica.pod is not None:
            actual = bool((replica.pod.get("spec") or {}).get("hostNetwork"))
            break
    if actual is None:
        for service in seen.services.values():
            actual = (service.get("spec") or {}).get("clusterIP") != "None"
            break
    if actual is None or actual == wanted:
        return wanted, None
    now, was = ("host", "pod") if wanted else ("pod", "host")
    return actual, (
        f"the job asks for {now} network ({c.ANNOTATION_NETWORK_MODE} and its templates' hostNetwork), but its "
        f"pods and Services were made for {was} network; the change is refused (delete and resubmit the job to "
        "switch modes)"
    )
