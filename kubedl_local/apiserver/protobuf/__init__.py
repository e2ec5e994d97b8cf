"""Protobuf request bodies of built-in kinds (``application/vnd.kubernetes.protobuf``).

client-go, and so kubectl, sends built-in kinds as protobuf. :func:`decode_body` turns such a body into the
dict the JSON path would have produced, using a field table compiled once from the pinned Kubernetes
release's published sources (:mod:`.table`); :func:`load_table` gets that table (cached in memory, on disk,
else downloaded) and raises :class:`TableUnavailable`, whose message says how to get it, when offline.
"""

from __future__ import annotations

import asyncio
import threading

from kubedl_local.apiserver.protobuf.decode import (
    CONTENT_TYPE,
    MAGIC,
    ProtobufError,
    UnknownKind,
    decode,
    go_duration,
)
from kubedl_local.apiserver.protobuf.encode import encode
from kubedl_local.apiserver.protobuf.table import Table, TableUnavailable, ensure_table, table_path

__all__ = [
    "CONTENT_TYPE",
    "MAGIC",
    "ProtobufError",
    "Table",
    "TableUnavailable",
    "UnknownKind",
    "decode",
    "decode_body",
    "encode",
    "ensure_table",
    "go_duration",
    "load_table",
    "table_path",
]

_loaded: Table | None = None
_lock = threading.Lock()


def _load() -> Table:
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = ensure_table()
        return _loaded


async def load_table() -> Table:
    """The table, loaded (or built: a download of two module zips) off the event loop the first time."""
    if _loaded is not None:
        return _loaded
    return await asyncio.to_thread(_load)


async def decode_body(body: bytes) -> dict[str, object]:
    return decode(body, await load_table())
