"""kubedl-py: a KubeDL-style training-job controller for Kubernetes, in Python asyncio.

The SDK names are exported here (``from kubedl_py import TrainingClient, PyTorchJob``) but imported lazily:
the controller, the embedded cluster and ``kubedl_py.api`` users must not pay for the SDK's HTTP stack
(kubernetes-asyncio, aiohttp) just by importing the package. Every public name of :mod:`kubedl_py.sdk` is
here (docs/sdk.md shows them imported from ``kubedl_py``); a test keeps the two lists equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubedl_py._version import __version__

if TYPE_CHECKING:
    from kubedl_py.sdk import (
        CONDITION_TYPES,
        AmbiguousJobError,
        AsyncTrainingClient,
        ClientSettings,
        ClusterError,
        ClusterUnreachableError,
        ConfigurationError,
        FieldError,
        ForbiddenError,
        InvalidJobError,
        JobAlreadyExistsError,
        JobDescription,
        JobEndedError,
        JobEvent,
        JobFailedError,
        JobNotFoundError,
        JobProgress,
        JobTimeoutError,
        JobValidationError,
        LogLine,
        PodInfo,
        PreviousAttempt,
        PyTorchJob,
        ResolvedConfig,
        RetrySettings,
        TFJob,
        TrainingClient,
        TrainingError,
        job_age,
        job_state,
        pytorch_job,
        replica_counts,
        resolve_config,
        tf_job,
    )

_SDK_NAMES = frozenset(
    {
        "AmbiguousJobError",
        "AsyncTrainingClient",
        "CONDITION_TYPES",
        "ClientSettings",
        "ClusterError",
        "ClusterUnreachableError",
        "ConfigurationError",
        "FieldError",
        "ForbiddenError",
        "InvalidJobError",
        "JobAlreadyExistsError",
        "JobDescription",
        "JobEndedError",
        "JobEvent",
        "JobFailedError",
        "JobNotFoundError",
        "JobProgress",
        "JobTimeoutError",
        "JobValidationError",
        "LogLine",
        "PodInfo",
        "PreviousAttempt",
        "PyTorchJob",
        "ResolvedConfig",
        "RetrySettings",
        "TFJob",
        "TrainingClient",
        "TrainingError",
        "job_age",
        "job_state",
        "pytorch_job",
        "replica_counts",
        "resolve_config",
        "tf_job",
    }
)

__all__ = [
    "CONDITION_TYPES",
    "AmbiguousJobError",
    "AsyncTrainingClient",
    "ClientSettings",
    "ClusterError",
    "ClusterUnreachableError",
    "ConfigurationError",
    "FieldError",
    "ForbiddenError",
    "InvalidJobError",
    "JobAlreadyExistsError",
    "JobDescription",
    "JobEndedError",
    "JobEvent",
    "JobFailedError",
    "JobNotFoundError",
    "JobProgress",
    "JobTimeoutError",
    "JobValidationError",
    "LogLine",
    "PodInfo",
    "PreviousAttempt",
    "PyTorchJob",
    "ResolvedConfig",
    "RetrySettings",
    "TFJob",
    "TrainingClient",
    "TrainingError",
    "__version__",
    "job_age",
    "job_state",
    "pytorch_job",
    "replica_counts",
    "resolve_config",
    "tf_job",
]


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        from kubedl_py import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'kubedl_py' has no attribute {name!r}")
