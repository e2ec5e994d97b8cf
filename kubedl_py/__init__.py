"""kubedl-py: a KubeDL-style training-job controller for Kubernetes, in Python asyncio.

The SDK names are exported here (``from kubedl_py import TrainingClient, PyTorchJob``) but imported lazily:
the controller, the embedded cluster and ``kubedl_py.api`` users must not pay for the SDK's HTTP stack
(kubernetes-asyncio, aiohttp) just by importing the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubedl_py._version import __version__

if TYPE_CHECKING:
    from kubedl_py.sdk import (
        AsyncTrainingClient,
        JobFailedError,
        JobTimeoutError,
        JobValidationError,
        PyTorchJob,
        TFJob,
        TrainingClient,
        TrainingError,
        pytorch_job,
        tf_job,
    )

_SDK_NAMES = frozenset(
    {
        "AsyncTrainingClient",
        "JobFailedError",
        "JobTimeoutError",
        "JobValidationError",
        "PyTorchJob",
        "TFJob",
        "TrainingClient",
        "TrainingError",
        "pytorch_job",
        "tf_job",
    }
)

__all__ = [
    "AsyncTrainingClient",
    "JobFailedError",
    "JobTimeoutError",
    "JobValidationError",
    "PyTorchJob",
    "TFJob",
    "TrainingClient",
    "TrainingError",
    "__version__",
    "pytorch_job",
    "tf_job",
]


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        from kubedl_py import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'kubedl_py' has no attribute {name!r}")
