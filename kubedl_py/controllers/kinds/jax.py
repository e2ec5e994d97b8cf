"""JAXJob's controller half: what ``jax.distributed.initialize`` needs, and success when every worker is done.

Every container gets ``COORDINATOR_ADDRESS`` and ``COORDINATOR_PORT`` (worker 0, which hosts the coordinator
service), ``NUM_PROCESSES`` and ``PROCESS_ID`` (the worker's index), as the Training Operator sets them. In
host-network mode worker 0 binds its own host port and reaches itself at ``localhost``.

Dialed by name: worker 0 only. The other processes meet through the coordinator's key-value store, where
each publishes the address it listens on (gloo and NCCL exchange addresses, not names).
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.kinds.jax import JAXJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds.base import Env, Kind, Slot, replicas


class JAXController(Kind[JAXJob]):
    def rendezvous_env(self, job: JAXJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        if index == 0 and addressing.host_network:
            address, port = "localhost", addressing.listen_port("Worker", 0)
        else:
            address, port = replica_name(job.name, "Worker", 0), addressing.service_port("Worker")
        return {
            "PYTHONUNBUFFERED": "1",
            "COORDINATOR_PORT": str(port),
            "COORDINATOR_ADDRESS": address,
            "NUM_PROCESSES": str(replicas(job, "Worker")),
            "PROCESS_ID": str(index),
        }

    def env_targets(self, job: JAXJob, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return containers

    def dialed(self, job: JAXJob) -> set[Slot]:
        return {("Worker", 0)} if replicas(job, "Worker") > 0 else set()


CONTROLLER = JAXController()
