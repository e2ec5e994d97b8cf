"""The SDK's errors: a small tree that keeps the API server's own words.

Why a tree of its own: callers catch ``JobNotFoundError`` or ``ForbiddenError``, not HTTP statuses or the
machinery's classes (:mod:`kubedl_py.kube.errors`), which stay an implementation detail. :func:`translate`
is the one place where the machinery's errors become these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kubedl_py.kube import errors as kerrors

if TYPE_CHECKING:
    from kubedl_py.api.jobs import Job


class TrainingError(Exception):
    """Root of every error the SDK raises (besides :class:`JobValidationError`, a ``ValueError``)."""


class ConfigurationError(TrainingError):
    """No usable cluster configuration: no kubeconfig, an unknown context, a missing file."""


class AmbiguousJobError(TrainingError):
    """Jobs of several kinds (a PyTorchJob and a TFJob, say) have this name: pass ``kind=``."""


class ClusterError(TrainingError):
    """The API server refused a request, or could not be reached. ``str()`` is the server's own message."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", causes: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        #: the server's field errors (``kubedl_py.kube.errors.Cause``: ``.field``, ``.message``) on a 422
        self.causes = list(causes)


class JobNotFoundError(ClusterError, LookupError):
    """No such job (or pod) in the namespace (HTTP 404)."""


class JobAlreadyExistsError(ClusterError):
    """The name is taken (HTTP 409 AlreadyExists)."""


class InvalidJobError(ClusterError):
    """The API server rejected the object (HTTP 422); ``causes`` names the fields."""


class ForbiddenError(ClusterError, PermissionError):
    """RBAC said no (HTTP 403)."""


class ClusterUnreachableError(ClusterError, ConnectionError):
    """No HTTP answer: the API server is down, or the kubeconfig points at the wrong place."""


class JobFailedError(TrainingError):
    """The job reached ``Failed``; ``reason`` and ``message`` are those of its Failed condition."""

    def __init__(self, reason: str, message: str, job: Job) -> None:
        self.reason = reason
        self.message = message
        self.job = job
        super().__init__(f"{job.kind} {job.namespace}/{job.name} failed: {reason}: {message}")


class JobEndedError(TrainingError):
    """The job ended in a state the wait did not ask for (it succeeded while ``Failed`` was awaited);
    ``state`` is how it ended."""

    def __init__(self, message: str, job: Job, state: str) -> None:
        super().__init__(message)
        self.job = job
        self.state = state


class JobTimeoutError(TrainingError, TimeoutError):
    """``wait`` ran out of time. ``job`` is the last state seen (``None`` if the job was never seen).

    It is a :class:`TimeoutError`, so ``except TimeoutError`` catches it too.
    """

    def __init__(self, message: str, job: Job | None, state: str) -> None:
        super().__init__(message)
        self.job = job
        self.state = state


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Turn the machinery's error tree into the SDK's, keeping the server's message."""
    try:
        yield
    except kerrors.KubeError as exc:
        raise translate(exc) from exc


def translate(exc: kerrors.KubeError, context: str = "") -> ClusterError:
    """The SDK's exception for a machinery error; ``context`` (what was being done) prefixes the message."""
    prefix = f"{context}: " if context else ""
    if isinstance(exc, kerrors.ApiError):
        error = _from_api_error(exc)
        if prefix:
            error = type(error)(prefix + error.message, status=error.status, reason=error.reason, causes=error.causes)
        return error
    if isinstance(exc, kerrors.ConnectionRefused):
        return ClusterUnreachableError(
            f"{prefix}cannot reach the API server at {exc.server}: connection refused (is a cluster running "
            "there?); start a local one with `kubedl-py local up`, or point --kubeconfig (KUBECONFIG) at a "
            "running cluster"
        )
    return ClusterUnreachableError(f"{prefix}cannot reach the API server: {exc}")


def _from_api_error(exc: kerrors.ApiError) -> ClusterError:
    cls: type[ClusterError] = ClusterError
    if isinstance(exc, kerrors.NotFound):
        cls = JobNotFoundError
    elif isinstance(exc, kerrors.AlreadyExists):
        cls = JobAlreadyExistsError
    elif isinstance(exc, kerrors.Invalid):
        cls = InvalidJobError
    elif isinstance(exc, kerrors.Forbidden | kerrors.Unauthorized):
        cls = ForbiddenError
    return cls(exc.message, status=exc.status, reason=exc.reason, causes=exc.causes)
