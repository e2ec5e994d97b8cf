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

Dialed by name: every Worker (the hostfile names their Services, or with kubectl exec their pod names,
which resolve only through the Services of the same name); the launcher when the hostfile names it too
(``runLauncherAsWorker``) and for Intel MPI and MPICH, whose Hydra proxies on the Workers connect back to
the launcher by its host name (Open MPI's daemons connect back to the IP addresses ``mpirun`` hands them).

The launcher is created only once every Worker has started (running, or already succeeded): its ``mpirun``
would otherwise find no sshd;
the job succeeds when the launcher does.

**kubeflow.org/v1: the Training Operator v1's contract instead** (``uses_kubexec``): no SSH at all. A Worker
container without a command gets ``sleep 365d``; the launcher's ``mpirun`` starts the ranks with ``kubectl
exec`` into the Workers: ``/etc/mpi/kubexec.sh`` (from the ConfigMap, beside a hostfile of Worker *pod* names)
is Open MPI's ``plm_rsh_agent`` (Intel MPI's and MPICH's bootstrap exec). kubectl comes from the launcher's
init container ``kubectl-delivery`` (it copies its ``kubectl`` to ``/opt/kube``; the script falls back to a
``kubectl`` on the PATH). The launcher runs as ServiceAccount ``<job>-launcher``, bound by RoleBinding to Role
``<job>-launcher``: read pods, and ``pods/exec`` on the job's Worker pods only (by name; ``get`` as well as
``create``: kubectl 1.31+ execs over a WebSocket, a GET); all three owned by the job.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.api.kinds.mpi import MPIJob
from kubedl_py.api.plain import Object
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import (
    Env,
    Kind,
    OwnedObject,
    Pods,
    Slot,
    every_replica,
    pod_running,
    pod_succeeded,
    replicas,
)
from kubedl_py.kube.resources import CONFIGMAPS, SECRETS, Resource

CONFIG_MOUNT = "/etc/mpi"
HOSTFILE = f"{CONFIG_MOUNT}/hostfile"
CONFIG_VOLUME = "mpi-job-config"
SSH_VOLUME = "ssh-auth"
# StrictHostKeyChecking: a Worker's host key is new on every start; UserKnownHostsFile: the key mount is
# read-only; ConnectionAttempts: a Worker's sshd may still be starting when mpirun connects.
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 -o LogLevel=ERROR"


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
KUBEXEC = f"{CONFIG_MOUNT}/kubexec.sh"
KUBECTL_DIR = "/opt/kube"
KUBECTL_VOLUME = "mpi-job-kubectl"
KUBECTL_DELIVERY = "kubectl-delivery"
#: the init container's image: any with ``sh`` and ``kubectl`` on its PATH (a template's own ``kubectl-delivery``
#: init container replaces it)
KUBECTL_IMAGE = "docker.io/bitnami/kubectl:latest"
#: Open MPI's rsh agent: ``kubexec.sh <pod> <command...>`` runs the command in that Worker, as the Training
#: Operator v1's script does (``/bin/sh -c``), with the delivered kubectl or one on the PATH
KUBEXEC_SCRIPT = """#!/bin/sh
set -e
pod=$1
shift
kubectl=/opt/kube/kubectl
[ -x "$kubectl" ] || kubectl=kubectl
exec "$kubectl" exec "$pod" -- /bin/sh -c "$*"
"""
#: a Worker container without a command waits for mpirun's kubectl exec (the Training Operator v1's default)
WORKER_IDLE = (["sleep"], ["365d"])


def uses_kubexec(job: MPIJob) -> bool:
    """The Training Operator v1's contract (kubectl exec) in kubeflow.org; sshd in training.kubedl.io."""
    return job.api_group is KUBEFLOW


def launcher_account(job: MPIJob) -> str:
    """The launcher's ServiceAccount, Role and RoleBinding (``<job>-launcher``, as the Training Operator v1)."""
    return f"{job.name}-launcher"


def worker_pods(job: MPIJob) -> list[str]:
    return [f"{job.name}-worker-{i}" for i in range(replicas(job, "Worker"))]


def config_name(job: MPIJob) -> str:
    return f"{job.name}-config"


def secret_name(job: MPIJob) -> str:
    """``<job>-ssh-<first 8 characters of the job's uid>``: a name nobody can take before the job exists. The
    controller may create Secrets but not read them (they hold keys), so it could not tell a stranger's Secret
    of a guessable name from the job's own; this one cannot be waiting for the job (docs/host-network.md)."""
    uid = (job.metadata.uid or "").replace("-", "")[:8]
    return f"{job.name}-ssh-{uid}" if uid else f"{job.name}-ssh"


def hostfile(job: MPIJob, addressing: Addressing) -> str:
    """Worker Services (ssh reaches sshd through them), or with kubectl exec Worker pod names."""
    slots = job.spec.slots_per_worker or 1
    if uses_kubexec(job):
        hosts = worker_pods(job)
        launcher = f"{job.name}-launcher-0"
    else:
        hosts = [addressing.service_host(job.name, "Worker", i) for i in range(replicas(job, "Worker"))]
        launcher = addressing.service_host(job.name, "Launcher", 0)
    if job.spec.run_launcher_as_worker:
        hosts.insert(0, launcher)
    if job.spec.mpi_implementation in ("Intel", "MPICH"):
        return "".join(f"{host}:{slots}\n" for host in hosts)
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def launcher_env(job: MPIJob) -> dict[str, str]:
    implementation = job.spec.mpi_implementation
    if uses_kubexec(job):
        if implementation == "Intel":
            return {
                "I_MPI_HYDRA_HOST_FILE": HOSTFILE,
                "I_MPI_HYDRA_BOOTSTRAP": "rsh",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC": KUBEXEC,
            }
        if implementation == "MPICH":
            return {"HYDRA_HOST_FILE": HOSTFILE, "HYDRA_LAUNCHER": "rsh", "HYDRA_LAUNCHER_EXEC": KUBEXEC}
        # no tree spawn: a Worker's orted may not kubectl exec (only the launcher's ServiceAccount may)
        return {
            "OMPI_MCA_orte_default_hostfile": HOSTFILE,
            "OMPI_MCA_plm_rsh_agent": KUBEXEC,
            "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        }
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


class MPIController(Kind[MPIJob]):
    def rendezvous_env(self, job: MPIJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        env = {
            "K_MPI_JOB_ROLE": replica_type.lower(),
            "SSHD_PORT": str(addressing.listen_port(replica_type, index)),
        }
        if replica_type == "Launcher":
            env.update(launcher_env(job))
        return env

    def amend_pod(self, job: MPIJob, replica_type: str, index: int, pod_spec: Object, targets: list[Object]) -> None:
        if uses_kubexec(job):
            self._amend_for_kubexec(job, replica_type, pod_spec, targets)
            return
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

    def _amend_for_kubexec(self, job: MPIJob, replica_type: str, pod_spec: Object, targets: list[Object]) -> None:
        volumes = pod_spec.setdefault("volumes", [])
        items = [
            {"key": "hostfile", "path": "hostfile", "mode": 0o444},
            {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
        ]
        # Workers too: the orted mpirun starts there is given the rsh agent's path and checks that it exists.
        volumes.append({"name": CONFIG_VOLUME, "configMap": {"name": config_name(job), "items": items}})
        if replica_type == "Worker":
            for container in pod_spec.get("containers") or []:
                if not container.get("command"):
                    container["command"], container["args"] = list(WORKER_IDLE[0]), list(WORKER_IDLE[1])
            for container in targets:
                container.setdefault("volumeMounts", []).append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT})
            return
        if replica_type != "Launcher":
            volumes.pop()
            return
        volumes.append({"name": KUBECTL_VOLUME, "emptyDir": {}})
        mounts = [
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT},
            {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR},
        ]
        for container in targets:
            container.setdefault("volumeMounts", []).extend(dict(mount) for mount in mounts)
        init = pod_spec.setdefault("initContainers", [])
        if not any(c.get("name") == KUBECTL_DELIVERY for c in init):
            init.insert(
                0,
                {
                    "name": KUBECTL_DELIVERY,
                    "image": KUBECTL_IMAGE,
                    "command": ["sh", "-c", 'cp "$(command -v kubectl)" "$TARGET_DIR/kubectl"'],
                    "env": [{"name": "TARGET_DIR", "value": KUBECTL_DIR}],
                    "volumeMounts": [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR}],
                },
            )
        pod_spec["serviceAccountName"] = launcher_account(job)

    def dialed(self, job: MPIJob) -> set[Slot]:
        launcher = job.spec.run_launcher_as_worker or job.spec.mpi_implementation in ("Intel", "MPICH")
        return every_replica(job, "Worker", *(("Launcher",) if launcher else ()))

    def succeeded(self, job: MPIJob, pods: Pods) -> bool:
        return bool(pods.get("Launcher")) and pod_succeeded(pods["Launcher"][0])

    def owned_objects(self, job: MPIJob, addressing: Addressing) -> list[OwnedObject]:
        if uses_kubexec(job):
            return kubexec_objects(job, addressing)
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

    def may_start(self, job: MPIJob, replica_type: str, pods: Pods) -> bool:
        if replica_type != "Launcher":
            return True
        # Started: running, or already done (a Worker that finished before the launcher came must not hold
        # it back for ever; a failed one is the restart policy's business).
        workers = pods.get("Worker", [])
        return len(workers) == replicas(job, "Worker") and all(
            pod_running(pod) or pod_succeeded(pod) for pod in workers
        )


def kubexec_objects(job: MPIJob, addressing: Addressing) -> list[OwnedObject]:
    """The ConfigMap (hostfile of pod names, kubexec.sh) and the launcher's ServiceAccount, Role and RoleBinding."""
    name = launcher_account(job)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_name(job)},
        "data": {"hostfile": hostfile(job, addressing), "kubexec.sh": KUBEXEC_SCRIPT},
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    rules: list[Object] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    if worker_pods(job):
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["pods/exec"],
                "verbs": ["create", "get"],
                "resourceNames": worker_pods(job),
            }
        )
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }
    return [
        OwnedObject(CONFIGMAPS, config),
        OwnedObject(SERVICE_ACCOUNTS, account),
        OwnedObject(ROLES, role),
        OwnedObject(ROLE_BINDINGS, binding),
    ]


CONTROLLER = MPIController()
