"""A protobuf encoder for tests: the inverse of kubedl_local.apiserver.protobuf, driven by the same field table.

Tests send protobuf bodies that kubectl never produces (a Pod with ``enableServiceLinks: false``, a Lease
with MicroTimes) to both tiers. The real server decodes them with its compiled-in Go types, so if this
encoder and the table disagreed with Kubernetes, the real tier would fail the test first.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import struct
from typing import Any

from kubedl_local.apiserver.protobuf import MAGIC, Table
from kubedl_local.apiserver.protobuf.decode import (
    DURATION,
    FIELDS_V1,
    INT_OR_STRING,
    MICRO_TIME,
    QUANTITY,
    RAW_EXTENSION,
    TIME,
    message_for,
)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _ld(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _time(text: str) -> bytes:
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    seconds = int(when.timestamp())
    nanos = when.microsecond * 1000
    return _key(1, 0) + _varint(seconds) + (_key(2, 0) + _varint(nanos) if nanos else b"")


_UNITS = {"h": 3600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "µs": 10**3, "ns": 1}


def _duration(text: str) -> bytes:
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(h|ms|m|s|us|µs|ns)", text):
        total += float(number) * _UNITS[unit]
    return _key(1, 0) + _varint(int(total))


class Encoder:
    def __init__(self, table: Table) -> None:
        self.table = table

    def envelope(self, obj: dict[str, Any]) -> bytes:
        name = message_for(self.table, obj["apiVersion"], obj["kind"])
        assert name is not None, obj["kind"]
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        type_meta = _ld(1, obj["apiVersion"].encode()) + _ld(2, obj["kind"].encode())
        return MAGIC + _ld(1, type_meta) + _ld(2, self.message(name, body))

    def message(self, name: str, value: Any) -> bytes:
        if name in (TIME, MICRO_TIME):
            return _time(value) if value else b""
        if name == QUANTITY:
            return _ld(1, str(value).encode())
        if name == DURATION:
            return _duration(value)
        if name == INT_OR_STRING:
            if isinstance(value, str):
                return _key(1, 0) + _varint(1) + _ld(3, value.encode())
            return _key(1, 0) + _varint(0) + _key(2, 0) + _varint(value)
        if name in (RAW_EXTENSION, FIELDS_V1):
            import orjson

            return _ld(1, orjson.dumps(value))
        spec = self.table["messages"][name]
        if spec["wrapper"]:
            return self.field(1, spec["fields"]["1"], value)
        out = b""
        remaining = dict(value)
        for number, entry in sorted(spec["fields"].items(), key=lambda kv: int(kv[0])):
            if entry["inline"]:
                out += _ld(int(number), self.message(entry["type"], remaining))
                continue
            if entry["name"] in remaining:
                item = remaining.pop(entry["name"])
                if item is not None:
                    out += self.field(int(number), entry, item)
        return out

    def field(self, number: int, entry: dict[str, Any], value: Any) -> bytes:
        label, typ = entry["label"], entry["type"]
        if label == "map":
            return b"".join(
                _ld(number, _ld(1, str(k).encode()) + self.single(2, typ, v)) for k, v in sorted(value.items())
            )
        if label == "repeated":
            return b"".join(self.single(number, typ, v) for v in value)
        return self.single(number, typ, value)

    def single(self, number: int, typ: str, value: Any) -> bytes:
        if "." in typ:
            return _ld(number, self.message(typ, value))
        if typ == "string":
            return _ld(number, value.encode())
        if typ == "bytes":
            return _ld(number, base64.b64decode(value))
        if typ == "bool":
            return _key(number, 0) + _varint(1 if value else 0)
        if typ in ("int32", "int64"):
            return _key(number, 0) + _varint(int(value))
        if typ == "double":
            return _key(number, 1) + struct.pack("<d", value)
        raise AssertionError(f"no encoder for {typ}")
