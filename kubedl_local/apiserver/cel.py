"""CEL validation rules of CRDs (``x-kubernetes-validations``), evaluated at create and update.

Why: our CRDs state what their structural schema cannot (a PyTorchJob has exactly one Master, a map keyed
by replica type only takes known types, an int-or-string's constraints) as CEL rules, and the real server
refuses objects that break them. Without them here a job the real server refuses would run locally.

The expressions are evaluated with ``cel-python`` (the CEL standard: macros ``all``/``exists``/``has``,
``type()``, ``matches()`` with RE2, ...), ``self`` bound to the value of the node carrying the rule and
``oldSelf`` to its previous value on updates (transition rules run only when there is one). Kubernetes'
own CEL libraries (``isURL``, ``quantity``, lists, sets, ...) are not available: a CRD whose rules call a
function outside the standard is refused at creation with a message naming it, rather than failing later.

Errors are the real server's: ``FieldValueInvalid`` at the node's path (plus ``fieldPath``), ``Invalid
value: <message>`` for objects and arrays, ``Invalid value: <value>: <message>`` for scalars (the rule's
``message``, ``messageExpression``, or ``failed rule: <rule>``), ``reason`` honoured. As on the real
server, rules are not evaluated when the schema already found a type or enum error (a ``<nil>`` cause says
so), and on updates a rule failing on an unchanged value is ratcheted (the real server turns it into a
warning; here it is dropped). Not done: the real server's cost estimation, which refuses CRDs whose rules
could be too expensive (unbounded lists and strings, ``string(int)`` in a messageExpression).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import celpy
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from kubedl_local.apiserver.errors import OMITTED, FieldError

log = logging.getLogger(__name__)

Schema = dict[str, Any]

NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the existing errors to "
    "complete validation"
)
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn"})
_REASONS = {
    "FieldValueInvalid": "FieldValueInvalid",
    "FieldValueForbidden": "FieldValueForbidden",
    "FieldValueRequired": "FieldValueRequired",
    "FieldValueDuplicate": "FieldValueDuplicate",
}


class RuleError(ValueError):
    """A rule that cannot be compiled or uses what this evaluator lacks; the message says which."""


class _Compiled:
    __slots__ = ("program", "transition")

    def __init__(self, program: Any, transition: bool) -> None:
        self.program = program
        self.transition = transition


_env = celpy.Environment()
_cache: dict[str, _Compiled] = {}
_lock = threading.Lock()
_SUPPORTED = frozenset(name for name in celpy.evaluation.base_functions if not name.startswith("_")) | _MACROS


def _names(tree: lark.Tree[Any]) -> Iterator[tuple[str, str]]:
    """(kind, name) of every function and method called, and every identifier used."""
    for node in tree.iter_subtrees():
        if node.data == "ident_arg":
            yield "function", str(node.children[0])
        elif node.data == "member_dot_arg":
            yield "function", str(node.children[1])
        elif node.data == "ident":
            yield "ident", str(node.children[0])


def compile_rule(rule: str) -> _Compiled:
    """The program of one rule (cached); :class:`RuleError` if it does not compile or calls a function
    outside the CEL standard."""
    found = _cache.get(rule)
    if found is not None:
        return found
    with _lock:
        try:
            tree = _env.compile(rule)
        except CELParseError as e:
            raise RuleError(f"compilation failed: {e}") from None
        names = list(_names(tree))
        unsupported = sorted({name for kind, name in names if kind == "function" and name not in _SUPPORTED})
        if unsupported:
            raise RuleError(
                f"uses {', '.join(unsupported)}, which the kubedl-py embedded API server does not implement "
                "(only the CEL standard functions and macros are available there; the real API server has "
                "Kubernetes' CEL libraries)"
            )
        compiled = _Compiled(_env.program(tree), any(kind == "ident" and name == "oldSelf" for kind, name in names))
        _cache[rule] = compiled
        return compiled


def check_schema(schema: Any, path: str) -> list[FieldError]:
    """Compile every rule of a CRD version's schema (at CRD create/update, as the real server does)."""
    errors: list[FieldError] = []
    for node_path, node in _walk_schema(schema, path):
        for i, spec in enumerate(node.get("x-kubernetes-validations") or []):
            rule = spec.get("rule") if isinstance(spec, dict) else None
            field = f"{node_path}.x-kubernetes-validations[{i}].rule"
            if not isinstance(rule, str) or not rule:
                errors.append(FieldError("FieldValueRequired", field))
                continue
            try:
                compile_rule(rule)
            except RuleError as e:
                errors.append(FieldError("FieldValueInvalid", field, str(e), rule))
    return errors


def _walk_schema(schema: Any, path: str) -> Iterator[tuple[str, Schema]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _walk_schema(sub, f"{path}.properties[{key}]")
    if isinstance(schema.get("items"), dict):
        yield from _walk_schema(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk_schema(schema["additionalProperties"], f"{path}.additionalProperties")


def has_rules(schema: Any) -> bool:
    return any(node.get("x-kubernetes-validations") for _, node in _walk_schema(schema, ""))


def validate(obj: Any, schema: Schema, old: Any = None) -> list[FieldError]:
    """The errors of every rule of ``schema`` on ``obj`` (``old``: the stored object, on updates)."""
    errors: list[FieldError] = []
    _validate(obj, old, schema, "", errors, root=True)
    return errors


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _validate(value: Any, old: Any, schema: Schema, path: str, errors: list[FieldError], *, root: bool = False) -> None:
    if value is None or not isinstance(schema, dict):
        return
    for spec in schema.get("x-kubernetes-validations") or []:
        if isinstance(spec, dict) and isinstance(spec.get("rule"), str):
            _check(spec, value, old, path, errors)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key)
            if not isinstance(sub, dict) and isinstance(addl, dict):
                sub = addl
            if isinstance(sub, dict):
                prior = old.get(key) if isinstance(old, dict) else None
                _validate(item, prior, sub, _join(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            # Old list items correlate by position only for the same list type; atomic lists do not correlate.
            _validate(item, None, schema["items"], f"{path}[{i}]", errors)


def _check(spec: dict[str, Any], value: Any, old: Any, path: str, errors: list[FieldError]) -> None:
    rule: str = spec["rule"]
    try:
        compiled = compile_rule(rule)
    except RuleError as e:
        errors.append(FieldError("FieldValueInvalid", path, f"{e} evaluating rule: {rule}", OMITTED))
        return
    if compiled.transition and old is None:
        return  # a transition rule runs only when there is an old value
    activation = {"self": json_to_cel(value)}
    if compiled.transition:
        activation["oldSelf"] = json_to_cel(old)
    field = _join(path, str(spec["fieldPath"]).lstrip(".")) if spec.get("fieldPath") else path
    try:
        result = compiled.program.evaluate(activation)
    except CELEvalError as e:
        result = e
    if isinstance(result, CELEvalError) or not isinstance(result, celpy.celtypes.BoolType):
        why = result.args[0] if isinstance(result, CELEvalError) and result.args else result
        errors.append(FieldError("FieldValueInvalid", field, f"{why} evaluating rule: {rule}", _type_name(value)))
        return
    if bool(result):
        return
    message = spec.get("message") or f"failed rule: {rule}"
    expression = spec.get("messageExpression")
    if isinstance(expression, str) and expression:
        try:
            text = compile_rule(expression).program.evaluate(activation)
            # a string (celpy's concatenation gives a plain str, not a StringType)
            if isinstance(text, str) and str(text).strip():
                message = str(text)
        except (RuleError, CELEvalError):
            pass
    if not compiled.transition and old is not None and old == value:
        return  # validation ratcheting: an unchanged value keeps passing (the real server only warns)
    reason = _REASONS.get(str(spec.get("reason") or "FieldValueInvalid"), "FieldValueInvalid")
    shown = OMITTED if isinstance(value, dict | list) else value  # objects and arrays are not printed
    errors.append(FieldError(reason, field, str(message).strip(), shown))


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def blocking(errors: list[FieldError]) -> bool:
    """Whether schema errors keep the rules from running (a wrong type or an unsupported enum value)."""
    return any(e.kind in ("FieldValueTypeInvalid", "FieldValueNotSupported") for e in errors)


def not_checked() -> FieldError:
    return FieldError("FieldValueInvalid", "<nil>", NOT_CHECKED, None)
