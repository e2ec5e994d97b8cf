"""Label and field selectors with the syntax and errors of the real API server.

Controllers lean on selectors for every list and watch (pods of a job, events of an object), so the parser
accepts the full label selector grammar (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!``, ``<``,
``>``) and rejects what the real server rejects with a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubedl_local.apiserver import validation
from kubedl_local.apiserver.errors import ApiError, bad_request

Obj = dict[str, Any]


def valid_label_key(key: str) -> str | None:
    """None if ``key`` is a valid qualified name, else the reason (the real server's words)."""
    errs = validation.is_label_key(key)
    return "; ".join(errs) if errs else None


def valid_label_value(value: str) -> str | None:
    errs = validation.is_label_value(value)
    return "; ".join(errs) if errs else None


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


# ---- the label selector grammar, as k8s.io/apimachinery/pkg/labels parses it (errors word for word) ----

_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_KEYWORDS = {
    ")": "CLOSE",
    ",": "COMMA",
    "!": "NOTEXIST",
    "==": "DOUBLEEQ",
    "=": "EQ",
    ">": "GT",
    "in": "IN",
    "<": "LT",
    "!=": "NEQ",
    "notin": "NOTIN",
    "(": "OPEN",
}
_OPERATORS = {"IN": "in", "EQ": "=", "DOUBLEEQ": "==", "GT": ">", "LT": "<", "NOTIN": "notin", "NEQ": "!="}
_BINARY = "in, notin, =, ==, !=, gt, lt"


def _lex(text: str) -> list[tuple[str, str]]:
    """Lexer.Lex until the end of the string: (token, literal) pairs."""
    items: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            items.append(("END", ""))
            return items
        if text[pos] in _SPECIAL:
            buffer = ""
            last: tuple[str, str] | None = None
            while pos < n and text[pos] in _SPECIAL:
                buffer += text[pos]
                pos += 1
                if buffer in _KEYWORDS:
                    last = (_KEYWORDS[buffer], buffer)
                elif last is not None:
                    pos -= 1
                    break
            items.append(last if last is not None else ("ERROR", f"error expected: keyword found '{buffer}'"))
            continue
        start = pos
        while pos < n and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        items.append((_KEYWORDS.get(word, "ID"), word))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return ("ID" if values and tok in ("IN", "NOTIN") else tok), lit

    def consume(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.lookahead(values)
        self.pos += 1
        return tok, lit

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in ("ID", "NOTEXIST"):
                try:
                    reqs.append(self.requirement())
                except ValueError as e:
                    raise ValueError(f"unable to parse requirement: {e}") from None
                tok, lit = self.consume()
                if tok == "END":
                    return reqs
                if tok == "COMMA":
                    tok2, lit2 = self.lookahead()
                    if tok2 not in ("ID", "NOTEXIST"):
                        raise ValueError(f"found '{lit2}', expected: identifier after ','")
                else:
                    raise ValueError(f"found '{lit}', expected: ',' or 'end of string'")
            elif tok == "END":
                return reqs
            else:
                raise ValueError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        op = ""
        tok, key = self.consume()
        if tok == "NOTEXIST":
            op = "!"
            tok, key = self.consume()
        if tok != "ID":
            raise ValueError(f"found '{key}', expected: identifier")
        errs = validation.is_label_key(key)
        if errs:
            raise ValueError(f'<nil>: Invalid value: "{key}": ' + "; ".join(errs))
        if self.lookahead()[0] in ("END", "COMMA"):
            return _requirement(key, op or "exists", [])
        tok, lit = self.consume(values=False)
        if tok not in _OPERATORS:
            raise ValueError(f"found '{lit}', expected: {_BINARY}")
        op = _OPERATORS[tok]
        values = self.values() if op in ("in", "notin") else self.exact()
        return _requirement(key, op, sorted(set(values)))

    def values(self) -> list[str]:
        tok, lit = self.consume()
        if tok != "OPEN":
            raise ValueError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in ("ID", "COMMA"):
            out = self.identifiers()
            if self.consume()[0] != "CLOSE":
                raise ValueError(f"found '{lit}', expected: ')'")
            return out
        if tok == "CLOSE":
            self.consume()
            return [""]
        raise ValueError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> list[str]:
        out: list[str] = []
        while True:
            tok, lit = self.consume()
            if tok == "ID":
                out.append(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == "COMMA":
                    continue
                if tok2 == "CLOSE":
                    return out
                raise ValueError(f"found '{lit2}', expected: ',' or ')'")
            if tok == "COMMA":
                if not out:
                    out.append("")
                tok2, _ = self.lookahead()
                if tok2 in ("CLOSE", "COMMA"):
                    out.append("")
                    if tok2 == "CLOSE":
                        return out
                continue
            raise ValueError(f"found '{lit}', expected: ',', or identifier")

    def exact(self) -> list[str]:
        tok, _ = self.lookahead()
        if tok in ("END", "COMMA"):
            return [""]
        tok, lit = self.consume()
        if tok == "ID":
            return [lit]
        raise ValueError(f"found '{lit}', expected: identifier")


def _requirement(key: str, op: str, values: list[str]) -> Requirement:
    """NewRequirement: the values checked for the operator (errors aggregated as the real server does)."""
    errs: list[str] = []
    if op in ("in", "notin") and not values:
        errs.append("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty")
    if op in ("<", ">"):
        for i, v in enumerate(values):
            try:
                int(v)
            except ValueError:
                errs.append(
                    f"values[{i}]: Invalid value: \"{v}\": for 'Gt', 'Lt' operators, the value must be an integer"
                )
    for i, v in enumerate(values):
        why = validation.is_label_value(v)
        if why:
            errs.append(f'values[{i}][{key}]: Invalid value: "{v}": ' + "; ".join(why))
    if errs:
        raise ValueError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    return Requirement(key, op, values)


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector([])
    try:
        reqs = _Parser(text).parse()
    except ValueError as e:
        raise bad_request(str(e)) from None
    reqs.sort(key=lambda r: r.key)
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
    ("", "services"): {"spec.clusterIP": _path("spec", "clusterIP"), "spec.type": _path("spec", "type")},
}
FIELD_GETTERS[("", "pods")]["status.podIPs"] = lambda o: ",".join(
    str(ip.get("ip", "")) for ip in (o.get("status") or {}).get("podIPs") or [] if isinstance(ip, dict)
)
#: kinds whose field labels the real scheme converts itself ("field label not supported: X"); the others
#: take metav1's default conversion, with its own message
_CONVERTED = frozenset(FIELD_GETTERS)
#: the fields a cluster-scoped kind does not offer
_NO_NAMESPACE = frozenset({("", "nodes"), ("", "namespaces")})


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


def parse_field_selector(
    text: str | None, group: str, plural: str, *, custom: bool = False, namespaced: bool = True
) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector([], None, None)
    getters = dict(_COMMON)
    if (group, plural) in _NO_NAMESPACE or (custom and not namespaced):
        del getters["metadata.namespace"]
    getters.update(FIELD_GETTERS.get((group, plural), {}))
    converted = custom or (group, plural) in _CONVERTED
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
            if converted:
                raise bad_request(f"field label not supported: {field_name}")
            raise bad_request(
                f'"{field_name}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        if eq and field_name == "metadata.name":
            name = value
        if eq and field_name == "metadata.namespace":
            namespace = value
        terms.append((get, eq, value))
    return FieldSelector(terms, name, namespace)
