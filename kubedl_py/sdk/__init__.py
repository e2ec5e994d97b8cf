"""The Python SDK: submit, inspect, wait for, read the logs of and delete training jobs.

Why a layer of its own: the Kubeflow training SDK that ML engineers know polls every 15 seconds, returns
untyped dicts and hides the API server's words behind generic exceptions. This one is typed (it returns the
pydantic models of :mod:`kubedl_py.api`), waits on a watch instead of polling, validates a job locally
before sending it (errors name the field), and maps API errors to a few exceptions that keep the server's
message.

:class:`AsyncTrainingClient` is the implementation; :class:`TrainingClient` is the same API for plain
(synchronous) code. The sync client runs its async twin on a private event loop in a daemon thread, so it
also works where an event loop is already running, as in a Jupyter notebook, where ``asyncio.run`` fails.

It talks to the cluster only through :class:`kubedl_py.kube.KubeClient` (raw dicts over HTTP) and never
imports the controller or the embedded cluster: the SDK works the same against any cluster.

One idea per module: :mod:`.errors`, :mod:`.config` (finding the cluster), :mod:`.views` (state, progress,
log lines, descriptions), :mod:`.builders` (jobs of any kind without YAML; :mod:`.shortcuts`: the PyTorch
and TF ones), :mod:`.client` (the async client),
:mod:`.sync` (its blocking twin), :mod:`.watching` (the list/watch loop with the SDK's patience),
:mod:`.logs` (following logs), :mod:`.kinds` and :mod:`.pods` (small helpers). ``__all__`` below is the
public surface, and the one list of it: ``kubedl_py`` exports the same names from it.
"""

from typing import Final

from kubedl_py.api.jobs import PyTorchJob, TFJob
from kubedl_py.api.kinds import kind_api
from kubedl_py.api.validation import FieldError, JobValidationError
from kubedl_py.kube.client import ClientSettings
from kubedl_py.kube.retry import RetrySettings
from kubedl_py.sdk.builders import training_job
from kubedl_py.sdk.client import AsyncTrainingClient
from kubedl_py.sdk.config import ResolvedConfig, resolve_config
from kubedl_py.sdk.config import local_kubeconfig_path as local_kubeconfig_path
from kubedl_py.sdk.errors import (
    AmbiguousJobError,
    ClusterError,
    ClusterUnreachableError,
    ConfigurationError,
    ForbiddenError,
    InvalidJobError,
    JobAlreadyExistsError,
    JobEndedError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    TrainingError,
)
from kubedl_py.sdk.kinds import resource_of
from kubedl_py.sdk.logs import FOLLOW_DRAIN_SECONDS as FOLLOW_DRAIN_SECONDS  # importable, not in __all__
from kubedl_py.sdk.shortcuts import pytorch_job, tf_job
from kubedl_py.sdk.sync import TrainingClient
from kubedl_py.sdk.views import (
    CONDITION_TYPES,
    JobDescription,
    JobEvent,
    JobProgress,
    LogLine,
    PodInfo,
    PreviousAttempt,
    job_age,
    job_state,
    replica_counts,
)
from kubedl_py.sdk.views import DESCRIBE_EVENTS as DESCRIBE_EVENTS  # importable, not in __all__
from kubedl_py.sdk.views import event_time as event_time  # importable, not in __all__

# Importable as before, though not in __all__:
PYTORCHJOBS: Final = resource_of(kind_api("PyTorchJob"))
TFJOBS: Final = resource_of(kind_api("TFJob"))

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
    "job_age",
    "job_state",
    "pytorch_job",
    "replica_counts",
    "resolve_config",
    "tf_job",
    "training_job",
]
