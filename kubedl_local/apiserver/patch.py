"""The three PATCH formats the API server accepts: JSON merge patch, JSON patch and strategic merge patch.

kubectl sends strategic merge patches for built-in kinds (CustomResourceDefinitions, RBAC and Leases too)
and merge patches for custom resources; controllers send all three. Strategic merge needs to know which
lists merge by which key; the real server reads that from Go struct tags, here it is a small table covering
the lists of the kinds the embedded server serves (outside the core group, only ObjectMeta's lists have one).
"""

from __future__ import annotations

import copy
from typing import Any

from kubedl_local.apiserver.errors import ApiError, bad_request

JSON = Any


def deepcopy_json(value: JSON) -> JSON:
    """A fast deep copy for JSON-shaped data (dict/list/scalars)."""
    if isinstance(value, dict):
        return {k: deepcopy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deepcopy_json(v) for v in value]
    return value


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return deepcopy_json(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- JSON patch (RFC 6902) -------------------------------------------------------------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _fail(f"invalid JSON pointer {pointer!r}")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _fail(msg: str) -> ApiError:
    """A patch that does not apply: the real server's generic 422, whose message drops the reason (``msg``:
    what evanphx/json-patch would have said, kept for the log)."""
    del msg
    return ApiError(422, "the server rejected our request due to an error in our request", "Invalid", {})


def _index(container: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    try:
        i = int(token)
    except ValueError:
        raise _fail(f"invalid array index {token!r}") from None
    if i < 0 or i > len(container) or (i == len(container) and not allow_end):
        raise _fail(f"array index {i} out of bounds")
    return i


def _parent(doc: JSON, tokens: list[str]) -> JSON:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise _fail(f"path component {t!r} not found")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, False)]
        else:
            raise _fail(f"cannot traverse into {t!r}")
    return cur


def _get(doc: JSON, tokens: list[str]) -> JSON:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _fail(f"path component {last!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise _fail(f"cannot read {last!r}")


def _remove(doc: JSON, tokens: list[str]) -> JSON:
    if not tokens:
        raise _fail("cannot remove the document root")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _fail(f"unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, False))
    raise _fail(f"cannot remove {last!r}")


def _add(doc: JSON, tokens: list[str], value: JSON) -> JSON:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise _fail(f"cannot add at {last!r}")
    return doc


_JSON_KINDS = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def json_patch(doc: JSON, ops: JSON, *, strict: bool = True) -> JSON:
    """RFC 6902 as the API server applies it (evanphx/json-patch v4): a replace of a missing object key sets
    it, and every failure to apply is the same generic 422."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        bad = ops if not isinstance(ops, list) else next(op for op in ops if not isinstance(op, dict))
        kind = _JSON_KINDS.get(type(bad), "null")
        target = "[]handlers.jsonPatchOp" if strict else "jsonpatch.Patch"
        if isinstance(ops, list):
            target = "handlers.jsonPatchOp" if strict else "jsonpatch.Operation"
        raise bad_request(f"error decoding patch: json: cannot unmarshal {kind} into Go value of type {target}")
    doc = deepcopy_json(doc)
    for op in ops:
        kind = op.get("op")
        path = op.get("path")
        if kind not in ("add", "remove", "replace", "move", "copy", "test") or not isinstance(path, str):
            raise _fail(f"Unexpected kind: {kind}")
        tokens = _tokens(path)
        if kind == "add":
            if "value" not in op:
                raise _fail("add operation has no value")
            doc = _add(doc, tokens, deepcopy_json(op["value"]))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            if "value" not in op:
                raise _fail("replace operation has no value")
            if not tokens:
                doc = deepcopy_json(op["value"])
                continue
            parent = _parent(doc, tokens)
            if isinstance(parent, dict):
                parent[tokens[-1]] = deepcopy_json(op["value"])  # v4's partialDoc.get never misses a key
                continue
            _remove(doc, tokens)
            doc = _add(doc, tokens, deepcopy_json(op["value"]))
        elif kind in ("move", "copy"):
            frm = op.get("from")
            if not isinstance(frm, str):
                raise _fail(f"{kind} operation has no from")
            ftokens = _tokens(frm)
            value = _remove(doc, ftokens) if kind == "move" else deepcopy_json(_get(doc, ftokens))
            doc = _add(doc, tokens, value)
        elif kind == "test" and _get(doc, tokens) != op.get("value"):
            raise _fail(f"testing value {path} failed")
    return doc


# ---- strategic merge patch -------------------------------------------------------------------------------

# list field name -> merge key; context-dependent entries are resolved in _merge_key.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "conditions": "type",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "addresses": "type",
}
# Lists of scalars that merge as sets.
_SET_LISTS = {"finalizers"}


def _merge_key(field: str, path: tuple[str, ...], kind: str) -> str | None:
    if "/" in kind and path[:1] != ("metadata",):
        # A kind of a named group (``group/Kind``): none of those the embedded server serves (Lease,
        # EndpointSlice, CustomResourceDefinition, RBAC) tags a list of its own with a patch strategy (a
        # CRD's ``x-kubernetes-validations`` merge by rule, but inside ``versions``, which is replaced
        # whole); only ObjectMeta's lists merge.
        return None
    if field == "ports":
        if any(p in ("containers", "initContainers", "ephemeralContainers") for p in path):
            return "containerPort"
        if kind == "Service":
            return "port"
        return None
    if field == "addresses" and kind != "Node":
        return None
    if field == "conditions" and path and path[0] not in ("status",):
        return None
    return _MERGE_KEYS.get(field)


def strategic_merge_patch(original: JSON, patch: JSON, kind: str, group: str = "") -> JSON:
    """The strategic merge of ``patch`` into ``original``, an object of a built-in ``kind`` of ``group``."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    scope = f"{group}/{kind}" if group else kind
    return _smp_map(original if isinstance(original, dict) else {}, patch, (), scope)


def _smp_map(original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...], kind: str) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return {k: deepcopy_json(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return {}
    result = dict(original)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        cur = result.get(key)
        if isinstance(value, dict | list) and (key not in result or type(cur) is not type(value)):
            # Nothing to merge into: the patch's value, nulls dropped, and a map carrying a directive
            # ($patch...) dropped whole (mergeMap's removeDirectives).
            kept, taken = _remove_directives(_discard_nulls(deepcopy_json(value)))
            if taken:
                result[key] = kept
            else:
                result.pop(key, None)
            continue
        if isinstance(value, dict):
            result[key] = _smp_map(cur if isinstance(cur, dict) else {}, value, (*path, key), kind)
        elif isinstance(value, list):
            order = patch.get(f"$setElementOrder/{key}")
            result[key] = _smp_list(
                cur if isinstance(cur, list) else [],
                value,
                key,
                (*path, key),
                kind,
                order=order if isinstance(order, list) else None,
            )
        else:
            result[key] = value
    if isinstance(retain, list):
        retained = set(retain)
        result = {k: v for k, v in result.items() if k in retained}
    return result


def _discard_nulls(value: JSON) -> JSON:
    if isinstance(value, dict):
        return {k: _discard_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_discard_nulls(v) for v in value]
    return value


def _remove_directives(value: JSON) -> tuple[JSON, bool]:
    if isinstance(value, dict):
        if "$patch" in value:
            return None, False
        out = {}
        for k, v in value.items():
            kept, keep = _remove_directives(v)
            if keep:
                out[k] = kept
        return out, True
    if isinstance(value, list):
        items = []
        for v in value:
            kept, keep = _remove_directives(v)
            if keep:
                items.append(kept)
        return items, True
    return value, True


def _smp_list(
    original: list[Any],
    patch: list[Any],
    field: str,
    path: tuple[str, ...],
    kind: str,
    *,
    order: list[Any] | None = None,
) -> list[Any]:
    if field in _SET_LISTS:
        out = list(original)
        for v in patch:
            if v not in out:
                out.append(v)
        return out
    key = _merge_key(field, path[:-1], kind)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return [deepcopy_json(v) for v in patch if not (isinstance(v, dict) and v.get("$patch"))]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [deepcopy_json(p) for p in patch if p.get("$patch") != "replace"]
    out = [copy.copy(v) for v in original]
    for item in patch:
        directive = item.get("$patch")
        k = item.get(key)
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == k), None)
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        clean = {kk: vv for kk, vv in item.items() if kk != "$patch"}
        if idx is None:
            out.append(_smp_map({}, clean, path, kind))
        else:
            out[idx] = _smp_map(out[idx], clean, path, kind)
    return _element_order(out, original, order if order is not None else patch, key)


def _element_order(merged: list[Any], original: list[Any], order: list[Any], key: str) -> list[Any]:
    """The order the real server gives a merged list (strategicpatch.normalizeElementOrder): the patch's
    items in the patch's (or ``$setElementOrder``'s) order, the server-only items in their original order,
    the two merged by original position, with items new to the list coming before the server's later ones."""

    def position(items: list[Any], item: Any) -> int:
        value = item.get(key) if isinstance(item, dict) else None
        return next((i for i, o in enumerate(items) if isinstance(o, dict) and o.get(key) == value), -1)

    in_patch = {o.get(key) for o in order if isinstance(o, dict)}
    patch_items = [o for o in merged if isinstance(o, dict) and o.get(key) in in_patch]
    server_only = [o for o in merged if not (isinstance(o, dict) and o.get(key) in in_patch)]
    patch_items.sort(key=lambda o: (position(order, o) < 0, position(order, o)))
    server_only.sort(key=lambda o: (position(original, o) < 0, position(original, o)))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        else:
            left, right = position(original, server_only[i]), position(original, patch_items[j])
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out


# ---- the patched document as the real server's JSON patchers print it -----------------------------------


def _go_string(text: str) -> str:
    import json

    out = json.dumps(text, ensure_ascii=False)
    return (
        out.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _go_dumps(value: JSON, sort: Any = True, path: tuple[str, ...] = ()) -> str:
    """encoding/json's compact text; ``sort``: True (every map sorted, as a decoded Go map), False (keys in
    the order given: untouched raw JSON), or a set of paths whose maps are sorted (the containers a patcher
    decoded)."""
    if isinstance(value, dict):
        here = sort is True or (not isinstance(sort, bool) and path in sort)
        keys = sorted(value) if here else list(value)
        inner = sort if sort is not True else True
        return "{" + ",".join(f"{_go_string(str(k))}:{_go_dumps(value[k], inner, (*path, str(k)))}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_go_dumps(v, sort, (*path, str(i))) for i, v in enumerate(value)) + "]"
    if isinstance(value, str):
        return _go_string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class _Sorted(dict[str, Any]):
    """A map the patcher decoded (printed with sorted keys)."""


def _mark(value: JSON) -> JSON:
    """A patch value: evanphx/json-patch decodes it (pruneNulls), so its maps print sorted, nulls gone."""
    if isinstance(value, dict):
        return _Sorted({k: _mark(v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return [_mark(v) for v in value]
    return value


def _dump_marked(value: JSON) -> str:
    if isinstance(value, dict):
        keys = sorted(value) if isinstance(value, _Sorted) else list(value)
        return "{" + ",".join(f"{_go_string(str(k))}:{_dump_marked(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump_marked(v) for v in value) + "]"
    return _go_dumps(value)


def go_merge_patch_text(doc: JSON, patch: JSON) -> str:
    """The document after a JSON merge patch as evanphx/json-patch v4 prints it: the top level and every
    map the patch merged into are decoded (sorted keys); untouched values keep the document's order."""

    def merge(cur: JSON, p: JSON) -> JSON:
        if not isinstance(cur, dict) or not isinstance(p, dict):
            return _mark(p)
        out = _Sorted(cur)
        for k, v in p.items():
            if v is None:
                out.pop(k, None)
            elif out.get(k) is None:
                out[k] = _mark(v)
            else:
                out[k] = merge(out[k], v)
        return out

    if not isinstance(patch, dict):
        return _dump_marked(_mark(patch))
    return _dump_marked(merge(doc, patch))


def go_json_patch_text(doc: JSON, ops: JSON) -> str:
    """The document after a JSON patch as evanphx/json-patch v4 prints it: the top level and the containers
    on each operation's path are decoded (sorted keys), the rest keeps the document's order."""
    patched = json_patch(deepcopy_json(doc), ops, strict=False)
    touched: set[tuple[str, ...]] = {()}
    for op in ops if isinstance(ops, list) else []:
        if not isinstance(op, dict):
            continue
        for key in ("path", "from"):
            pointer = op.get(key)
            if isinstance(pointer, str) and pointer.startswith("/"):
                tokens = _tokens(pointer)
                for i in range(len(tokens)):
                    touched.add(tuple(tokens[:i]))
    return _go_dumps(patched, touched)
