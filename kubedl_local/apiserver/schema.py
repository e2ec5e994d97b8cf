"""Structural-schema handling for custom resources: defaulting, pruning and validation.

The real API server validates every custom object against its CRD's ``openAPIV3Schema``, drops fields the
schema does not know (unless ``x-kubernetes-preserve-unknown-fields``), and applies ``default`` values. Our
controller's CRDs rely on all three, so a test that passes here must be rejected or accepted exactly as a
real cluster would; errors name fields the way the real server does (``spec.replicaSpecs.Master.replicas``).
"""

from __future__ import annotations

import re
from typing import Any

from kubedl_local.apiserver.errors import FieldError
from kubedl_local.apiserver.patch import deepcopy_json

Schema = dict[str, Any]

_META_KEEP = {"name", "namespace", "labels", "annotations", "generateName", "finalizers"}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def apply_defaults(value: Any, schema: Schema) -> Any:
    """Fill in ``default`` values of absent properties (recursively), as the API server does on read/write."""
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for key, sub in props.items():
                if key not in value and isinstance(sub, dict) and "default" in sub:
                    value[key] = deepcopy_json(sub["default"])
                if key in value:
                    value[key] = apply_defaults(value[key], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for key in list(value):
                value[key] = apply_defaults(value[key], addl)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                value[i] = apply_defaults(v, items)
    return value


def prune(value: Any, schema: Schema, root: bool = False, path: str = "", removed: list[str] | None = None) -> Any:
    """Drop fields not in the schema, unless preserved; dropped paths are appended to ``removed``."""
    if isinstance(value, dict):
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key in list(value):
            if (root or embedded) and key in ("apiVersion", "kind"):
                continue
            # Root (and embedded) metadata is ObjectMeta, which the API server decodes itself: a CRD schema
            # may declare it (``metadata: {type: object}``) but never prunes it.
            if (root or embedded) and key == "metadata":
                if embedded and isinstance(value[key], dict):
                    value[key] = {k: v for k, v in value[key].items() if k in _META_KEEP}
                continue
            if isinstance(props, dict) and key in props:
                value[key] = prune(value[key], props[key], False, _join(path, key), removed)
            elif isinstance(addl, dict):
                value[key] = prune(value[key], addl, False, _join(path, key), removed)
            elif addl is True or preserve:
                continue
            else:
                del value[key]
                if removed is not None:
                    removed.append(_join(path, key))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                value[i] = prune(v, items, False, f"{path}[{i}]", removed)
    return value


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if typ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    t = _TYPES.get(typ)
    return t is None or isinstance(value, t)


_PATTERN_CACHE: dict[str, re.Pattern[str]] = {}


def validate(value: Any, schema: Schema, path: str, errors: list[FieldError], root: bool = False) -> None:
    if value is None:
        if schema.get("nullable"):
            return
        if schema.get("type"):
            errors.append(
                FieldError(
                    "FieldValueTypeInvalid",
                    path or "<root>",
                    f'{path} in body must be of type {schema["type"]}: "null"',
                    None,
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            errors.append(
                FieldError("FieldValueTypeInvalid", path, f"{path} in body must be of type integer-or-string", value)
            )
            return
    else:
        typ = schema.get("type")
        if isinstance(typ, str) and not _type_ok(value, typ):
            got = _json_type(value)
            # the real server shows the type it found as the "value"
            errors.append(
                FieldError("FieldValueTypeInvalid", path, f'{path} in body must be of type {typ}: "{got}"', got)
            )
            return
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        errors.append(
            FieldError("FieldValueNotSupported", path, "supported values: " + ", ".join(_quote(e) for e in enum), value)
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        mn, mx = schema.get("minimum"), schema.get("maximum")
        if mn is not None and (value < mn or (schema.get("exclusiveMinimum") and value == mn)):
            op = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            errors.append(FieldError("FieldValueInvalid", path, f"{path} in body should be {op} {_num(mn)}", value))
        if mx is not None and (value > mx or (schema.get("exclusiveMaximum") and value == mx)):
            op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            errors.append(FieldError("FieldValueInvalid", path, f"{path} in body should be {op} {_num(mx)}", value))
        mult = schema.get("multipleOf")
        if mult and value % mult != 0:
            errors.append(
                FieldError("FieldValueInvalid", path, f"{path} in body should be a multiple of {mult}", value)
            )
    if isinstance(value, str):
        ml, mnl = schema.get("maxLength"), schema.get("minLength")
        if ml is not None and len(value) > ml:
            errors.append(FieldError("FieldValueTooLong", path, f"may not be more than {ml} bytes", value))
        if mnl is not None and len(value) < mnl:
            errors.append(
                FieldError("FieldValueInvalid", path, f"{path} in body should be at least {mnl} chars long", value)
            )
        pat = schema.get("pattern")
        if isinstance(pat, str):
            rx = _PATTERN_CACHE.get(pat)
            if rx is None:
                rx = _PATTERN_CACHE[pat] = re.compile(pat)
            if not rx.search(value):
                errors.append(FieldError("FieldValueInvalid", path, f"{path} in body should match '{pat}'", value))
    if isinstance(value, list):
        mi, ma = schema.get("minItems"), schema.get("maxItems")
        if mi is not None and len(value) < mi:
            errors.append(
                FieldError("FieldValueInvalid", path, f"{path} in body should have at least {mi} items", len(value))
            )
        if ma is not None and len(value) > ma:
            errors.append(
                FieldError(
                    "FieldValueTooMany" if False else "FieldValueInvalid",
                    path,
                    f"{path} in body should have at most {ma} items",
                    len(value),
                )
            )
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for v in value:
                if v in seen:
                    errors.append(FieldError("FieldValueDuplicate", path, "", v))
                    break
                seen.append(v)
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                validate(v, items, f"{path}[{i}]", errors)
    if isinstance(value, dict):
        for req in schema.get("required") or []:
            if req not in value:
                errors.append(FieldError("FieldValueRequired", _join(path, req)))
        mp, xp = schema.get("minProperties"), schema.get("maxProperties")
        if mp is not None and len(value) < mp:
            errors.append(
                FieldError(
                    "FieldValueInvalid", path, f"{path} in body should have at least {mp} properties", len(value)
                )
            )
        if xp is not None and len(value) > xp:
            errors.append(
                FieldError("FieldValueInvalid", path, f"{path} in body should have at most {xp} properties", len(value))
            )
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        # The real validator walks properties in Go's (random) map order; name order at least is stable.
        for key, v in sorted(value.items()):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key)
            if isinstance(sub, dict):
                validate(v, sub, _join(path, key), errors)
            elif isinstance(addl, dict):
                validate(v, addl, _join(path, key), errors)
    for sub in schema.get("allOf") or []:
        validate(value, sub, path, errors)
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and any_of and not any(_ok(value, s, path) for s in any_of):
        errors.append(
            FieldError("FieldValueInvalid", path, f"{path} in body must match at least one schema in anyOf", value)
        )
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and one_of:
        n = sum(1 for s in one_of if _ok(value, s, path))
        if n != 1:
            errors.append(
                FieldError("FieldValueInvalid", path, f"{path} in body must match exactly one schema in oneOf", value)
            )
    not_ = schema.get("not")
    if isinstance(not_, dict) and _ok(value, not_, path):
        errors.append(FieldError("FieldValueInvalid", path, f"{path} in body must not match the schema in not", value))


def _ok(value: Any, schema: Schema, path: str) -> bool:
    errs: list[FieldError] = []
    validate(value, schema, path, errs)
    return not errs


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _quote(v: Any) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def validate_object(obj: dict[str, Any], schema: Schema) -> list[FieldError]:
    errors: list[FieldError] = []
    validate(obj, schema, "", errors, root=True)
    return errors


def check_structural(schema: Any, path: str, errors: list[FieldError]) -> None:
    """The subset of CRD schema checks that catch mistakes early (a type is set on every node)."""
    if not isinstance(schema, dict):
        errors.append(FieldError("FieldValueInvalid", path, "must be an object", None))
        return
    has_type = (
        "type" in schema
        or schema.get("x-kubernetes-int-or-string")
        or schema.get("x-kubernetes-preserve-unknown-fields")
    )
    if not has_type and path.endswith("openAPIV3Schema"):
        errors.append(FieldError("FieldValueRequired", path + ".type", "must not be empty at the root"))
    for key, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            errors.append(FieldError("FieldValueInvalid", f"{path}.properties[{key}]", "must be an object", None))
            continue
        if (
            "type" not in sub
            and not sub.get("x-kubernetes-int-or-string")
            and not sub.get("x-kubernetes-preserve-unknown-fields")
            and not any(k in sub for k in ("anyOf", "oneOf", "allOf"))
        ):
            errors.append(
                FieldError(
                    "FieldValueRequired",
                    f"{path}.properties[{key}].type",
                    "must not be empty for specified object fields",
                )
            )
        check_structural(sub, f"{path}.properties[{key}]", errors)
    items = schema.get("items")
    if isinstance(items, dict):
        check_structural(items, path + ".items", errors)
