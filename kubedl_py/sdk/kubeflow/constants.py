"""The Kubeflow training SDK's constants (``kubeflow.training.constants.constants``, 1.9.4), same names and values.

Why a copy: scripts written for the Kubeflow SDK read these (``constants.JOB_PARAMETERS["PyTorchJob"]["container"]``,
``constants.JOB_CONDITION_SUCCEEDED``); with this module they keep working after the one import change, without
the Kubeflow package installed. The labels here are the Training Operator's (``training.kubeflow.org/*``); the
client uses kubedl-py's own for jobs in ``training.kubedl.io``. The LLM fine-tuning ones (storage initializer,
trainer images, PVC defaults) are left out with ``train()``, which is not supported.
"""

from __future__ import annotations

from typing import Any, Final

DEFAULT_TIMEOUT: Final = 120
DEFAULT_PIP_INDEX_URL: Final = "https://pypi.org/simple"
DEFAULT_NAMESPACE: Final = "default"
ISTIO_SIDECAR_INJECTION: Final = "sidecar.istio.io/inject"

GROUP: Final = "kubeflow.org"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

POD_KIND: Final = "Pod"
POD_PHASE_PENDING: Final = "Pending"

JOB_CONDITION_CREATED: Final = "Created"
JOB_CONDITION_RUNNING: Final = "Running"
JOB_CONDITION_RESTARTING: Final = "Restarting"
JOB_CONDITION_SUCCEEDED: Final = "Succeeded"
JOB_CONDITION_FAILED: Final = "Failed"
JOB_CONDITIONS: Final = {
    JOB_CONDITION_CREATED,
    JOB_CONDITION_RUNNING,
    JOB_CONDITION_RESTARTING,
    JOB_CONDITION_SUCCEEDED,
    JOB_CONDITION_FAILED,
}
CONDITION_STATUS_TRUE: Final = "True"

JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
JOB_ROLE_MASTER: Final = "master"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
LOCAL_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"

REPLICA_TYPE_CHIEF: Final = "Chief"
REPLICA_TYPE_PS: Final = "PS"
REPLICA_TYPE_MASTER: Final = "Master"
REPLICA_TYPE_WORKER: Final = "Worker"
REPLICA_TYPE_SCHEDULER: Final = "Scheduler"
REPLICA_TYPE_SERVER: Final = "Server"
REPLICA_TYPE_LAUNCHER: Final = "Launcher"

TFJOB_KIND: Final = "TFJob"
TFJOB_MODEL: Final = "KubeflowOrgV1TFJob"
TFJOB_PLURAL: Final = "tfjobs"
TFJOB_CONTAINER: Final = "tensorflow"
TFJOB_REPLICA_TYPES: Final = (REPLICA_TYPE_PS.lower(), REPLICA_TYPE_CHIEF.lower(), REPLICA_TYPE_WORKER.lower())
TFJOB_BASE_IMAGE: Final = "docker.io/tensorflow/tensorflow:2.9.1"
TFJOB_BASE_IMAGE_GPU: Final = "docker.io/tensorflow/tensorflow:2.9.1-gpu"

PYTORCHJOB_KIND: Final = "PyTorchJob"
PYTORCHJOB_MODEL: Final = "KubeflowOrgV1PyTorchJob"
PYTORCHJOB_PLURAL: Final = "pytorchjobs"
PYTORCHJOB_CONTAINER: Final = "pytorch"
PYTORCHJOB_REPLICA_TYPES: Final = (REPLICA_TYPE_MASTER.lower(), REPLICA_TYPE_WORKER.lower())
PYTORCHJOB_BASE_IMAGE: Final = "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"

ENTRYPOINT_TORCH: Final = "torchrun"
ENTRYPOINT_PYTHON: Final = "python -u"
DEFAULT_COMMAND: Final = ["bash", "-c"]

XGBOOSTJOB_KIND: Final = "XGBoostJob"
XGBOOSTJOB_MODEL: Final = "KubeflowOrgV1XGBoostJob"
XGBOOSTJOB_PLURAL: Final = "xgboostjobs"
XGBOOSTJOB_CONTAINER: Final = "xgboost"
XGBOOSTJOB_REPLICA_TYPES: Final = (REPLICA_TYPE_MASTER.lower(), REPLICA_TYPE_WORKER.lower())

MPIJOB_KIND: Final = "MPIJob"
MPIJOB_MODEL: Final = "KubeflowOrgV1MPIJob"
MPIJOB_PLURAL: Final = "mpijobs"
MPIJOB_CONTAINER: Final = "mpi"
MPIJOB_REPLICA_TYPES: Final = (REPLICA_TYPE_LAUNCHER.lower(), REPLICA_TYPE_WORKER.lower())

PADDLEJOB_KIND: Final = "PaddleJob"
PADDLEJOB_MODEL: Final = "KubeflowOrgV1PaddleJob"
PADDLEJOB_PLURAL: Final = "paddlejobs"
PADDLEJOB_CONTAINER: Final = "paddle"
PADDLEJOB_REPLICA_TYPES: Final = (REPLICA_TYPE_MASTER.lower(), REPLICA_TYPE_WORKER.lower())
PADDLEJOB_BASE_IMAGE: Final = "docker.io/paddlepaddle/paddle:2.4.0rc0-gpu-cuda11.2-cudnn8.1-trt8.0"

JAXJOB_KIND: Final = "JAXJob"
JAXJOB_MODEL: Final = "KubeflowOrgV1JAXJob"
JAXJOB_PLURAL: Final = "jaxjobs"
JAXJOB_CONTAINER: Final = "jax"
# A string, not a tuple, as in the Kubeflow SDK (so ``in`` is a substring test there too).
JAXJOB_REPLICA_TYPES: Final = REPLICA_TYPE_WORKER.lower()
JAXJOB_BASE_IMAGE: Final = "ghcr.io/kubeflow/training-v1/jaxjob-dist-spmd-mnist:latest"

JOB_PARAMETERS: Final[dict[str, dict[str, str]]] = {
    TFJOB_KIND: {
        "model": TFJOB_MODEL,
        "plural": TFJOB_PLURAL,
        "container": TFJOB_CONTAINER,
        "base_image": TFJOB_BASE_IMAGE,
    },
    PYTORCHJOB_KIND: {
        "model": PYTORCHJOB_MODEL,
        "plural": PYTORCHJOB_PLURAL,
        "container": PYTORCHJOB_CONTAINER,
        "base_image": PYTORCHJOB_BASE_IMAGE,
    },
    XGBOOSTJOB_KIND: {
        "model": XGBOOSTJOB_MODEL,
        "plural": XGBOOSTJOB_PLURAL,
        "container": XGBOOSTJOB_CONTAINER,
        "base_image": "TODO",
    },
    MPIJOB_KIND: {
        "model": MPIJOB_MODEL,
        "plural": MPIJOB_PLURAL,
        "container": MPIJOB_CONTAINER,
        "base_image": "TODO",
    },
    PADDLEJOB_KIND: {
        "model": PADDLEJOB_MODEL,
        "plural": PADDLEJOB_PLURAL,
        "container": PADDLEJOB_CONTAINER,
        "base_image": PADDLEJOB_BASE_IMAGE,
    },
    JAXJOB_KIND: {
        "model": JAXJOB_MODEL,
        "plural": JAXJOB_PLURAL,
        "container": JAXJOB_CONTAINER,
        # The Kubeflow SDK's own value (its JAXJOB_BASE_IMAGE constant was meant).
        "base_image": "JAXJOB_BASE_IMAGE",
    },
}

JOB_MODELS: Final = tuple(d["model"] for d in JOB_PARAMETERS.values())
#: the Kubeflow SDK's Union of its six job model classes; here any job object (model, view, dict)
JOB_MODELS_TYPE = Any

#: every replica type ``get_job_pods(replica_type=...)`` accepts, as the Kubeflow SDK checks it
REPLICA_TYPES_ACCEPTED: Final = (
    TFJOB_REPLICA_TYPES,
    PYTORCHJOB_REPLICA_TYPES,
    XGBOOSTJOB_REPLICA_TYPES,
    MPIJOB_REPLICA_TYPES,
    PADDLEJOB_REPLICA_TYPES,
    JAXJOB_REPLICA_TYPES,
)
