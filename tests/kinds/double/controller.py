"""A fifth job kind, as a plug-in author writes it: the controller half (tests/kinds/test_plugins.py uses it)."""

from __future__ import annotations

from typing import Any

from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import Kind, Pods, pod_succeeded, replicas


class RelayController(Kind):
    def rendezvous_env(self, job: Any, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
        leader = addressing.service_host(job.name, "Leader", 0)
        return {
            "RELAY_LEADER": f"{leader}:{addressing.service_port('Leader')}",
            "RELAY_SELF_PORT": str(addressing.listen_port(replica_type, index)),
            "RELAY_FOLLOWERS": str(replicas(job, "Follower")),
            "RELAY_BATON": str(job.spec.baton),
        }

    def succeeded(self, job: Any, pods: Pods) -> bool:
        return bool(pods.get("Leader")) and pod_succeeded(pods["Leader"][0])


CONTROLLER = RelayController()
