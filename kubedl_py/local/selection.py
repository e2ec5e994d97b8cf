"""Label and field selectors with the syntax and errors of the real API server.

Controllers lean on selectors for every list and watch (pods of a job, events of an object), so the parser
accepts the full label selector grammar (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!``, ``<``,
``>``) and rejects what the real server rejects with a 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import ApiError, bad_request

Obj = dict[str, Any]

_KEY_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def valid_label_key(key: str) -> str | None:
    """None if ``key`` is a valid qualified name, else the reason."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _KEY_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    return None


def valid_label_value(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


class Requirement:
    __slots__ = ("key", "op", "values")

    def __init__(self, key: str, op: str, values: list[str]) -> None:
        self.key = key
        self.op = op
        self.values = values

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        v = labels.get(self.key)
        if op in ("=", "=="):
            return v == self.values[0]
        if op == "!=":
            return v != self.values[0]
        if op == "in":
            return v is not None and v in self.values
        if op == "notin":
            return v is None or v not in self.values
        if v is None:
            return False
        try:
            lv = int(v)
        except ValueError:
            return False
        if op == ">":
            return lv > int(self.values[0])
        return lv < int(self.values[0])


class LabelSelector:
    """A parsed label selector; ``matches`` takes a labels dict."""

    __slots__ = ("equalities", "requirements")

    def __init__(self, requirements: list[Requirement]) -> None:
        self.requirements = requirements
        # key=value pairs every match must have: lets the store narrow by its label index.
        self.equalities = [(r.key, r.values[0]) for r in requirements if r.op in ("=", "==")]

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: dict[str, str] | None) -> bool:
        lab = labels or {}
        return all(r.matches(lab) for r in self.requirements)


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^=!<>\s]+)\s*(==|=|!=|<|>)\s*(.*?)\s*$")


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector([])
    reqs: list[Requirement] = []
    for raw in _split_top(text):
        part = raw.strip()
        if not part:
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        m = _SET_RE.match(part)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            vals = [v for v in vals if v != ""] if op == "notin" or len(vals) > 1 else vals
            req = Requirement(key, op, vals)
        elif part.startswith("!"):
            req = Requirement(part[1:].strip(), "!", [])
        else:
            m = _OP_RE.match(part)
            if m:
                req = Requirement(m.group(1), m.group(2), [m.group(3)])
            elif re.match(r"^[^\s=!<>(),]+$", part):
                req = Requirement(part, "exists", [])
            else:
                raise bad_request(f"unable to parse requirement: <nil>: Invalid value: {part!r}: invalid selector")
        why = valid_label_key(req.key)
        if why:
            raise bad_request(f'unable to parse requirement: values[0][{req.key}]: Invalid value: "{req.key}": {why}')
        for v in req.values:
            why = valid_label_value(v)
            if req.op in ("<", ">"):
                try:
                    int(v)
                except ValueError:
                    why = "for 'Gt', 'Lt' operators, the value must be an integer"
            if why:
                raise bad_request(f'unable to parse requirement: values[0][{req.key}]: Invalid value: "{v}": {why}')
        reqs.append(req)
    return LabelSelector(reqs)


def selector_from_dict(sel: dict[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (matchLabels / matchExpressions) as a matcher."""
    if not sel:
        return LabelSelector([])
    reqs = [Requirement(k, "=", [str(v)]) for k, v in (sel.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!", "Gt": ">", "Lt": "<"}
    for e in sel.get("matchExpressions") or []:
        op = ops.get(e.get("operator", ""))
        if op is None:
            raise ApiError(422, f"invalid label selector operator {e.get('operator')!r}", "Invalid")
        reqs.append(Requirement(e.get("key", ""), op, [str(v) for v in e.get("values") or []]))
    return LabelSelector(reqs)


# ---- field selectors ------------------------------------------------------------------------------------


def _path(*keys: str) -> Callable[[Obj], str]:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for k in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(k)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


_COMMON: dict[str, Callable[[Obj], str]] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

FIELD_GETTERS: dict[tuple[str, str], dict[str, Callable[[Obj], str]]] = {
    ("", "pods"): {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: "true" if (o.get("spec") or {}).get("hostNetwork") else "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    ("", "events"): {
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    ("", "namespaces"): {"status.phase": _path("status", "phase")},
    ("", "nodes"): {"spec.unschedulable": lambda o: "true" if (o.get("spec") or {}).get("unschedulable") else "false"},
    ("", "secrets"): {"type": _path("type")},
}


class FieldSelector:
    __slots__ = ("name", "namespace", "terms")

    def __init__(
        self, terms: list[tuple[Callable[[Obj], str], bool, str]], name: str | None, namespace: str | None
    ) -> None:
        self.terms = terms
        self.name = name  # metadata.name=X lets the store look up one key instead of scanning
        self.namespace = namespace

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Obj) -> bool:
        return all((get(obj) == value) == eq for get, eq, value in self.terms)


def parse_field_selector(text: str | None, group: str, plural: str) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector([], None, None)
    getters = dict(_COMMON)
    getters.update(FIELD_GETTERS.get((group, plural), {}))
    terms: list[tuple[Callable[[Obj], str], bool, str]] = []
    name = namespace = None
    for raw in text.split(","):
        part = raw.strip()
        if "!=" in part:
            field_name, value = part.split("!=", 1)
            eq = False
        elif "==" in part:
            field_name, value = part.split("==", 1)
            eq = True
        elif "=" in part:
            field_name, value = part.split("=", 1)
            eq = True
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field_name = field_name.strip()
        get = getters.get(field_name)
        if get is None:
            raise bad_request(f"field label not supported: {field_name}")
        if eq and field_name == "metadata.name":
            name = value
        if eq and field_name == "metadata.namespace":
            namespace = value
        terms.append((get, eq, value))
    return FieldSelector(terms, name, namespace)
