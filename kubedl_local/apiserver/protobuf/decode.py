"""Protobuf request bodies of built-in kinds, decoded into the dict the JSON path produces.

A body is ``k8s\\0`` + a ``runtime.Unknown`` envelope (``typeMeta`` = apiVersion and kind, ``raw`` = the
typed message). The result must be what client-go would have sent as JSON for the same Go object, since the
rest of the server only knows JSON: this module emulates Go's ``encoding/json`` over the decoded struct, with
what the compiled table (:mod:`.table`) knows of each Go field:

- a non-pointer scalar is always on the wire (gogo-protobuf writes it even when zero), so a zero value is
  dropped when its JSON tag says ``omitempty`` and kept otherwise; a pointer is on the wire only when set,
  so an explicit ``false``/``0`` survives;
- a non-pointer struct is always in the JSON (``omitempty`` does not apply to structs), a pointer one only
  when sent; embedded structs with an empty JSON name are inlined;
- the special types have their own JSON forms: ``meta/v1`` ``Time`` (RFC 3339, seconds; zero is ``null``)
  and ``MicroTime`` (microseconds), ``Duration`` (Go's ``1h2m3s``), ``resource.Quantity`` (its string),
  ``intstr.IntOrString`` (an int or a string), ``runtime.RawExtension`` and ``FieldsV1`` (embedded JSON),
  ``bytes`` (base64, e.g. ``Secret.data``), maps (repeated key/value entry messages), and named slice
  types (``ExtraValue``) whose wrapper message is a bare array.
"""

from __future__ import annotations

import base64
import datetime as dt
import struct
from typing import Any

import orjson

from kubedl_local.apiserver.protobuf.table import META_PACKAGE, Table

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
TIME = f"{_META}.Time"
MICRO_TIME = f"{_META}.MicroTime"
DURATION = f"{_META}.Duration"
FIELDS_V1 = f"{_META}.FieldsV1"
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
QUANTITY_VALUE = "k8s.io.apimachinery.pkg.api.resource.QuantityValue"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"

_VARINT_TYPES = {"int32", "int64", "uint32", "uint64", "bool", "sint32", "sint64"}
_ZERO: dict[str, Any] = {"string": "", "bool": False, "double": 0.0, "float": 0.0}


class ProtobufError(ValueError):
    """The body is not a protobuf message this server can read (the message says why)."""


class UnknownKind(ProtobufError):
    """The envelope names a kind the table has no message for (custom resources have none)."""


# ------------------------------------------------------------------------------------------ wire format


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def fields(data: bytes) -> dict[int, list[tuple[int, Any]]]:
    """Field number -> [(wire type, raw value)] in wire order."""
    out: dict[int, list[tuple[int, Any]]] = {}
    pos = 0
    end = len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        if pos > end:
            raise ProtobufError(f"truncated field {number}")
        out.setdefault(number, []).append((wire, value))
    return out


def _signed(value: int, bits: int = 64) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    if bits == 32:
        value = (value + (1 << 31)) % (1 << 32) - (1 << 31)
    return value


def _scalar(typ: str, wire: int, raw: Any) -> Any:
    if typ == "string":
        if wire != 2:
            raise ProtobufError("a string field is not length-delimited")
        try:
            return bytes(raw).decode()
        except UnicodeDecodeError:
            raise ProtobufError("a string field is not valid UTF-8") from None
    if typ == "bytes":
        return bytes(raw)
    if typ == "bool":
        return bool(raw)
    if typ in ("int32", "sfixed32"):
        return _signed(raw, 32) if wire == 0 else struct.unpack("<i", raw)[0]
    if typ in ("int64", "sfixed64"):
        return _signed(raw) if wire == 0 else struct.unpack("<q", raw)[0]
    if typ in ("uint32", "uint64", "fixed32", "fixed64"):
        return raw if wire == 0 else int.from_bytes(raw, "little")
    if typ in ("sint32", "sint64"):
        return (raw >> 1) ^ -(raw & 1)
    if typ == "double":
        return struct.unpack("<d", raw)[0]
    if typ == "float":
        return struct.unpack("<f", raw)[0]
    raise ProtobufError(f"unsupported scalar type {typ}")


def _repeated_scalars(typ: str, values: list[tuple[int, Any]]) -> list[Any]:
    out: list[Any] = []
    for wire, raw in values:
        if wire == 2 and typ in _VARINT_TYPES:  # packed
            pos = 0
            while pos < len(raw):
                item, pos = _varint(raw, pos)
                out.append(_scalar(typ, 0, item))
        else:
            out.append(_scalar(typ, wire, raw))
    return out


# ------------------------------------------------------------------------------------------ special types


def _timestamp(data: bytes) -> tuple[int, int] | None:
    if not data:
        return None  # Go writes a zero Time as an empty message
    parts = fields(data)
    seconds = _signed(parts[1][-1][1]) if 1 in parts else 0
    nanos = _signed(parts[2][-1][1], 32) if 2 in parts else 0
    return seconds, nanos


def _format_time(data: bytes, micro: bool) -> str | None:
    ts = _timestamp(data)
    if ts is None:
        return None
    seconds, nanos = ts
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``: ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_frac(u, 3)}µs"
        return f"{sign}{_frac(u, 6)}ms"
    text = f"{_frac(u % 60_000_000_000, 9)}s"
    minutes = u // 60_000_000_000
    if minutes:
        text = f"{minutes % 60}m{text}"
        if minutes // 60:
            text = f"{minutes // 60}h{text}"
    return sign + text


def _frac(value: int, digits: int) -> str:
    whole, frac = divmod(value, 10**digits)
    text = f"{frac:0{digits}d}".rstrip("0")
    return f"{whole}.{text}" if text else str(whole)


def _int_or_string(data: bytes) -> int | str:
    parts = fields(data)
    kind = parts[1][-1][1] if 1 in parts else 0
    if kind == 1:
        return str(_scalar("string", 2, parts[3][-1][1])) if 3 in parts else ""
    return _signed(parts[2][-1][1], 32) if 2 in parts else 0


def _embedded_json(raw: bytes, table: Table) -> Any:
    if not raw:
        return None
    if raw.startswith(MAGIC):
        return decode(raw, table)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProtobufError("an embedded object (RawExtension) is neither JSON nor protobuf") from None


# ------------------------------------------------------------------------------------------ messages


class _Decoder:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.messages: dict[str, Any] = table["messages"]

    def message(self, name: str, data: bytes) -> Any:
        if name in (TIME, MICRO_TIME):
            return _format_time(data, micro=name == MICRO_TIME)
        if name in (QUANTITY, QUANTITY_VALUE):
            parts = fields(data)
            return _scalar("string", 2, parts[1][-1][1]) if 1 in parts else "0"
        if name == DURATION:
            parts = fields(data)
            return go_duration(_signed(parts[1][-1][1]) if 1 in parts else 0)
        if name == INT_OR_STRING:
            return _int_or_string(data)
        if name in (RAW_EXTENSION, FIELDS_V1):
            parts = fields(data)
            return _embedded_json(bytes(parts[1][-1][1]) if 1 in parts else b"", self.table)
        spec = self.messages.get(name)
        if spec is None:
            raise ProtobufError(f"no message {name} in the protobuf table")
        parts = fields(data)
        if spec["wrapper"]:
            entry = spec["fields"]["1"]
            return self._list(entry, parts.get(1, []))
        out: dict[str, Any] = {}
        for number, entry in spec["fields"].items():
            self._emit(out, entry, parts.get(int(number)))
        return out

    def _value(self, typ: str, wire: int, raw: Any) -> Any:
        if typ in self.messages or "." in typ:
            if wire != 2:
                raise ProtobufError(f"a {typ} field is not length-delimited")
            return self.message(typ, bytes(raw))
        value = _scalar(typ, wire, raw)
        return base64.b64encode(value).decode() if typ == "bytes" else value

    def _list(self, entry: dict[str, Any], values: list[tuple[int, Any]]) -> list[Any]:
        typ = entry["type"]
        if "." not in typ:
            items = _repeated_scalars(typ, values)
            return [base64.b64encode(v).decode() for v in items] if typ == "bytes" else items
        return [self._value(typ, wire, raw) for wire, raw in values]

    def _emit(self, out: dict[str, Any], entry: dict[str, Any], values: list[tuple[int, Any]] | None) -> None:
        name: str = entry["name"]
        if name == "-":
            return
        label, typ = entry["label"], entry["type"]
        if label in ("map", "repeated"):
            if not values:  # a nil map or slice
                if not entry["omitempty"] and not entry["omitzero"]:
                    out[name] = None
                return
            if label == "repeated":
                out[name] = self._list(entry, values)
                return
            mapping: dict[str, Any] = {}
            for _, raw in values:
                kv = fields(bytes(raw))
                key = _scalar(entry["key"], *kv[1][-1]) if 1 in kv else ""
                if 2 in kv:
                    mapping[str(key)] = self._value(typ, *kv[2][-1])
                else:
                    mapping[str(key)] = self._value(typ, 2, b"") if "." in typ else _zero_json(typ)
            out[name] = mapping
            return
        if "." not in typ:  # a scalar
            if values:
                wire, raw = values[-1]
                value = self._value(typ, wire, raw)
                if entry["pointer"] or not ((entry["omitempty"] or entry["omitzero"]) and _is_zero(typ, raw)):
                    out[name] = value
                return
            if entry["pointer"] or typ == "bytes":  # nil
                if not entry["omitempty"] and not entry["omitzero"]:
                    out[name] = None
                return
            if not entry["omitempty"] and not entry["omitzero"]:
                out[name] = _zero_json(typ)
            return
        if not values and entry["pointer"]:
            if not entry["omitempty"] and not entry["omitzero"]:
                out[name] = None
            return
        # Repeated occurrences of an embedded message merge; concatenating their bytes is that merge.
        data = b"".join(bytes(raw) for _, raw in values or [])
        value = self.message(typ, data)
        if entry["inline"] and isinstance(value, dict):
            out.update(value)
            return
        if entry["omitzero"] and not entry["pointer"] and value in (None, {}, 0, "", "0"):
            return
        out[name] = value


def _is_zero(typ: str, raw: Any) -> bool:
    if typ in ("string", "bytes"):
        return len(raw) == 0
    if isinstance(raw, int):
        return raw == 0
    return not any(bytes(raw))


def _zero_json(typ: str) -> Any:
    return _ZERO.get(typ, 0)


# ------------------------------------------------------------------------------------------ envelope


def envelope(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of a ``k8s\\0`` + ``runtime.Unknown`` body."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix (k8s\\x00)")
    unknown = fields(body[len(MAGIC) :])
    if 1 not in unknown:
        raise ProtobufError("the protobuf envelope has no typeMeta")
    type_meta = fields(bytes(unknown[1][-1][1]))
    api_version = _scalar("string", *type_meta[1][-1]) if 1 in type_meta else ""
    kind = _scalar("string", *type_meta[2][-1]) if 2 in type_meta else ""
    encoding = _scalar("string", *unknown[3][-1]) if 3 in unknown else ""
    if encoding:
        raise ProtobufError(f"content encoding {encoding!r} of a protobuf body is not supported")
    raw = bytes(unknown[2][-1][1]) if 2 in unknown else b""
    return str(api_version), str(kind), raw


def message_for(table: Table, api_version: str, kind: str) -> str | None:
    found: str | None = table["kinds"].get(f"{api_version}/{kind}")
    if found is None and f"{META_PACKAGE}.{kind}" in table["messages"]:
        # DeleteOptions, CreateOptions...: client-go encodes them in the request's own group version.
        found = f"{META_PACKAGE}.{kind}"
    return found


def decode(body: bytes, table: Table) -> dict[str, Any]:
    """The JSON-equivalent dict of a protobuf request body (see the module docstring)."""
    api_version, kind, raw = envelope(body)
    name = message_for(table, api_version, kind)
    if name is None:
        raise UnknownKind(f"no protobuf message is known for kind {kind!r} in {api_version!r}")
    value = _Decoder(table).message(name, raw)
    if not isinstance(value, dict):
        raise ProtobufError(f"{kind} is not an object")
    return {"kind": kind, "apiVersion": api_version, **value}
