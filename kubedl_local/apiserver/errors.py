"""API errors as the Kubernetes API server reports them.

Every failure the embedded API server returns is a ``Status`` object with the reason and HTTP code the real
server uses, so clients (kubernetes-asyncio, kubectl, our own controller) react to them exactly as in
production. Handlers raise :class:`ApiError`; the HTTP layer turns it into a response.
"""

from __future__ import annotations

from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error with the fields of a ``metav1.Status``."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}
        #: Warning headers gathered before the error (the real server sends them with error responses too)
        self.warnings: list[str] = []

    def status(self) -> dict[str, Any]:
        # The real server's field order; an empty reason is left out (its 500s on some create errors).
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


class PageNotFound(ApiError):
    """A path no API handler owns: the real server's mux answers plain text, not a Status."""

    def __init__(self) -> None:
        super().__init__(404, "404 page not found", "NotFound")


def resource_not_found() -> ApiError:
    """A path under a served group version that names no resource (or no subresource): ``details`` is
    present and empty, which is how kubectl tells it from a missing object (``kubectl debug`` reads
    ``details.name``)."""
    return ApiError(404, "the server could not find the requested resource", "NotFound", {})


def _details(group: str, plural: str, name: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = plural
    return d


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(404, f'{_qualified(group, plural)} "{name}" not found', "NotFound", _details(group, plural, name))


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(group, plural)} "{name}" already exists',
        "AlreadyExists",
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        "Conflict",
        _details(group, plural, name),
    )


def stale(group: str, plural: str, name: str) -> ApiError:
    why = "the object has been modified; please apply your changes to the latest version and try again"
    return conflict(group, plural, name, why)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, message, "MethodNotAllowed", {})


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")


def forbidden(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        f'{_qualified(group, plural)} "{name}" is forbidden: {why}',
        "Forbidden",
        _details(group, plural, name),
    )


#: a FieldError value that is not shown (Go's field.OmitValueType): "Invalid value: <detail>"
OMITTED: Any = object()


class FieldError:
    """One entry of ``details.causes`` (a field.Error in the real server)."""

    __slots__ = ("detail", "field", "kind", "value")

    def __init__(self, kind: str, field: str, detail: str = "", value: Any = None) -> None:
        self.kind = kind  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, ...
        self.field = field
        self.detail = detail
        self.value = value

    def message(self) -> str:
        return f"{self.field}: {self.body()}"

    def body(self) -> str:
        import orjson

        if self.kind == "FieldValueRequired":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.kind == "FieldValueForbidden":
            return "Forbidden: " + self.detail
        if self.kind == "FieldValueDuplicate":
            return "Duplicate value: " + _show(self.value, orjson)
        if self.kind == "FieldValueNotSupported":
            return f"Unsupported value: {_show(self.value, orjson)}" + (f": {self.detail}" if self.detail else "")
        if self.kind == "FieldValueTooLong":
            return "Too long: " + self.detail
        if self.kind == "FieldValueTypeInvalid":
            return f"Invalid value: {_show(self.value, orjson)}: {self.detail}"
        if self.value is OMITTED:
            return f"Invalid value: {self.detail}"
        return f"Invalid value: {_show(self.value, orjson)}" + (f": {self.detail}" if self.detail else "")


def _show(value: Any, orjson: Any) -> str:
    try:
        text: str = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text


def invalid(kind: str, group: str, plural: str, name: str, errors: list[FieldError]) -> ApiError:
    qualified = f"{kind}.{group}" if group else kind
    messages = [e.message() for e in errors]
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details = _details(group, kind, name)
    details["causes"] = [{"reason": e.kind, "message": e.body(), "field": e.field} for e in errors]
    return ApiError(422, f'{qualified} "{name}" is invalid: {joined}', "Invalid", details)


def too_large(message: str = "Request entity too large: limit is 1572864") -> ApiError:
    return ApiError(413, message, "RequestEntityTooLarge")
