"""managedFields and server-side apply, as the real API server's field manager (structured-merge-diff).

Why: every write to a real server records who set which fields (``metadata.managedFields``): creates,
updates and patches as ``Update`` entries of their field manager (``?fieldManager=``, else the first word
of the User-Agent), server-side apply (``kubectl apply --server-side``, PATCH
``application/apply-patch+yaml``) as ``Apply`` entries. Apply uses that record: it merges the applied
configuration into the object, removes the fields its manager applied last time and no longer applies (when
nobody else owns them), and refuses with a 409 to change a field another manager owns unless forced.

The port follows sigs.k8s.io/structured-merge-diff v6 and k8s.io/apimachinery's managedfields: a field set
is a set of paths whose elements are written as in ``fieldsV1`` (``f:<field>``, ``k:<key JSON>`` for items
of lists keyed by fields, ``v:<value JSON>`` for items of sets); the type of each node (struct, map, list and
how its items are identified, atomic or granular) comes from the OpenAPI schema of the kind, as the real
server's type converter reads it (kube-openapi's schemaconv): ``x-kubernetes-list-type``/``-list-map-keys``,
else a patch strategy ``merge`` with its merge key, else atomic; ``x-kubernetes-map-type``; objects without
properties, or under ``x-kubernetes-preserve-unknown-fields``, are "deduced" (maps granular, lists atomic).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]

#: what the strip-meta manager never records (apimachinery's stripmeta.go)
STRIP: frozenset[Path] = frozenset(
    {
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata",),
        ("f:metadata", "f:name"),
        ("f:metadata", "f:namespace"),
        ("f:metadata", "f:creationTimestamp"),
        ("f:metadata", "f:selfLink"),
        ("f:metadata", "f:uid"),
        ("f:metadata", "f:clusterName"),
        ("f:metadata", "f:generation"),
        ("f:metadata", "f:managedFields"),
        ("f:metadata", "f:resourceVersion"),
    }
)
#: the manager that takes over the fields of an object nobody tracked before its first apply
BEFORE_FIRST_APPLY = "before-first-apply"
#: at most this many Update entries; older ones merge into "ancient-changes" (capmanagers.go)
MAX_UPDATE_MANAGERS = 10
ANCIENT = "ancient-changes"


# ---------------------------------------------------------------------------------------------------- types


@dataclass
class Type:
    """One node type (a schema.Atom): any of a scalar, a map/struct and a list part."""

    scalar: bool = False
    #: map/struct part: declared fields (raw schemas, resolved on demand) and the element type of the rest
    is_map: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    elem: Any = None  # a raw schema, DEDUCED, UNTYPED, or None (no undeclared keys)
    map_atomic: bool = False
    #: list part: its element type, atomic or associative, and the keys of an associative one (() = a set)
    is_list: bool = False
    item: Any = None
    list_atomic: bool = True
    keys: tuple[str, ...] = ()
    preserve: bool = False
    #: resolved child types by key ("" for the list item): resolution is the hot path of every write
    memo: dict[str, Type] = field(default_factory=dict, compare=False, repr=False)

    def copy(self, **changes: Any) -> Type:
        return Type(**{**self.__dict__, **changes, "memo": {}})


DEDUCED = "__untyped_deduced_"
UNTYPED = "__untyped_atomic_"
_DEDUCED_TYPE = Type(scalar=True, is_map=True, elem=DEDUCED, is_list=True, item=UNTYPED, list_atomic=True)
_UNTYPED_TYPE = Type(scalar=True, is_map=True, elem=UNTYPED, map_atomic=True, is_list=True, item=UNTYPED)


class Schemas:
    """Resolves the SMD type of schema nodes: OpenAPI v3 ``components.schemas`` (built-in kinds) and inline
    structural schemas (custom resources)."""

    def __init__(self, components: dict[str, Obj] | None = None) -> None:
        self.components = components or {}
        self._named: dict[str, Type] = {}
        self._inline: dict[tuple[int, bool], tuple[Obj, Type]] = {}

    def named(self, name: str) -> Type | None:
        got = self._named.get(name)
        if got is None:
            raw = self.components.get(name)
            if raw is None:
                return None
            got = self._named[name] = Type()  # placeholder first: schemas are recursive (JSONSchemaProps)
            built = self._parse(raw, bool(raw.get("x-kubernetes-preserve-unknown-fields")))
            got.__dict__.update(built.__dict__)
        return got

    def type_of(self, raw: Any, preserve: bool = False) -> Type:
        if raw is DEDUCED or raw is None:
            return _DEDUCED_TYPE
        if raw is UNTYPED:
            return _UNTYPED_TYPE
        if isinstance(raw, Type):
            return raw
        if not isinstance(raw, dict):
            return _DEDUCED_TYPE
        ref = raw.get("$ref")
        if ref is None and isinstance(raw.get("allOf"), list) and len(raw["allOf"]) == 1:
            ref = (raw["allOf"][0] or {}).get("$ref")
        if isinstance(ref, str):
            named = self.named(ref.rsplit("/", 1)[-1])
            if named is None:
                return _DEDUCED_TYPE
            map_type = raw.get("x-kubernetes-map-type")
            if map_type in ("atomic", "granular") and named.is_map and named.map_atomic != (map_type == "atomic"):
                override = named.memo.get("<atomic>" if map_type == "atomic" else "<granular>")
                if override is None:
                    override = named.copy(map_atomic=map_type == "atomic")
                    named.memo["<atomic>" if map_type == "atomic" else "<granular>"] = override
                return override
            return named
        key = (id(raw), preserve)
        cached = self._inline.get(key)
        if cached is not None and cached[0] is raw:
            return cached[1]
        built = self._parse(raw, preserve or bool(raw.get("x-kubernetes-preserve-unknown-fields")))
        self._inline[key] = (raw, built)
        return built

    def _parse(self, raw: Obj, preserve: bool) -> Type:
        typ = raw.get("type")
        if typ == "object":
            return self._object(raw, preserve, Type(is_map=True))
        if typ == "array":
            return self._list(raw, preserve, Type(is_list=True))
        if typ in ("integer", "boolean", "number", "string"):
            return Type(scalar=True)
        # no type: anything (int-or-string, preserved unknown fields, ...)
        return self._list(raw, preserve, self._object(raw, preserve, Type(scalar=True, is_map=True, is_list=True)))

    @staticmethod
    def _object(raw: Obj, preserve: bool, t: Type) -> Type:
        t.fields = dict(raw.get("properties") or {})
        extra = raw.get("additionalProperties")
        if extra is None:
            t.elem = DEDUCED if preserve or not t.fields else None
        elif isinstance(extra, dict):
            t.elem = extra
        else:
            t.elem = DEDUCED if extra else None
        t.map_atomic = raw.get("x-kubernetes-map-type") == "atomic"
        t.preserve = preserve
        return t

    @staticmethod
    def _list(raw: Obj, preserve: bool, t: Type) -> Type:
        t.item = raw.get("items") if isinstance(raw.get("items"), dict) else UNTYPED
        t.preserve = preserve
        list_type = raw.get("x-kubernetes-list-type")
        strategy = raw.get("x-kubernetes-patch-strategy")
        if list_type is not None:
            t.list_atomic = list_type not in ("set", "map")
            t.keys = tuple(raw.get("x-kubernetes-list-map-keys") or ()) if list_type == "map" else ()
        elif strategy in ("merge", "merge,retainKeys"):
            t.list_atomic = False
            key = raw.get("x-kubernetes-patch-merge-key")
            t.keys = (key,) if isinstance(key, str) else ()
        else:
            t.list_atomic = True
        return t

    def child(self, t: Type, key: str) -> Type:
        raw = t.fields.get(key) if t.fields else None
        slot = "f:" + key if raw is not None else "*"  # declared fields by name, any other key: the element
        got = t.memo.get(slot)
        if got is None:
            source = raw if raw is not None else (t.elem if t.elem is not None else DEDUCED)
            got = t.memo[slot] = self.type_of(source, t.preserve)
        return got

    def declared(self, t: Type, key: str) -> bool:
        return bool(t.fields) and key in t.fields

    def item(self, t: Type) -> Type:
        got = t.memo.get("")
        if got is None:
            got = t.memo[""] = self.type_of(t.item, t.preserve)
        return got


class Root:
    """The type of a whole object: a kind's schema, with ``metadata`` typed as ObjectMeta."""

    def __init__(self, schemas: Schemas, top: Type, object_meta: Type) -> None:
        self.schemas = schemas
        self.top = top.copy()
        self.top.fields = {**top.fields, "metadata": object_meta, "apiVersion": _SCALAR, "kind": _SCALAR}
        if self.top.elem is None and not top.fields:
            self.top.elem = DEDUCED


_SCALAR = Type(scalar=True)


def object_meta_fallback() -> Type:
    """ObjectMeta when no OpenAPI document is at hand: its maps and keyed lists, the rest deduced."""
    return Type(
        is_map=True,
        fields={
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "ownerReferences": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["uid"],
            },
        },
        elem=DEDUCED,
    )


# ------------------------------------------------------------------------------------------- path elements


def go_json(value: Any) -> str:
    """encoding/json's compact form (HTML characters escaped, map keys sorted)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


class ItemError(ValueError):
    """A list item that cannot be named (a keyed item without its key, a non-scalar in a set)."""


def item_element(schemas: Schemas, t: Type, item: Any) -> str:
    """The path element of an item of an associative list (listItemToPathElement)."""
    if t.keys:
        if not isinstance(item, dict):
            raise ItemError("associative list with keys may not have non-map elements")
        keys: dict[str, Any] = {}
        item_type = schemas.item(t)
        for k in t.keys:
            if k in item:
                keys[k] = item[k]
                continue
            declared = item_type.fields.get(k) if item_type.fields else None
            if isinstance(declared, dict) and "default" in declared:
                keys[k] = declared["default"]  # a key left out counts as its default (ContainerPort.protocol)
                continue
            raise ItemError(f"associative list with keys has an element that omits key field {json.dumps(k)}")
        return "k:" + go_json(keys)
    if isinstance(item, dict | list):
        raise ItemError("associative list without keys has an element that's a map type")
    return "v:" + go_json(item)


def _value_rank(v: Any) -> tuple[int, Any]:
    if isinstance(v, bool):
        return (3, v)
    if isinstance(v, int | float):
        return (1, v)
    if isinstance(v, str):
        return (2, v)
    if v is None:
        return (6, 0)
    return (4 if isinstance(v, list) else 5, go_json(v))


@functools.lru_cache(maxsize=8192)
def _element_key(e: str) -> tuple[Any, ...]:
    """PathElement.Compare: field names, then keys, then values, then indexes."""
    kind, text = e[:2], e[2:]
    if kind == "f:":
        return (0, text.encode())
    if kind == "k:":
        fields = json.loads(text)
        return (1, tuple((name.encode(), _value_rank(fields[name])) for name in fields))
    if kind == "v:":
        return (2, _value_rank(json.loads(text)))
    return (3, int(text) if text.isdigit() else 0)


def path_string(path: Path) -> str:
    """fieldpath.Path.String(): ``.spec.containers[name="a"].image``."""
    out = []
    for e in path:
        kind, text = e[:2], e[2:]
        if kind == "f:":
            out.append("." + text)
        elif kind == "k:":
            fields = json.loads(text)
            out.append("[" + ",".join(f"{k}={_go_value(v)}" for k, v in fields.items()) + "]")
        elif kind == "v:":
            out.append(f"[={_go_value(json.loads(text))}]")
        else:
            out.append(f"[{text}]")
    return "".join(out)


def _go_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return "{other}"


# --------------------------------------------------------------------------------------------- field sets


def encode_set(paths: Iterable[Path]) -> Obj:
    """A set of paths as ``fieldsV1`` ("." marks a member that also has children; entries sorted)."""
    tree: dict[str | None, Any] = {}
    for p in paths:
        node = tree
        for e in p:
            node = node.setdefault(e, {})
        node[None] = True  # a member

    def emit(node: dict[str | None, Any], top: bool = False) -> Obj:
        member = node.pop(None, False)
        keys = [k for k in node if k is not None]
        out: Obj = {}
        if member and keys and not top:
            out["."] = {}
        for e in sorted(keys, key=_element_key) if len(keys) > 1 else keys:
            out[e] = emit(node[e])
        return out

    return emit(tree, top=True)


def decode_set(fields: Any) -> set[Path]:
    out: set[Path] = set()

    def walk(node: Any, prefix: Path) -> None:
        if not isinstance(node, dict):
            raise ValueError("fieldsV1 must be a JSON object")
        if not node and prefix:
            out.add(prefix)
            return
        for e, sub in node.items():
            if e == ".":
                if prefix:
                    out.add(prefix)
            elif len(e) < 2 or e[:2] not in ("f:", "k:", "v:", "i:"):
                raise ValueError(f"unexpected path element {e!r}")
            else:
                walk(sub, (*prefix, e))

    walk(fields, ())
    return out


def with_named_ancestors(paths: set[Path]) -> set[Path]:
    """EnsureNamedFieldsAreMembers, near enough: every field-named ancestor of a member is a member."""
    out = set(paths)
    for p in paths:
        for i in range(1, len(p)):
            if p[i - 1].startswith("f:"):
                out.add(p[:i])
    return out


# ---------------------------------------------------------------------------------------- typed walkers


def _kind_of(t: Type, v: Any) -> str:
    """deduceAtom: which part of the type the value uses."""
    if isinstance(v, dict) and t.is_map:
        return "map"
    if isinstance(v, list) and t.is_list:
        return "list"
    return "leaf"


def to_set(schemas: Schemas, t: Type, value: Any) -> set[Path]:
    """TypedValue.ToFieldSet."""
    out: set[Path] = set()

    def walk(t: Type, v: Any, path: Path) -> None:
        kind = _kind_of(t, v)
        if kind == "map":
            if t.map_atomic:
                out.add(path)
                return
            for key, child in v.items():
                p = (*path, "f:" + key)
                walk(schemas.child(t, key), child, p)
                if child is None or (isinstance(child, dict) and not child) or not schemas.declared(t, key):
                    out.add(p)
        elif kind == "list":
            if t.list_atomic:
                out.add(path)
                return
            seen: set[str] = set()
            dup: set[str] = set()
            names = []
            for item in v:
                e = item_element(schemas, t, item)
                names.append(e)
                if e in seen:
                    dup.add(e)
                seen.add(e)
            for e in dup:
                out.add((*path, e))
            item_type = schemas.item(t)
            for e, item in zip(names, v, strict=True):
                if e in dup:
                    continue
                walk(item_type, item, (*path, e))
                out.add((*path, e))
        else:
            out.add(path)

    walk(t, value, ())
    out.discard(())
    return out


@dataclass
class Comparison:
    added: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)


_ABSENT: Any = object()


def compare(schemas: Schemas, t: Type, lhs: Any, rhs: Any) -> Comparison:
    """TypedValue.Compare: what rhs added, removed and modified relative to lhs (added/removed nodes at
    every level, modified leaves)."""
    c = Comparison()

    def leaf(lv: Any, rv: Any, path: Path) -> None:
        if lv is _ABSENT:
            c.added.add(path)
        elif rv is _ABSENT:
            c.removed.add(path)
        elif lv != rv or type(lv) is not type(rv):
            c.modified.add(path)

    def added(t: Type, v: Any, path: Path) -> None:
        """Everything under a node that was not there before (the compare of a create)."""
        c.added.add(path)
        kind = _kind_of(t, v)
        if kind == "map" and v and not t.map_atomic:
            for key, child in v.items():
                added(schemas.child(t, key), child, (*path, "f:" + key))
        elif kind == "list" and v and not t.list_atomic:
            item_type = schemas.item(t)
            seen: set[str] = set()
            for item in v:
                e = item_element(schemas, t, item)
                if e not in seen:
                    seen.add(e)
                    added(item_type, item, (*path, e))

    def walk(t: Type, lv: Any, rv: Any, path: Path) -> None:
        if lv is rv:
            return  # the same object on both sides (what an update carried over): nothing changed under it
        if lv is _ABSENT:
            added(t, rv, path)
            return
        lk = _kind_of(t, lv) if lv is not _ABSENT else None
        rk = _kind_of(t, rv) if rv is not _ABSENT else None
        if lk is not None and rk is not None and lk != rk:
            leaf(lv, rv, path)
            return
        kind = rk or lk
        if kind == "map":
            lm = lv if isinstance(lv, dict) else {}
            rm = rv if isinstance(rv, dict) else {}
            if t.map_atomic or (not lm and not rm):
                leaf(lv, rv, path)
                return
            for key in {**lm, **rm}:
                walk(schemas.child(t, key), lm.get(key, _ABSENT), rm.get(key, _ABSENT), (*path, "f:" + key))
        elif kind == "list":
            ll = lv if isinstance(lv, list) else []
            rl = rv if isinstance(rv, list) else []
            if t.list_atomic or (not ll and not rl):
                leaf(lv, rv, path)
                return
            _compare_items(t, ll, rl, path)
        else:
            leaf(lv, rv, path)
            return
        if lv is _ABSENT:
            c.added.add(path)
        elif rv is _ABSENT:
            c.removed.add(path)

    def _compare_items(t: Type, ll: list[Any], rl: list[Any], path: Path) -> None:
        order: list[str] = []
        lvals: dict[str, list[Any]] = {}
        rvals: dict[str, list[Any]] = {}
        for item in ll:
            e = item_element(schemas, t, item)
            if e not in lvals:
                order.append(e)
            lvals.setdefault(e, []).append(item)
        for item in rl:
            e = item_element(schemas, t, item)
            if e not in rvals and e not in lvals:
                order.append(e)
            rvals.setdefault(e, []).append(item)
        item_type = schemas.item(t)
        for e in order:
            lli, rli = lvals.get(e, []), rvals.get(e, [])
            p = (*path, e)
            if len(lli) <= 1 and len(rli) <= 1:
                walk(item_type, lli[0] if lli else _ABSENT, rli[0] if rli else _ABSENT, p)
            elif len(lli) >= 2 and len(rli) >= 2:
                if lli != rli:
                    c.modified.add(p)
            elif len(lli) >= 2:
                if rli:
                    walk(item_type, _ABSENT, rli[0], p)
                c.removed.add(p)
            else:
                if lli:
                    walk(item_type, lli[0], _ABSENT, p)
                c.added.add(p)

    walk(t, lhs, rhs, ())
    for s in (c.added, c.removed, c.modified):
        s.discard(())
    return c


def merge(schemas: Schemas, t: Type, lhs: Any, rhs: Any) -> Any:
    """TypedValue.Merge: rhs over lhs, maps and associative lists merged item by item (rhs's order for
    shared items, lhs-only items where they were)."""

    def walk(t: Type, lv: Any, rv: Any) -> Any:
        if rv is _ABSENT:
            return lv
        lk = None if lv is _ABSENT else _kind_of(t, lv)
        rk = _kind_of(t, rv)
        if lk is not None and lk != rk:
            return rv
        if rk == "map":
            lm = lv if isinstance(lv, dict) else {}
            if t.map_atomic or (not lm and not rv):
                return rv
            out: Obj = {}
            for key in {**lm, **rv}:
                got = walk(schemas.child(t, key), lm.get(key, _ABSENT), rv.get(key, _ABSENT))
                if got is not _ABSENT:
                    out[key] = got
            return out if out else _ABSENT
        if rk == "list":
            ll = lv if isinstance(lv, list) else []
            if t.list_atomic or (not ll and not rv):
                return rv
            merged = _merge_items(t, ll, rv)
            return merged if merged else _ABSENT
        return rv

    def _merge_items(t: Type, ll: list[Any], rl: list[Any]) -> list[Any]:
        item_type = schemas.item(t)
        rpes = [item_element(schemas, t, item) for item in rl]
        robs: dict[str, Any] = {}
        for e, item in zip(rpes, rl, strict=True):
            if e in robs:
                raise ItemError(f"duplicate entries for key {path_string((e,))}")
            robs[e] = item
        lpes = [item_element(schemas, t, item) for item in ll]
        lobs: dict[str, Any] = {}
        for e, item in zip(lpes, ll, strict=True):
            lobs[e] = item if e not in lobs else None
        shared = [e for e in rpes if e in lobs]
        nxt = shared.pop(0) if shared else None
        out: list[Any] = []
        done: set[str] = set()
        li = ri = 0
        while li < len(lpes) or ri < len(rpes):
            if li < len(lpes) and ri < len(rpes):
                pe = lpes[li]
                if pe == rpes[ri]:
                    done.add(pe)
                    got = walk(item_type, lobs[pe], robs[pe])
                    if got is not _ABSENT:
                        out.append(got)
                    li += 1
                    ri += 1
                    nxt = shared.pop(0) if shared else None
                    continue
                if pe in robs and nxt is not None and nxt != pe:
                    li += 1
                    continue
            if li < len(lpes):
                pe = lpes[li]
                if pe not in robs:
                    got = walk(item_type, ll[li], _ABSENT)
                    if got is not _ABSENT:
                        out.append(got)
                    li += 1
                    continue
                if pe in done:
                    li += 1
            if ri < len(rpes):
                pe = rpes[ri]
                done.add(pe)
                got = walk(item_type, lobs.get(pe, _ABSENT), robs[pe])
                if got is not _ABSENT:
                    out.append(got)
                ri += 1
                if nxt is not None and nxt == pe:
                    nxt = shared.pop(0) if shared else None
        return out

    got = walk(t, lhs, rhs)
    return {} if got is _ABSENT else got


def remove(schemas: Schemas, t: Type, value: Any, paths: set[Path]) -> Any:
    """TypedValue.RemoveItems: every node at a path of ``paths`` goes, with what is under it."""
    if not paths:
        return value
    prefixes: set[Path] = set()
    for p in paths:
        for i in range(1, len(p)):
            prefixes.add(p[:i])

    def walk(t: Type, v: Any, path: Path) -> Any:
        kind = _kind_of(t, v)
        if kind == "map" and v and not t.map_atomic:
            out: Obj = {}
            for key, child in v.items():
                p = (*path, "f:" + key)
                if p in paths:
                    continue
                out[key] = walk(schemas.child(t, key), child, p) if p in prefixes else child
            return out if out else None
        if kind == "list" and v and not t.list_atomic:
            items = []
            item_type = schemas.item(t)
            for item in v:
                p = (*path, item_element(schemas, t, item))
                if p in paths:
                    continue
                items.append(walk(item_type, item, p) if p in prefixes else item)
            return items if items else None
        return v

    return walk(t, value, ())


# -------------------------------------------------------------------------------------- managed entries


@dataclass
class Entry:
    manager: str
    operation: str
    api_version: str
    fields: set[Path]
    time: str | None = None
    subresource: str = ""
    #: the stored entry this one was read from (written back unchanged when nothing about it changed)
    raw: Obj | None = None
    changed: bool = False

    @property
    def ident(self) -> tuple[str, str, str, str]:
        version = self.api_version if self.operation == "Update" else ""
        return (self.manager, self.operation, version, self.subresource)

    def encode(self) -> Obj:
        if self.raw is not None and not self.changed:
            return self.raw
        out: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode_set(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self) -> str:
        """printManager: how a conflict names this manager."""
        text = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            return f"{text} using {self.api_version}"
        return text


Managers = dict[tuple[str, str, str, str], Entry]


def _with_fields(e: Entry, fields: set[Path]) -> Entry:
    return Entry(e.manager, e.operation, e.api_version, fields, e.time, e.subresource, e.raw, changed=True)


def decode_managers(entries: Any) -> Managers:
    """DecodeManagedFields; an undecodable list counts as none."""
    out: Managers = {}
    if not isinstance(entries, list):
        return out
    try:
        for raw in entries:
            if not isinstance(raw, dict) or raw.get("fieldsType", "FieldsV1") != "FieldsV1":
                return {}
            e = Entry(
                manager=str(raw.get("manager", "")),
                operation=str(raw.get("operation", "")),
                api_version=str(raw.get("apiVersion", "")),
                fields=decode_set(raw.get("fieldsV1") or {}),
                time=raw.get("time"),
                subresource=str(raw.get("subresource", "")),
                raw=raw,
            )
            out[e.ident] = e
    except ValueError:
        return {}
    return out


def _seconds(time: str | None) -> str:
    return (time or "")[:19]


def encode_managers(managers: Managers) -> list[Obj]:
    """The entries in the real server's order (operation, time to the second, manager, version, subresource)."""
    ordered = sorted(
        managers.values(), key=lambda e: (e.operation, _seconds(e.time), e.manager, e.api_version, e.subresource)
    )
    return [e.encode() for e in ordered]


def is_reset(entries: Any) -> bool:
    """A request that sets ``managedFields: []`` (or one empty entry) resets them."""
    return isinstance(entries, list) and entries in ([], [{}])


class Conflict(Exception):
    def __init__(self, conflicts: list[tuple[Entry, Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(self.message())

    def message(self) -> str:
        if len(self.conflicts) == 1:
            entry, path = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {entry.describe()}: {path_string(path)}"
        by_manager: dict[str, list[Path]] = {}
        names: dict[str, str] = {}
        for entry, path in self.conflicts:
            key = json.dumps([entry.manager, entry.operation, entry.api_version, entry.subresource])
            by_manager.setdefault(key, []).append(path)
            names[key] = entry.describe()
        lines = []
        for key in sorted(by_manager):
            lines.append(f"conflicts with {names[key]}:")
            lines += [f"- {path_string(p)}" for p in by_manager[key]]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[Obj]:
        return [
            {"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}", "field": path_string(p)}
            for e, p in self.conflicts
        ]


def _iterate(paths: set[Path]) -> list[Path]:
    """Set.Iterate's order: at each level the members, then the children, each sorted."""
    tree: dict[str, Any] = {}
    for p in paths:
        node = tree
        for e in p:
            node = node.setdefault(e, {})
    out: list[Path] = []

    def walk(node: dict[str, Any], prefix: Path) -> None:
        keys = sorted(node, key=_element_key)
        for e in keys:
            if (*prefix, e) in paths:
                out.append((*prefix, e))
        for e in keys:
            if node[e]:
                walk(node[e], (*prefix, e))

    walk(tree, ())
    return out


# ------------------------------------------------------------------------------------------- operations


@dataclass
class Manager:
    """One kind's field manager: its type and the clock (now_iso)."""

    schemas: Schemas
    root: Root
    api_version: str
    now: Callable[[], str]

    @property
    def top(self) -> Type:
        return self.root.top

    def update(self, live: Obj, new: Obj, managers: Managers, manager: str, subresource: str = "") -> Managers:
        """An Update operation by ``manager``: it owns what it added or changed; others lose that and what
        it removed."""
        c = compare(self.schemas, self.top, live, new)
        taken = c.added | c.modified
        own = taken - STRIP
        out: Managers = {}
        for ident, e in managers.items():
            left = e.fields - taken - c.removed
            if left:
                out[ident] = e if left == e.fields else _with_fields(e, left)
        if own:
            entry = Entry(manager, "Update", self.api_version, set(own), self.now(), subresource, changed=True)
            previous = out.get(entry.ident)
            if previous is not None:
                entry.fields |= previous.fields
            out[entry.ident] = entry
        return self._cap(out)

    def apply(
        self, live: Obj, config: Obj, managers: Managers, manager: str, *, force: bool, subresource: str = ""
    ) -> tuple[Obj, Managers]:
        """An Apply operation: the merged object and the new entries; Conflict when another manager owns
        a field the configuration changes (unless ``force``)."""
        managers = dict(managers)
        if not managers and live.get("metadata", {}).get("uid"):
            # skipNonApplied: an untracked object's fields go to "before-first-apply" first
            managers = self.update({}, live, {}, BEFORE_FIRST_APPLY)
        merged = merge(self.schemas, self.top, live, config)
        ident = (manager, "Apply", "", subresource)
        last = managers.get(ident)
        applied = to_set(self.schemas, self.top, config)
        managers[ident] = Entry(manager, "Apply", self.api_version, applied, None, subresource, changed=True)
        if last is not None and last.fields:
            owned: set[Path] = set()
            for e in managers.values():
                owned |= e.fields
            gone = with_named_ancestors(last.fields) - with_named_ancestors(owned)
            merged = remove(self.schemas, self.top, merged, gone) or {}
        c = compare(self.schemas, self.top, live, merged)
        taken = c.added | c.modified
        conflicts: list[tuple[Entry, Path]] = []
        out: Managers = {}
        for key, e in managers.items():
            if key == ident:
                continue
            clash = e.fields & taken
            if clash:
                conflicts += [(e, p) for p in _iterate(clash)]
            left = e.fields - clash - c.removed
            if left:
                out[key] = e if left == e.fields else _with_fields(e, left)
        if conflicts and not force:
            raise Conflict(conflicts)
        mine = managers[ident]
        mine.fields -= STRIP
        if merged == live:  # nothing changed: the entry keeps its time (a new one has none)
            mine.time = last.time if last is not None else None
            if last is not None and mine.fields == last.fields:
                mine = last
        else:
            mine.time = self.now()
        if mine.fields:
            out[ident] = mine
        return merged, self._cap(out)

    @staticmethod
    def _cap(managers: Managers) -> Managers:
        """capManagersManager: the oldest Update entries beyond ten merge into "ancient-changes"."""
        updates = [e for e in managers.values() if e.operation == "Update"]
        if len(updates) <= MAX_UPDATE_MANAGERS:
            return managers
        updates.sort(key=lambda e: (_seconds(e.time), e.manager))
        out = dict(managers)
        for e in updates[: len(updates) - MAX_UPDATE_MANAGERS + 1]:
            if e.manager == ANCIENT:
                continue
            del out[e.ident]
            ancient = Entry(ANCIENT, "Update", e.api_version, set(e.fields), e.time, "", changed=True)
            previous = out.get(ancient.ident)
            if previous is not None:
                ancient.fields |= previous.fields
            out[ancient.ident] = ancient
        return out


def manager_from_user_agent(user_agent: str) -> str:
    """prefixFromUserAgent: the User-Agent up to its first "/", printable characters, at most 128."""
    out: list[str] = []
    for ch in user_agent.split("/", 1)[0]:
        if not ch.isprintable():
            continue
        if len("".join(out).encode()) > 127:
            break
        out.append(ch)
    return "".join(out)
