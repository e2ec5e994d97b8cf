"""Built-in objects encoded as protobuf responses, the inverse of :mod:`.decode`.

Why: a client that accepts only ``application/vnd.kubernetes.protobuf`` gets protobuf from a real server.
The object (the JSON the rest of the server works with) is written as gogo-protobuf writes the Go struct:
fields in number order; non-pointer scalars and structs always (zero values too), pointers only when set;
repeated fields one tagged element each; map entries sorted by key, key and value always; the special types
in their own messages (Time as a Timestamp, empty when zero; Quantity, IntOrString, Duration, RawExtension
and FieldsV1); the whole in the ``k8s\\0`` + ``runtime.Unknown`` envelope.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import struct
from typing import Any

import orjson

from kubedl_local.apiserver.protobuf.decode import (
    DURATION,
    FIELDS_V1,
    INT_OR_STRING,
    MAGIC,
    MICRO_TIME,
    QUANTITY,
    QUANTITY_VALUE,
    RAW_EXTENSION,
    TIME,
    ProtobufError,
    UnknownKind,
    message_for,
)
from kubedl_local.apiserver.protobuf.table import Table

_VARINT = {"int32", "int64", "uint32", "uint64", "bool", "enum"}
_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative numbers: two's complement over 64 bits (10 bytes)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _delimited(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(payload)) + payload


def _scalar(number: int, typ: str, value: Any) -> bytes:
    if typ == "string":
        return _delimited(number, str(value if value is not None else "").encode())
    if typ == "bytes":
        raw = base64.b64decode(value) if isinstance(value, str) else b""
        return _delimited(number, raw)
    if typ == "bool":
        return _tag(number, 0) + _varint(1 if value else 0)
    if typ in ("double", "float"):
        if typ == "double":
            return _tag(number, 1) + struct.pack("<d", float(value or 0))
        return _tag(number, 5) + struct.pack("<f", float(value or 0))
    if typ in ("sint32", "sint64"):
        n = int(value or 0)
        return _tag(number, 0) + _varint((n << 1) ^ (n >> 63))
    return _tag(number, 0) + _varint(int(value or 0))


def _timestamp(value: Any) -> bytes:
    if not value:
        return b""
    text = str(value).replace("Z", "+00:00")
    when = dt.datetime.fromisoformat(text)
    seconds = int(when.timestamp())
    nanos = when.microsecond * 1000
    return _scalar(1, "int64", seconds) + _scalar(2, "int32", nanos)


def _duration(value: Any) -> int:
    text = str(value or "0")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if text == "0":
        return 0
    total = 0.0
    for number, unit in _DURATION.findall(text):
        total += float(number or 0) * _UNITS[unit]
    return sign * round(total)


class _Encoder:
    def __init__(self, table: Table) -> None:
        self.messages: dict[str, Any] = table["messages"]

    def message(self, name: str, value: Any) -> bytes:
        if name in (TIME, MICRO_TIME):
            return _timestamp(value)
        if name in (QUANTITY, QUANTITY_VALUE):
            return _scalar(1, "string", "0" if value is None else str(value))
        if name == DURATION:
            return _scalar(1, "int64", _duration(value))
        if name == INT_OR_STRING:
            if isinstance(value, str):
                return _scalar(1, "int64", 1) + _scalar(2, "int32", 0) + _scalar(3, "string", value)
            return _scalar(1, "int64", 0) + _scalar(2, "int32", int(value or 0)) + _scalar(3, "string", "")
        if name in (RAW_EXTENSION, FIELDS_V1):
            return b"" if value is None else _delimited(1, orjson.dumps(value))
        spec = self.messages.get(name)
        if spec is None:
            raise ProtobufError(f"no message {name} in the protobuf table")
        if spec["wrapper"]:
            return self._field(1, spec["fields"]["1"], value)
        if not isinstance(value, dict):
            value = {}
        out = bytearray()
        for number in sorted(spec["fields"], key=int):
            entry = spec["fields"][number]
            if entry["inline"]:
                out += _delimited(int(number), self.message(entry["type"], value))
            elif entry["name"] != "-":
                out += self._field(int(number), entry, value.get(entry["name"]))
        return bytes(out)

    def _one(self, number: int, typ: str, value: Any) -> bytes:
        if "." in typ:
            return _delimited(number, self.message(typ, value))
        return _scalar(number, typ, value)

    def _field(self, number: int, entry: dict[str, Any], value: Any) -> bytes:
        label, typ = entry["label"], entry["type"]
        if label == "repeated":
            return b"".join(self._one(number, typ, item) for item in value or [])
        if label == "map":
            out = bytearray()
            for key in sorted(value or {}):
                pair = _scalar(1, entry.get("key", "string"), key) + self._one(2, typ, value[key])
                out += _delimited(number, pair)
            return bytes(out)
        if value is None and entry["pointer"]:
            return b""
        return self._one(number, typ, value)


def encode(obj: dict[str, Any], table: Table) -> bytes:
    """An object (with apiVersion and kind) as a protobuf response body."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    name = message_for(table, api_version, kind)
    if name is None:
        raise UnknownKind(f"no protobuf message is known for kind {kind!r} in {api_version!r}")
    raw = _Encoder(table).message(name, {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
    type_meta = _scalar(1, "string", api_version) + _scalar(2, "string", kind)
    envelope = _delimited(1, type_meta) + _delimited(2, raw) + _scalar(3, "string", "") + _scalar(4, "string", "")
    return MAGIC + envelope
