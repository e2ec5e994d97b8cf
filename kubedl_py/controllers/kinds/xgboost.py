"""XGBoostJob's controller half: the Training Operator's variables, and success by the Master.

Every container gets ``MASTER_ADDR``/``MASTER_PORT`` (the Master, which runs the Rabit tracker),
``WORLD_SIZE`` (all replicas), ``RANK`` (Master 0, Worker i is i + 1) and ``PYTHONUNBUFFERED``; with more than
one replica also ``WORKER_PORT`` and ``WORKER_ADDRS`` (LightGBM's machine list; the Training Operator lists
workers 0 .. total-2, kept as it is for jobs moved from there). In host-network mode the Master binds its
own host port and reaches itself at ``127.0.0.1``; everyone else uses the Services.

Dialed by name: the Master (the tracker), and the Workers ``WORKER_ADDRS`` names (LightGBM dials them); the
tracker hands the ranks each other's addresses as it saw them connect, not names.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.kinds.xgboost import XGBoostJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds.base import Env, Kind, Pods, Slot, pod_succeeded, replicas


class XGBoostController(Kind[XGBoostJob]):
    def rendezvous_env(self, job: XGBoostJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        total = sum(replicas(job, t) for t in job.replica_specs)
        is_master = replica_type == "Master"
        rank = index + (replicas(job, "Master") if replica_type == "Worker" else 0)
        if is_master and addressing.host_network:
            # 127.0.0.1, not "localhost": a pod's hosts file also maps localhost to ::1, which XGBoost may
            # try alone, and trackers commonly bind 0.0.0.0 (IPv4 only).
            master_addr, master_port = "127.0.0.1", addressing.listen_port("Master", 0)
        else:
            master_addr, master_port = replica_name(job.name, "Master", 0), addressing.service_port("Master")
        env = {
            "MASTER_PORT": str(master_port),
            "MASTER_ADDR": master_addr,
            "WORLD_SIZE": str(total),
            "RANK": str(rank),
            "PYTHONUNBUFFERED": "1",
        }
        if total > 1:
            env["WORKER_PORT"] = str(addressing.service_port("Worker"))
            env["WORKER_ADDRS"] = ",".join(replica_name(job.name, "Worker", i) for i in range(total - 1))
        return env

    def env_targets(self, job: XGBoostJob, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return containers

    def dialed(self, job: XGBoostJob) -> set[Slot]:
        total = sum(replicas(job, t) for t in job.replica_specs)
        listed = range(min(total - 1, replicas(job, "Worker"))) if total > 1 else range(0)
        return {("Master", 0)} | {("Worker", i) for i in listed}

    def succeeded(self, job: XGBoostJob, pods: Pods) -> bool:
        return bool(pods.get("Master")) and pod_succeeded(pods["Master"][0])


CONTROLLER = XGBoostController()
