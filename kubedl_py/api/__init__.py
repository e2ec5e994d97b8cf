"""The training-job API: pydantic models of every job kind, their defaults, validation and CRDs.

Kinds are plug-ins (``kubedl_py.api.kinds``: one module each and one registry line). This package imports
nothing else of kubedl-py; every other layer builds on it.

The names are imported on first use (PEP 562): a submodule (``kubedl_py.api.constants``) does not load every
model, which a command that only lists jobs never builds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubedl_py._lazy import lazy_exports

if TYPE_CHECKING:
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

#: each public name and the module it lives in (a module itself for a submodule)
_WHERE: dict[str, str] = {
    "Container": "kubedl_py.api.common",
    "ElasticPolicy": "kubedl_py.api.jobs",
    "FRAMEWORKS": "kubedl_py.api.jobs",
    "FieldError": "kubedl_py.api.errors",
    "Framework": "kubedl_py.api.jobs",
    "JOB_MODELS": "kubedl_py.api.jobs",
    "Job": "kubedl_py.api.jobs",
    "JobCondition": "kubedl_py.api.common",
    "JobStatus": "kubedl_py.api.common",
    "JobValidationError": "kubedl_py.api.errors",
    "KindAPI": "kubedl_py.api.jobs",
    "ObjectMeta": "kubedl_py.api.common",
    "PYTORCH": "kubedl_py.api.jobs",
    "PerGpu": "kubedl_py.api.common",
    "Placement": "kubedl_py.api.common",
    "PodSpec": "kubedl_py.api.common",
    "PodTemplateSpec": "kubedl_py.api.common",
    "PyTorchJob": "kubedl_py.api.jobs",
    "PyTorchJobSpec": "kubedl_py.api.jobs",
    "RdmaSpec": "kubedl_py.api.common",
    "RdzvConf": "kubedl_py.api.jobs",
    "ReplicaFailure": "kubedl_py.api.common",
    "ReplicaSpec": "kubedl_py.api.common",
    "ReplicaStatus": "kubedl_py.api.common",
    "RunPolicy": "kubedl_py.api.common",
    "SchedulingPolicy": "kubedl_py.api.common",
    "TENSORFLOW": "kubedl_py.api.jobs",
    "TFJob": "kubedl_py.api.jobs",
    "TFJobSpec": "kubedl_py.api.jobs",
    "TrainingJob": "kubedl_py.api.jobs",
    "all_kinds": "kubedl_py.api.jobs",
    "constants": "kubedl_py.api.constants",
    "kind_api": "kubedl_py.api.jobs",
    "load_jobs": "kubedl_py.api.loading",
    "load_jobs_file": "kubedl_py.api.loading",
    "parse_job": "kubedl_py.api.validation",
    "validate_job": "kubedl_py.api.validation",
    "with_defaults": "kubedl_py.api.defaults",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
