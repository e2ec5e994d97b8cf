"""The HTTP status + Status reason -> exception class mapping, and what each error keeps."""

from __future__ import annotations

import json

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.retry import is_retryable


def status(code: int, reason: str, message: str = "boom", **details: object) -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Gone", errors.Gone),
        (410, "Expired", errors.Gone),
        (413, "RequestEntityTooLarge", errors.RequestEntityTooLarge),
        (415, "UnsupportedMediaType", errors.UnsupportedMediaType),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (418, "", errors.ClientError),
    ],
)
def test_status_maps_to_class(code: int, reason: str, cls: type[errors.ApiError]) -> None:
    error = errors.error_from_response(code, json.dumps(status(code, reason, 'pods "x" boom')).encode())
    assert type(error) is cls
    assert error.status == code
    assert error.reason == reason
    assert error.message == 'pods "x" boom'
    assert isinstance(error, errors.ApiError)
    assert isinstance(error, errors.KubeError)


def test_expired_reason_wins_over_status_code() -> None:
    # A watch ERROR event says 410 in its body; the HTTP status of the stream was 200.
    error = errors.error_from_status(status(410, "Expired", "too old resource version: 5 (10)"))
    assert isinstance(error, errors.Gone)
    assert error.status == 410


def test_already_exists_is_not_a_conflict() -> None:
    # A reconciler that retries on Conflict (stale read) must not also swallow AlreadyExists by accident.
    error = errors.error_from_status(status(409, "AlreadyExists"))
    assert not isinstance(error, errors.Conflict)


def test_invalid_keeps_causes() -> None:
    body = status(
        422,
        "Invalid",
        'PyTorchJob.training.kubedl.io "j" is invalid',
        causes=[{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.pytorchReplicaSpecs"}],
    )
    error = errors.error_from_status(body)
    assert isinstance(error, errors.Invalid)
    assert error.causes == [
        errors.Cause(reason="FieldValueRequired", message="Required value", field="spec.pytorchReplicaSpecs")
    ]


def test_too_many_requests_retry_after_from_header_or_details() -> None:
    from_header = errors.error_from_response(429, b"", retry_after_header="3")
    assert isinstance(from_header, errors.TooManyRequests)
    assert from_header.retry_after == 3.0
    from_details = errors.error_from_status(status(429, "TooManyRequests", retryAfterSeconds=7))
    assert from_details.retry_after == 7.0


def test_non_status_body_keeps_text() -> None:
    error = errors.error_from_response(502, b"<html>bad gateway</html>")
    assert isinstance(error, errors.ServerError)
    assert error.message == "<html>bad gateway</html>"
    assert "502" in str(error)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (errors.ServerError("x", status=500), True),
        (errors.TooManyRequests("x", status=429), True),
        (errors.TransportError("connection refused"), True),
        (errors.NotFound("x", status=404), False),
        (errors.Conflict("x", status=409), False),
        (errors.Gone("x", status=410), False),
        (errors.Invalid("x", status=422), False),
        (ValueError("bug"), False),
    ],
)
def test_retryable(error: BaseException, retryable: bool) -> None:
    assert is_retryable(error) is retryable
