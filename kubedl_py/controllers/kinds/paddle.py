"""PaddleJob's controller half: the Training Operator's variables, and success by the Master (else workers).

Every container gets ``PADDLE_JOB_ID``, ``PADDLE_NNODES`` (all replicas) and ``PADDLE_MASTER``, the endpoint
``paddle.distributed.launch`` rendezvouses at. Collective mode (no Master): worker 0 is the endpoint;
parameter-server mode: Master 0 is, and each pod is one server (``PADDLE_SERVER_NUM=1`` on Masters) or one
trainer (``PADDLE_TRAINER_NUM=1``). The endpoint's own pod announces itself by its pod IP
(``$(POD_IP_DUMMY)``, from the downward API), everyone else by its Service; in host-network mode the pod IP
is the node's and the port its own host port.

Dialed by name: the endpoint's replica only (Master 0, else Worker 0). ``paddle.distributed.launch`` then
has every pod announce its own IP and port at that endpoint, and the ranks dial those.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.kinds.paddle import PaddleJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds.base import Env, Kind, Pods, Slot, all_succeeded, replicas

_POD_IP = {"fieldRef": {"fieldPath": "status.podIP"}}


class PaddleController(Kind[PaddleJob]):
    def rendezvous_env(self, job: PaddleJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        total = sum(replicas(job, t) for t in job.replica_specs)
        host_type = "Master" if replicas(job, "Master") > 0 else "Worker"
        env: dict[str, Any] = {
            "PYTHONUNBUFFERED": "0",
            "PADDLE_JOB_ID": job.name,
            "PADDLE_NNODES": str(total),
        }
        if (replica_type, index) == (host_type, 0):
            env["POD_IP_DUMMY"] = _POD_IP
            env["PADDLE_MASTER"] = f"$(POD_IP_DUMMY):{addressing.listen_port(host_type, 0)}"
        else:
            env["PADDLE_MASTER"] = f"{replica_name(job.name, host_type, 0)}:{addressing.service_port(host_type)}"
        if host_type == "Master":
            env["PADDLE_SERVER_NUM" if replica_type == "Master" else "PADDLE_TRAINER_NUM"] = "1"
        return env

    def env_targets(self, job: PaddleJob, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return containers

    def dialed(self, job: PaddleJob) -> set[Slot]:
        host_type = "Master" if replicas(job, "Master") > 0 else "Worker"
        return {(host_type, 0)} if replicas(job, host_type) > 0 else set()

    def succeeded(self, job: PaddleJob, pods: Pods) -> bool:
        if pods.get("Master"):
            return all_succeeded(list(pods["Master"]))
        return all_succeeded(list(pods.get("Worker", [])))


CONTROLLER = PaddleController()
