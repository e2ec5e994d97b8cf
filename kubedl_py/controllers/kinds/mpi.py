"""MPIJob's controller half: a hostfile, an SSH key, the launcher after its workers, and ``mpirun``'s settings.

What the job owns besides pods and Services (created before any pod, deleted with the job by the garbage
collector):

- ConfigMap ``<job>-config`` with ``hostfile``: one line per Worker, naming the Worker's *Service*
  (``<job>-worker-<i>.<ns>.svc``) with its slots (``slots=N`` for Open MPI, ``host:N`` for Intel MPI and
  MPICH); with ``runLauncherAsWorker`` the launcher comes first. Mounted at ``/etc/mpi`` in the launcher.
- Secret ``<job>-ssh-<uid>`` (type ``kubernetes.io/ssh-auth``): a fresh ed25519 key pair per job, mounted at
  ``sshAuthMountPath`` (default ``/root/.ssh``) in every pod as ``id_ed25519``, ``id_ed25519.pub`` and
  ``authorized_keys``, mode 0600, so the launcher's ``ssh`` and every Worker's ``sshd`` trust each other.

Settings: every pod gets ``K_MPI_JOB_ROLE`` (``launcher``/``worker``) and ``SSHD_PORT``, the port its sshd
must listen on — 22, or in host-network mode the pod's own random host port. Peers never see that port:
the hostfile names Services, whose port is 22 and whose ``targetPort`` is the host port, so ``ssh`` and
``mpirun`` need no per-host port and a Worker that fails over to a new port is reached unchanged. The
launcher gets the implementation's variables: the hostfile's path and the ``ssh`` options (no host-key
prompt, nothing written to the read-only key mount, retries while a Worker's sshd starts).

The launcher is created only once every Worker has started (running, or already succeeded): its ``mpirun``
would otherwise find no sshd;
the job succeeds when the launcher does.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubedl_py.api.kinds.mpi import MPIJob
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import (
    Env,
    KindController,
    Object,
    OwnedObject,
    Pods,
    pod_running,
    pod_succeeded,
    replicas,
)
from kubedl_py.kube.resources import CONFIGMAPS, SECRETS

CONFIG_MOUNT = "/etc/mpi"
HOSTFILE = f"{CONFIG_MOUNT}/hostfile"
CONFIG_VOLUME = "mpi-job-config"
SSH_VOLUME = "ssh-auth"
# StrictHostKeyChecking: a Worker's host key is new on every start; UserKnownHostsFile: the key mount is
# read-only; ConnectionAttempts: a Worker's sshd may still be starting when mpirun connects.
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 -o LogLevel=ERROR"


def config_name(job: MPIJob) -> str:
    return f"{job.name}-config"


def secret_name(job: MPIJob) -> str:
    """``<job>-ssh-<first 8 characters of the job's uid>``: a name nobody can take before the job exists. The
    controller may create Secrets but not read them (they hold keys), so it could not tell a stranger's Secret
    of a guessable name from the job's own; this one cannot be waiting for the job (docs/host-network.md)."""
    uid = (job.metadata.uid or "").replace("-", "")[:8]
    return f"{job.name}-ssh-{uid}" if uid else f"{job.name}-ssh"


def hostfile(job: MPIJob, addressing: Addressing) -> str:
    slots = job.spec.slots_per_worker or 1
    hosts = [addressing.service_host(job.name, "Worker", i) for i in range(replicas(job, "Worker"))]
    if job.spec.run_launcher_as_worker:
        hosts.insert(0, addressing.service_host(job.name, "Launcher", 0))
    if job.spec.mpi_implementation in ("Intel", "MPICH"):
        return "".join(f"{host}:{slots}\n" for host in hosts)
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def launcher_env(job: MPIJob) -> dict[str, str]:
    implementation = job.spec.mpi_implementation
    if implementation == "Intel":
        return {"I_MPI_HYDRA_HOST_FILE": HOSTFILE, "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": SSH_OPTIONS}
    if implementation == "MPICH":
        return {"HYDRA_HOST_FILE": HOSTFILE, "HYDRA_LAUNCH_EXTRA_ARGS": SSH_OPTIONS}
    return {
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": SSH_OPTIONS,
    }


def ssh_key_pair() -> tuple[bytes, bytes]:
    """A fresh ed25519 key pair: (private key in OpenSSH format, public key line)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


class MPIController(KindController):
    def rendezvous_env(self, job: Any, replica_type: str, index: int, addressing: Addressing) -> Env:
        assert isinstance(job, MPIJob)
        env = {
            "K_MPI_JOB_ROLE": replica_type.lower(),
            "SSHD_PORT": str(addressing.listen_port(replica_type, index)),
        }
        if replica_type == "Launcher":
            env.update(launcher_env(job))
        return env

    def amend_pod(self, job: Any, replica_type: str, index: int, pod_spec: Object, targets: list[Object]) -> None:
        assert isinstance(job, MPIJob)
        volumes = pod_spec.setdefault("volumes", [])
        mount_path = job.spec.ssh_auth_mount_path or "/root/.ssh"
        volumes.append(
            {
                "name": SSH_VOLUME,
                "secret": {
                    "secretName": secret_name(job),
                    "defaultMode": 0o600,
                    "items": [
                        {"key": "ssh-privatekey", "path": "id_ed25519"},
                        {"key": "ssh-publickey", "path": "id_ed25519.pub"},
                        {"key": "ssh-publickey", "path": "authorized_keys"},
                    ],
                },
            }
        )
        mounts = [{"name": SSH_VOLUME, "mountPath": mount_path}]
        if replica_type == "Launcher":
            volumes.append(
                {
                    "name": CONFIG_VOLUME,
                    "configMap": {"name": config_name(job), "items": [{"key": "hostfile", "path": "hostfile"}]},
                }
            )
            mounts.append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT})
        for container in targets:
            container.setdefault("volumeMounts", []).extend(dict(mount) for mount in mounts)

    def succeeded(self, job: Any, pods: Pods) -> bool:
        return bool(pods.get("Launcher")) and pod_succeeded(pods["Launcher"][0])

    def owned_objects(self, job: Any, addressing: Addressing) -> list[OwnedObject]:
        assert isinstance(job, MPIJob)
        private, public = ssh_key_pair()
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_name(job)},
            "data": {"hostfile": hostfile(job, addressing)},
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name(job)},
            "type": "kubernetes.io/ssh-auth",
            "data": {
                "ssh-privatekey": base64.b64encode(private).decode(),
                "ssh-publickey": base64.b64encode(public).decode(),
            },
        }
        return [OwnedObject(CONFIGMAPS, config), OwnedObject(SECRETS, secret)]

    def may_start(self, job: Any, replica_type: str, pods: Pods) -> bool:
        if replica_type != "Launcher":
            return True
        # Started: running, or already done (a Worker that finished before the launcher came must not hold
        # it back for ever; a failed one is the restart policy's business).
        workers = pods.get("Worker", [])
        return len(workers) == replicas(job, "Worker") and all(
            pod_running(pod) or pod_succeeded(pod) for pod in workers
        )


CONTROLLER = MPIController()
