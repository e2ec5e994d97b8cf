"""The one exception hierarchy for talking to a Kubernetes API server.

Why a tree of our own: kubernetes-asyncio raises a single ``ApiException`` whose status a caller must
compare by hand, and transport failures surface as a zoo of aiohttp/asyncio exceptions. Reconcilers want
to say ``except NotFound`` or ``except AlreadyExists``, and the retry policy wants to ask one question
("is this worth retrying?") by class. Every error raised by :mod:`kubedl_py.kube.client` is one of these::

    KubeError                       anything that went wrong talking to the API server
    ├── TransportError              no HTTP answer: connection refused/reset, DNS, client timeout
    │   └── ConnectionRefused       nothing listens at the server's address (ECONNREFUSED)
    └── ApiError                    the server answered with a failure Status (.status, .reason, .message)
        ├── ClientError             4xx: the request is wrong; retrying it unchanged will not help
        │   ├── BadRequest          400
        │   ├── Unauthorized        401
        │   ├── Forbidden           403
        │   ├── NotFound            404
        │   ├── MethodNotAllowed    405
        │   ├── AlreadyExists       409, reason AlreadyExists (create of an existing name)
        │   ├── Conflict            409, any other reason (stale resourceVersion, precondition failed)
        │   ├── Gone                410 (resourceVersion too old: re-list)
        │   ├── RequestEntityTooLarge  413
        │   ├── UnsupportedMediaType   415
        │   ├── Invalid             422 (.causes: the field errors)
        │   └── TooManyRequests     429 (.retry_after seconds; the one 4xx that is retried)
        └── ServerError             5xx (and any status we do not otherwise know)

The server's Status message is kept verbatim (it names the object and the field), and the underlying
exception is chained as ``__cause__`` so a traceback still shows the wire-level failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Cause",
    "ClientError",
    "Conflict",
    "ConnectionRefused",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "RequestEntityTooLarge",
    "ServerError",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "UnsupportedMediaType",
    "error_from_response",
    "error_from_status",
]


class KubeError(Exception):
    """Root of everything the machinery raises about the API server."""


class TransportError(KubeError):
    """No HTTP answer arrived: the connection failed, was cut, or the client gave up waiting.

    ``server`` is the API server's address (``https://host:port``) when the client knew it."""

    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class NotLeader(KubeError):
    """A write refused by the client itself, before it was sent: this process no longer holds (or may no longer
    hold) the leader Lease it acts under, so another replica may be acting (``KubeClient.write_fence``)."""


class ConnectionRefused(TransportError):
    """Nothing listens at the API server's address: it is not running (yet, or any more), or the kubeconfig
    names the wrong port. Retried like any transport error unless the retry settings say otherwise
    (``RetrySettings.retry_refused``): a command line answers at once instead."""


@dataclass(frozen=True)
class Cause:
    """One field error of an ``Invalid`` (422) Status: ``details.causes[i]``."""

    reason: str
    message: str
    field: str


class ApiError(KubeError):
    """The API server answered with an HTTP failure; carries the decoded ``Status`` when there was one."""

    #: the HTTP status this class stands for; instances carry the actual one in ``status``
    code: int = 0

    def __init__(
        self,
        message: str,
        *,
        status: int,
        reason: str = "",
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.body: Mapping[str, Any] = body or {}
        details = self.body.get("details") or {}
        self.details: Mapping[str, Any] = details if isinstance(details, Mapping) else {}
        self.causes: list[Cause] = [
            Cause(
                reason=str(c.get("reason", "")),
                message=str(c.get("message", "")),
                field=str(c.get("field", "")),
            )
            for c in self.details.get("causes") or []
            if isinstance(c, Mapping)
        ]
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = f"{self.status} {self.reason}" if self.reason else str(self.status)
        return f"({head}) {self.message}"


class ClientError(ApiError):
    """4xx: the request itself is wrong (or not allowed); sending it again unchanged will fail again."""


class BadRequest(ClientError):
    code = 400


class Unauthorized(ClientError):
    code = 401


class Forbidden(ClientError):
    code = 403


class NotFound(ClientError):
    code = 404


class MethodNotAllowed(ClientError):
    code = 405


class Conflict(ClientError):
    """409 other than AlreadyExists: usually an update with a stale resourceVersion; re-read and retry."""

    code = 409


class AlreadyExists(ClientError):
    """409 on create: the name is taken. Deterministic names make this a success for reconcilers."""

    code = 409


class Gone(ClientError):
    """410: the resourceVersion asked for is older than the server's history; the cache must re-list."""

    code = 410


class RequestEntityTooLarge(ClientError):
    code = 413


class UnsupportedMediaType(ClientError):
    code = 415


class Invalid(ClientError):
    """422: the object failed validation; ``causes`` lists the offending fields."""

    code = 422


class TooManyRequests(ClientError):
    """429: the server (or priority-and-fairness) is shedding load; wait ``retry_after`` seconds."""

    code = 429


class ServerError(ApiError):
    """5xx: the server failed; the same request may well succeed later."""

    code = 500


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        Gone,
        RequestEntityTooLarge,
        UnsupportedMediaType,
        Invalid,
        TooManyRequests,
    )
}


def _class_for(status: int, reason: str) -> type[ApiError]:
    # 409 is the one status shared by two meanings; the Status reason tells them apart.
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists
    # The server reports an expired resourceVersion as 410 with reason Expired or Gone.
    if reason in ("Expired", "Gone"):
        return Gone
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 400 <= status < 500:
        return ClientError
    return ServerError


def _parse_retry_after(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        # An HTTP-date Retry-After is legal but the API server only ever sends seconds.
        return None
    return max(seconds, 0.0)


def error_from_status(
    status_obj: Mapping[str, Any],
    *,
    http_status: int | None = None,
    retry_after_header: str | None = None,
) -> ApiError:
    """Build the right :class:`ApiError` from a ``Status`` object (an HTTP error body or a watch ERROR)."""
    code = status_obj.get("code")
    status = http_status if http_status is not None else (int(code) if isinstance(code, int) else 500)
    reason = str(status_obj.get("reason") or "")
    message = str(status_obj.get("message") or f"HTTP {status}")
    details = status_obj.get("details") or {}
    retry_after = _parse_retry_after(retry_after_header)
    if retry_after is None and isinstance(details, Mapping):
        retry_after = _parse_retry_after(details.get("retryAfterSeconds"))
    cls = _class_for(status, reason)
    return cls(message, status=status, reason=reason, body=status_obj, retry_after=retry_after)


def error_from_response(
    status: int, body: bytes | str | Mapping[str, Any] | None, *, retry_after_header: str | None = None
) -> ApiError:
    """Build the right :class:`ApiError` from an HTTP status and its (possibly non-JSON) body."""
    if isinstance(body, Mapping):
        return error_from_status(body, http_status=status, retry_after_header=retry_after_header)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping) and parsed.get("kind") == "Status":
        return error_from_status(parsed, http_status=status, retry_after_header=retry_after_header)
    # Not a Status (a proxy's HTML page, a plain-text 503): keep the text as the message.
    return error_from_status(
        {"message": text.strip()[:1000] or f"HTTP {status}"},
        http_status=status,
        retry_after_header=retry_after_header,
    )
