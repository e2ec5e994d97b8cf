"""Built-in kinds decoded as the real API server decodes them: into their Go structs and back to JSON.

Why: the real server never stores what a client sent. It decodes the body into the kind's Go struct
(``sigs.k8s.io/json``: case-sensitive, strict about types), reports unknown fields (a 400 with
``fieldValidation=Strict``, kubectl's default, else a ``Warning`` header), and everything it returns is
that struct encoded again by ``encoding/json``: unknown fields gone, ``omitempty`` zero values gone, zero
structs present (``"source": {}``, ``"status": {}``), times in UTC at their precision, quantities
canonical (``memory: 1024Mi`` is ``"1Gi"``; every ``ResourceList`` value rounded up to milli-units by
``SetDefaults_ResourceList``). A wrong type is a 400 naming the Go struct field and type
(``json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of
type int32``) whatever ``fieldValidation`` says.

The Go structs are known from the same compiled table the protobuf decoder uses (:mod:`.protobuf.table`):
field JSON names and types, pointers, ``omitempty``/``omitzero``, inlined embedded structs.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from kubedl_local.apiserver.patch import deepcopy_json
from kubedl_local.apiserver.protobuf.decode import (
    DURATION,
    FIELDS_V1,
    INT_OR_STRING,
    MICRO_TIME,
    QUANTITY,
    QUANTITY_VALUE,
    RAW_EXTENSION,
    TIME,
    go_duration,
    message_for,
)
from kubedl_local.apiserver.protobuf.table import Table
from kubedl_py.api import quantities as quantity

OBJECT_META = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_RFC3339 = "2006-01-02T15:04:05Z07:00"
_RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
_TIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_DURATION_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_DURATION_UNITS["h"] = 3600 * 10**9
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_B64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


class DecodeError(ValueError):
    """The body does not decode into the kind's Go struct; the message is the real server's (after
    ``<Kind> in version "<v>" cannot be handled as a <Kind>: ``)."""


@dataclass
class Decoded:
    obj: dict[str, Any]
    #: paths of unknown fields in document order (``spec.containers[0].foo``)
    unknown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Field:
    number: str
    name: str
    label: str
    type: str
    go: str
    goname: str
    pointer: bool
    omitempty: bool
    omitzero: bool
    inline: bool


@dataclass(frozen=True)
class _Message:
    name: str
    short: str
    wrapper: bool
    fields: tuple[_Field, ...]
    #: JSON name -> (inline fields to go through, the field)
    index: dict[str, tuple[tuple[_Field, ...], _Field]]


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _elem_type(go: str) -> str:
    if go.startswith("[]"):
        return go[2:]
    if go.startswith("map["):
        depth = 0
        for i, ch in enumerate(go):
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    return go[i + 1 :]
    return go


class Types:
    """The Go structs of the built-in kinds, from the compiled table."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._messages: dict[str, _Message] = {}
        self._plans: dict[str, list[tuple[int, str, str, _Message | None, bool, bool]]] = {}
        self._zeros: dict[str, Any] = {}

    def message_for(self, api_version: str, kind: str) -> str | None:
        return message_for(self.table, api_version, kind)

    def message(self, name: str) -> _Message:
        found = self._messages.get(name)
        if found is None:
            spec = self.table["messages"][name]
            fields = tuple(
                _Field(
                    number=number,
                    name=entry["name"],
                    label=entry["label"],
                    type=entry["type"],
                    go=entry.get("go", ""),
                    goname=entry.get("goname", entry["name"]),
                    pointer=entry["pointer"],
                    omitempty=entry["omitempty"],
                    omitzero=entry["omitzero"],
                    inline=entry["inline"],
                )
                for number, entry in spec["fields"].items()
            )
            index: dict[str, tuple[tuple[_Field, ...], _Field]] = {}
            found = _Message(name, name.rsplit(".", 1)[-1], spec["wrapper"], fields, index)
            self._messages[name] = found
            for f in fields:
                if f.inline and f.type in self.table["messages"]:
                    for key, (chain, inner) in self.message(f.type).index.items():
                        index.setdefault(key, ((f, *chain), inner))
                elif f.name and f.name != "-":
                    index.setdefault(f.name, ((), f))
        return found

    # ---- JSON -> Go values -------------------------------------------------------------------------------

    def decode(self, obj: dict[str, Any], message: str) -> Decoded:
        """``obj`` (with apiVersion and kind) as the real server would store it; raises :class:`DecodeError`."""
        out = Decoded({})
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        value = self._struct(self.message(message), body, "", "", out.unknown)
        encoded = self._encode_struct(self.message(message), value)
        head: dict[str, Any] = {k: obj[k] for k in ("kind", "apiVersion") if k in obj}
        out.obj = {**head, **encoded}
        return out

    def decode_part(self, value: Any, message: str, path: str) -> Decoded:
        """One nested struct (a custom resource's ``metadata``), reported under ``path``."""
        out = Decoded({})
        msg = self.message(message)
        if not isinstance(value, dict):
            raise DecodeError(self._type_error(value, msg.short, path, f"v1.{msg.short}"))
        out.obj = self._encode_struct(msg, self._struct(msg, value, path, path, out.unknown))
        return out

    def _type_error(self, value: Any, struct: str, gopath: str, go: str) -> str:
        kind = _json_kind(value)
        if kind == "number" and (isinstance(value, float) or go in _INT_RANGE):
            kind = f"number {value!r}" if isinstance(value, float) else f"number {value}"
        return f"json: cannot unmarshal {kind} into Go struct field {struct}.{gopath} of type {go}"

    def _struct(
        self, msg: _Message, value: dict[str, Any], path: str, gopath: str, unknown: list[str]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in value.items():
            hit = msg.index.get(key)
            if hit is None:
                unknown.append(f"{path}.{key}" if path else key)
                continue
            chain, f = hit
            target = out
            fpath = gopath
            struct = msg.short
            for inline in chain:
                target = target.setdefault(inline.number, {})
                fpath = f"{fpath}.{inline.goname}" if fpath else inline.goname
                struct = inline.type.rsplit(".", 1)[-1]
            child_path = f"{path}.{key}" if path else key
            child_gopath = f"{fpath}.{key}" if fpath else key
            if item is None:
                target.pop(f.number, None)  # null: a nil pointer, slice or map; a zero value otherwise
                continue
            target[f.number] = self._value(
                f, item, path=child_path, gopath=child_gopath, struct=struct, unknown=unknown
            )
        return out

    def _value(self, f: _Field, value: Any, *, path: str, gopath: str, struct: str, unknown: list[str]) -> Any:
        # SetDefaults_ResourceList: core/v1's ResourceList (requests, limits, capacity, quota) in milli-units.
        milli = f.go == "v1.ResourceList"
        if f.label == "map":
            if not isinstance(value, dict):
                raise DecodeError(self._type_error(value, struct, gopath, f.go))
            elem = _elem_type(f.go)
            return {
                str(k): self._single(
                    f.type, v, path=f"{path}.{k}", gopath=gopath, struct=struct, go=elem, unknown=unknown, milli=milli
                )
                for k, v in value.items()
            }
        if f.label == "repeated":
            if f.type == "bytes" and isinstance(value, str):  # never in practice: repeated bytes
                return value
            if not isinstance(value, list):
                raise DecodeError(self._type_error(value, struct, gopath, f.go))
            elem = _elem_type(f.go)
            return [
                self._single(f.type, v, path=f"{path}[{i}]", gopath=gopath, struct=struct, go=elem, unknown=unknown)
                for i, v in enumerate(value)
            ]
        return self._single(f.type, value, path=path, gopath=gopath, struct=struct, go=f.go, unknown=unknown)

    def _single(
        self,
        typ: str,
        value: Any,
        *,
        path: str,
        gopath: str,
        struct: str,
        go: str,
        unknown: list[str],
        milli: bool = False,
    ) -> Any:
        if value is None:
            return self._zero(typ)
        if typ == "string":
            if not isinstance(value, str):
                raise DecodeError(self._type_error(value, struct, gopath, go))
            return value
        if typ == "bool":
            if not isinstance(value, bool):
                raise DecodeError(self._type_error(value, struct, gopath, go))
            return value
        if typ in _INT_RANGE:
            low, high = _INT_RANGE[typ]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise DecodeError(self._type_error(value, struct, gopath, go))
            return value
        if typ in ("double", "float"):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise DecodeError(self._type_error(value, struct, gopath, go))
            return value
        if typ == "bytes":
            if not isinstance(value, str):
                raise DecodeError(self._type_error(value, struct, gopath, go))
            _check_base64(value)
            return value
        if typ in (QUANTITY, QUANTITY_VALUE):
            try:
                return quantity.canonical(value, milli=milli)
            except quantity.QuantityError as e:
                raise DecodeError(str(e)) from None
        if typ == TIME:
            return _time(value, micro=False)
        if typ == MICRO_TIME:
            return _time(value, micro=True)
        if typ == DURATION:
            return _duration(value)
        if typ == INT_OR_STRING:
            if isinstance(value, str):
                return value
            if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
                return value
            raise DecodeError(self._type_error(value, struct, gopath, "int32"))
        if typ in (RAW_EXTENSION, FIELDS_V1):
            return value
        msg = self.message(typ)
        if msg.wrapper:
            if not isinstance(value, list):
                raise DecodeError(self._type_error(value, struct, gopath, go))
            inner = msg.fields[0]
            return [
                self._single(inner.type, v, path=path, gopath=gopath, struct=struct, go="string", unknown=unknown)
                for v in value
            ]
        if not isinstance(value, dict):
            raise DecodeError(self._type_error(value, struct, gopath, go))
        return self._struct(msg, value, path, gopath, unknown)

    def _zero(self, typ: str) -> Any:
        if typ == "string":
            return ""
        if typ == "bool":
            return False
        if typ in _INT_RANGE or typ in ("double", "float"):
            return 0
        if typ == "bytes":
            return None
        if typ in (QUANTITY, QUANTITY_VALUE):
            return "0"
        if typ in (TIME, MICRO_TIME, RAW_EXTENSION, FIELDS_V1):
            return None
        if typ == DURATION:
            return "0s"
        if typ == INT_OR_STRING:
            return 0
        return [] if self.message(typ).wrapper else {}

    # ---- Go values -> JSON -------------------------------------------------------------------------------

    def _plan(self, msg: _Message) -> list[tuple[int, str, str, _Message | None, bool, bool]]:
        """How each field of ``msg`` is encoded, worked out once: (how, number, JSON name, the struct to
        recurse into, omit when empty, omit when zero)."""
        plan = self._plans.get(msg.name)
        if plan is not None:
            return plan
        plan = []
        messages = self.table["messages"]
        for f in msg.fields:
            sub = self.message(f.type) if f.type in messages and f.type not in _SPECIAL else None
            if f.inline:
                if sub is not None:
                    plan.append((_INLINE, f.number, "", sub, False, False))
                continue
            if not f.name or f.name == "-":
                continue
            struct = sub if sub is not None and not sub.wrapper else None
            if f.label in ("map", "repeated") or f.type == "bytes":
                how = _MAP if f.label == "map" else _LIST if f.label == "repeated" else _BYTES
            elif f.pointer:
                how = _POINTER
            elif "." not in f.type:
                how = _SCALAR
            elif struct is not None:
                how = _STRUCT
            else:
                how = _SPECIAL_VALUE
            plan.append((how, f.number, f.name, struct, f.omitempty or f.omitzero, f.omitzero))
            self._zeros.setdefault(f.number + "@" + msg.name, self._zero(f.type))
        self._plans[msg.name] = plan
        return plan

    def _encode_struct(self, msg: _Message, value: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for how, number, name, struct, omit, omitzero in self._plan(msg):
            if how == _INLINE:
                assert struct is not None
                out.update(self._encode_struct(struct, value.get(number) or {}))
                continue
            item = value.get(number, _ABSENT)
            if how <= _BYTES:  # maps, lists and []byte: nil or empty
                if item is _ABSENT or item is None:
                    if not omit:
                        out[name] = None
                    continue
                if omit and not item:
                    continue
                if struct is None:
                    out[name] = item
                elif how == _MAP:
                    out[name] = {k: self._encode_struct(struct, v) for k, v in item.items()}
                else:
                    out[name] = [self._encode_struct(struct, v) for v in item]
                continue
            if how == _POINTER:
                if item is not _ABSENT:
                    out[name] = self._encode_struct(struct, item) if struct is not None else item
                elif not omit:
                    out[name] = None
                continue
            if how == _SCALAR:
                if item is _ABSENT:
                    item = self._zeros[number + "@" + msg.name]
                if omit and not item and item is not None:
                    continue
                out[name] = item
                continue
            if how == _STRUCT:
                assert struct is not None
                encoded: Any = self._encode_struct(struct, item if isinstance(item, dict) else {})
            else:
                encoded = self._zeros[number + "@" + msg.name] if item is _ABSENT else item
                if isinstance(encoded, dict | list):
                    encoded = deepcopy_json(encoded)
            if omitzero and encoded in (None, {}, [], 0, "", "0"):
                continue
            out[name] = encoded
        return out


_ABSENT: Any = object()
_MAP, _LIST, _BYTES, _POINTER, _SCALAR, _STRUCT, _SPECIAL_VALUE, _INLINE = range(8)
_SPECIAL = frozenset({QUANTITY, QUANTITY_VALUE, TIME, MICRO_TIME, DURATION, INT_OR_STRING, RAW_EXTENSION, FIELDS_V1})


def _check_base64(text: str) -> None:
    """Go's StdEncoding errors, with its byte offsets (``illegal base64 data at input byte 4``)."""
    data = text.encode()
    for i, byte in enumerate(data):
        if byte == ord("="):
            break
        if byte not in _B64:
            raise DecodeError(f"illegal base64 data at input byte {i}")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise DecodeError(f"illegal base64 data at input byte {len(data) - len(data) % 4}") from None


def _time(value: Any, *, micro: bool) -> str | None:
    layout = _RFC3339_MICRO if micro else _RFC3339
    if not isinstance(value, str):
        raise DecodeError(f"json: cannot unmarshal {_json_kind(value)} into Go value of type string")
    if value == "":
        return None
    m = _TIME_RE.match(value)
    fraction = m.group(7) if m else None
    if m is None or (micro and (fraction is None or len(fraction) != 7)):
        raise DecodeError(f'parsing time "{value}" as "{layout}": cannot parse "{value}" as "2006"')
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    offset = m.group(8)
    tz = dt.UTC
    if offset != "Z":
        sign = 1 if offset[0] == "+" else -1
        tz = dt.timezone(sign * dt.timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    try:
        when = dt.datetime(year, month, day, hour, minute, second, tzinfo=tz).astimezone(dt.UTC)
    except ValueError as e:
        raise DecodeError(f'parsing time "{value}": {e}') from None
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{(fraction or '.0')[1:7]:0<6}Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(value: Any) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"json: cannot unmarshal {_json_kind(value)} into Go value of type string")
    text = value
    sign = 1
    if text[:1] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return "0s"
    total = 0.0
    pos = 0
    for m in _DURATION_RE.finditer(text):
        if m.start() != pos or m.group(1) in ("", "."):
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise DecodeError(f'time: invalid duration "{value}"')
    return go_duration(sign * round(total))
