"""MPIJob: ``mpirun`` jobs (Horovod, NCCL tests, mpi4py) with one Launcher and SSH-reachable Workers.

The API half of the kind (see ``base.py``). Replica types and ``slotsPerWorker`` as the Training Operator v1
names them; ``mpiImplementation``, ``runLauncherAsWorker`` and ``sshAuthMountPath`` as the MPI Operator v2
names them (what the issue asks for and what users of either peer write). Defaults: container ``mpi``,
port ``mpijob-port`` 22 (each Worker's sshd), restart policy ``Never``, cleanPodPolicy ``Running``
(see ``MPI`` below for why not ``None``).

What the controller half adds (``controllers/kinds/mpi.py``): the hostfile ConfigMap ``<job>-config``
mounted at ``/etc/mpi``, the SSH key Secret ``<job>-ssh-<uid>`` mounted at ``sshAuthMountPath``, the launcher
created once every Worker runs, and the implementation's variables.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool

from kubedl_py.api.common import ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

MPI = Framework(
    kind="MPIJob",
    plural="mpijobs",
    replica_specs_field="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"),
    container_name="mpi",
    port_name="mpijob-port",
    default_port=22,
    default_restart_policy="Never",
    # Not the Training Operator's None: a Worker's sshd never exits by itself, so once the launcher is done
    # the Workers still running are deleted (and their host ports freed); finished pods and their logs stay.
    default_clean_pod_policy="Running",
    worker_type="Worker",
    short_names=("mpij",),
    master_types=("Launcher",),
    kubeflow_clean_pod_policy="None",
)

MPIImplementation = Literal["OpenMPI", "Intel", "MPICH"]


class MPIJobSpec(RunPolicy):
    """What to run (a Launcher and Workers) and how (run policies, MPI settings)."""

    mpi_replica_specs: dict[str, ReplicaSpec]
    """The replica types, Launcher (one pod, runs mpirun) and Worker, each with its replicas, restartPolicy
    and pod template."""
    slots_per_worker: Annotated[int, Field(ge=1)] | None = None
    """MPI slots per Worker in the hostfile (default 1)."""
    mpi_implementation: MPIImplementation | None = None
    """OpenMPI (default), Intel or MPICH: the hostfile's format and the launcher's environment."""
    run_launcher_as_worker: StrictBool | None = None
    """Also list the Launcher in the hostfile, so it runs ranks too."""
    ssh_auth_mount_path: str | None = None
    """Where the generated SSH key is mounted in the pods (default /root/.ssh)."""
    main_container: str | None = None
    """The Training Operator v1's name of the framework container (default mpi)."""


class MPIJob(TrainingJob):
    FRAMEWORK = MPI

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["MPIJob"] = "MPIJob"
    spec: MPIJobSpec


def validate(job: MPIJob) -> list[FieldError]:
    path = f"spec.{MPI.replica_specs_field}"
    specs = job.spec.mpi_replica_specs
    launcher = specs.get("Launcher")
    if launcher is None:
        return [FieldError(f"{path}.Launcher", "an MPIJob needs a Launcher (it runs mpirun): add one with replicas 1")]
    errors = []
    if (1 if launcher.replicas is None else launcher.replicas) != 1:
        errors.append(
            FieldError(f"{path}.Launcher.replicas", f"is {launcher.replicas}; an MPIJob has one Launcher: set it to 1")
        )
    workers = specs.get("Worker")
    if not job.spec.run_launcher_as_worker and (workers is None or workers.replicas == 0):
        errors.append(
            FieldError(
                f"{path}.Worker",
                "an MPIJob needs Workers for mpirun to start ranks on: add Workers or set runLauncherAsWorker",
            )
        )
    mount = job.spec.ssh_auth_mount_path
    if mount is not None and not mount.startswith("/"):
        errors.append(FieldError("spec.sshAuthMountPath", f"is {mount!r}; make it an absolute path, e.g. /root/.ssh"))
    return errors


def defaults(job: MPIJob) -> None:
    spec = job.spec
    if spec.slots_per_worker is None:
        spec.slots_per_worker = 1
    if spec.mpi_implementation is None:
        spec.mpi_implementation = "OpenMPI"
    if spec.run_launcher_as_worker is None:
        spec.run_launcher_as_worker = False
    if spec.ssh_auth_mount_path is None:
        spec.ssh_auth_mount_path = "/root/.ssh"


KIND = KindAPI(
    name="mpi",
    kubeflow=True,
    model=MPIJob,
    validate=validate,
    defaults=defaults,
    cel_rules=(
        {"rule": "has(self.Launcher)", "message": "an MPIJob needs a Launcher"},
        {
            "rule": "!has(self.Launcher.replicas) || self.Launcher.replicas == 1",
            "message": "an MPIJob has one Launcher: set Launcher.replicas to 1",
        },
    ),
    # the ServiceAccount, Role and RoleBinding: a kubeflow.org launcher's kubectl exec (controllers/kinds/mpi.py)
    owned_resources=(
        ("", "configmaps"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
    ),
)
