"""The training-job API: pydantic models of PyTorchJob and TFJob, their defaults, validation and CRDs.

This package imports nothing else of kubedl-py; every other layer builds on it.
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
    ReplicaSpec,
    ReplicaStatus,
    RunPolicy,
    SchedulingPolicy,
)
from kubedl_py.api.defaults import with_defaults
from kubedl_py.api.jobs import (
    FRAMEWORKS,
    PYTORCH,
    TENSORFLOW,
    ElasticPolicy,
    Framework,
    Job,
    PyTorchJob,
    PyTorchJobSpec,
    RdzvConf,
    TFJob,
    TFJobSpec,
)
from kubedl_py.api.loading import load_jobs, load_jobs_file
from kubedl_py.api.validation import FieldError, JobValidationError, parse_job, validate_job

__all__ = [
    "FRAMEWORKS",
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
    "ObjectMeta",
    "PerGpu",
    "Placement",
    "PodSpec",
    "PodTemplateSpec",
    "PyTorchJob",
    "PyTorchJobSpec",
    "RdmaSpec",
    "RdzvConf",
    "ReplicaSpec",
    "ReplicaStatus",
    "RunPolicy",
    "SchedulingPolicy",
    "TFJob",
    "TFJobSpec",
    "constants",
    "load_jobs",
    "load_jobs_file",
    "parse_job",
    "validate_job",
    "with_defaults",
]
