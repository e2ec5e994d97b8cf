"""The training-job API: pydantic models of every job kind, their defaults, validation and CRDs.

Kinds are plug-ins (``kubedl_py.api.kinds``: one module each and one registry line). This package imports
nothing else of kubedl-py; every other layer builds on it.
"""

from kubedl_py.api import constants
from kubedl_py.api.common import (
    Container,
    JobCondition,
    JobStatus,
    ObjectMeta,
    PerGpu,
    Placement,
    PodSpec,
    PodTemplateSpec,
    RdmaSpec,
    ReplicaFailure,
    ReplicaSpec,
    ReplicaStatus,
    RunPolicy,
    SchedulingPolicy,
)
from kubedl_py.api.defaults import with_defaults
from kubedl_py.api.errors import FieldError, JobValidationError
from kubedl_py.api.jobs import (
    FRAMEWORKS,
    JOB_MODELS,
    PYTORCH,
    TENSORFLOW,
    ElasticPolicy,
    Framework,
    Job,
    KindAPI,
    PyTorchJob,
    PyTorchJobSpec,
    RdzvConf,
    TFJob,
    TFJobSpec,
    TrainingJob,
    all_kinds,
    kind_api,
)
from kubedl_py.api.loading import load_jobs, load_jobs_file
from kubedl_py.api.validation import parse_job, validate_job

__all__ = [
    "FRAMEWORKS",
    "JOB_MODELS",
    "PYTORCH",
    "TENSORFLOW",
    "Container",
    "ElasticPolicy",
    "FieldError",
    "Framework",
    "Job",
    "JobCondition",
    "JobStatus",
    "JobValidationError",
    "KindAPI",
    "ObjectMeta",
    "PerGpu",
    "Placement",
    "PodSpec",
    "PodTemplateSpec",
    "PyTorchJob",
    "PyTorchJobSpec",
    "RdmaSpec",
    "RdzvConf",
    "ReplicaFailure",
    "ReplicaSpec",
    "ReplicaStatus",
    "RunPolicy",
    "SchedulingPolicy",
    "TFJob",
    "TFJobSpec",
    "TrainingJob",
    "all_kinds",
    "constants",
    "kind_api",
    "load_jobs",
    "load_jobs_file",
    "parse_job",
    "validate_job",
    "with_defaults",
]
