"""Kubernetes objects as plain Python data, for every layer: the one alias of a decoded object and the one
parser of the API server's times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

#: an object as the API server sends it, decoded from JSON
Object = dict[str, Any]


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time (``Z`` or an offset, any precision) as an aware datetime (UTC when it names no zone), or
    None when ``value`` is no such string."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
