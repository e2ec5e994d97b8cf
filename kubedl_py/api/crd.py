"""CustomResourceDefinitions generated from the pydantic models, so schema and models cannot drift.

The generator walks the models' type annotations and emits a *structural* schema as
``apiextensions.k8s.io/v1`` requires: every node typed, no ``$ref``, ``nullable`` never used (we omit unset
fields instead). Partly-typed Kubernetes structures (``OpenModel``: pod templates, containers) become
objects that keep unknown fields (``x-kubernetes-preserve-unknown-fields``), so a pod template survives the
API server's pruning whatever fields it carries.

What a schema cannot say about a map keyed by replica type (which keys exist, Master must be 1) is written
as CEL ``x-kubernetes-validations`` rules, which real API servers (1.25+) enforce; the embedded cluster does
not evaluate CEL, and the controller rejects such jobs with ``InvalidSpec`` anyway (validation.py).

Pod templates are not marked ``x-kubernetes-embedded-resource``: that marker demands ``apiVersion`` and
``kind`` inside the template, which no PyTorchJob/TFJob author writes.
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kubedl_py.api import constants as c
from kubedl_py.api.common import OpenModel
from kubedl_py.api.kinds import all_kinds, kind_api
from kubedl_py.api.kinds.base import Framework, KindAPI

Schema = dict[str, Any]


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural openAPIV3Schema of a job model (the whole object: apiVersion, kind, metadata...)."""
    generated = _model_schema(model)["properties"]
    # The API server owns apiVersion, kind and root metadata; a CRD schema may not describe metadata
    # beyond its type, and the server has already matched apiVersion and kind to the URL.
    return {
        "type": "object",
        "description": f"{model.__name__} runs a distributed training job as pods and Services.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": generated["spec"],
            "status": generated["status"],
        },
        "required": ["spec"],
    }


def crd_for(kind: KindAPI | Framework) -> dict[str, Any]:
    """The CustomResourceDefinition of one job kind (its plug-in, or its Framework)."""
    plugin = kind if isinstance(kind, KindAPI) else kind_api(kind.kind)
    framework = plugin.framework
    schema = openapi_schema(plugin.model)
    specs = schema["properties"]["spec"]["properties"][framework.replica_specs_field]
    specs["minProperties"] = 1
    specs["maxProperties"] = len(framework.replica_types)
    specs["x-kubernetes-validations"] = _replica_rules(plugin)
    singular = framework.singular
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{framework.plural}.{c.GROUP}",
            "labels": {"app.kubernetes.io/part-of": c.CONTROLLER_NAME},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": framework.kind,
                "listKind": f"{framework.kind}List",
                "plural": framework.plural,
                "singular": singular,
                "shortNames": list(framework.short_names),
                "categories": ["kubedl", "all"],
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "State",
                            "type": "string",
                            "description": "The latest condition of the job",
                            "jsonPath": ".status.conditions[-1:].type",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    """The CRD of every registered kind."""
    return [crd_for(plugin) for plugin in all_kinds()]


def _replica_rules(plugin: KindAPI) -> list[dict[str, str]]:
    """The rule every kind gets (only its replica types) and the kind's own rules."""
    types = plugin.framework.replica_types
    allowed = ", ".join(f"'{t}'" for t in types)
    rules = [
        {"rule": f"self.all(k, k in [{allowed}])", "message": f"unknown replica type; use one of {', '.join(types)}"}
    ]
    return rules + [dict(rule) for rule in plugin.cel_rules]


def _model_schema(model: type[BaseModel]) -> Schema:
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        properties[key] = _field_schema(field)
        if field.is_required():
            required.append(key)
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if issubclass(model, OpenModel):
        schema["x-kubernetes-preserve-unknown-fields"] = True
    if model.__doc__ and not model.__doc__.startswith(("Create a new model", "!!!")):
        schema["description"] = " ".join(model.__doc__.split())
    return schema


def _field_schema(field: FieldInfo) -> Schema:
    schema = _type_schema(field.annotation)
    _apply_constraints(schema, field.metadata)
    return schema


def _apply_constraints(schema: Schema, metadata: list[Any]) -> None:
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            schema["minimum"] = item.ge
        elif isinstance(item, annotated_types.Le):
            schema["maximum"] = item.le
        elif isinstance(item, annotated_types.MinLen):
            schema["minItems" if schema.get("type") == "array" else "minLength"] = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            schema["maxItems" if schema.get("type") == "array" else "maxLength"] = item.max_length
        elif getattr(item, "pattern", None):
            schema["pattern"] = item.pattern
        elif isinstance(item, FieldInfo):
            _apply_constraints(schema, item.metadata)


def _int_or_string(integer: Schema, string: Schema) -> Schema:
    """An int-or-string node. A structural schema allows exactly ``anyOf: [{type: integer}, {type: string}]``
    there, with nothing else inside the alternatives (the API server refuses the whole CRD otherwise), so
    each alternative's constraints move into one CEL rule that tests the value's type first."""
    schema: Schema = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    int_checks, int_words = _cel_checks(integer)
    str_checks, str_words = _cel_checks(string)
    if int_checks or str_checks:
        rule = f"type(self) == int ? ({' && '.join(int_checks) or 'true'}) : ({' && '.join(str_checks) or 'true'})"
        message = f"must be an integer{int_words} or a string{str_words}"
        schema["x-kubernetes-validations"] = [{"rule": rule, "message": message}]
    return schema


def _cel_checks(alternative: Schema) -> tuple[list[str], str]:
    """CEL conditions on ``self`` for one alternative's value constraints, and the same in words."""
    checks: list[str] = []
    words: list[str] = []
    if "minimum" in alternative:
        checks.append(f"self >= {alternative['minimum']}")
        words.append(f">= {alternative['minimum']}")
    if "maximum" in alternative:
        checks.append(f"self <= {alternative['maximum']}")
        words.append(f"<= {alternative['maximum']}")
    if "pattern" in alternative:
        pattern = str(alternative["pattern"]).replace("\\", "\\\\").replace("'", "\\'")
        checks.append(f"self.matches('{pattern}')")
        words.append(f"matching {alternative['pattern']}")
    if "enum" in alternative:
        checks.append("self in [" + ", ".join(f"'{value}'" for value in alternative["enum"]) + "]")
        words.append("one of " + ", ".join(str(value) for value in alternative["enum"]))
    return checks, (" " + " and ".join(words)) if words else ""


def _type_schema(annotation: Any) -> Schema:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = _type_schema(args[0])
        _apply_constraints(schema, list(args[1:]))
        return schema
    if origin in (Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            return _type_schema(members[0])
        alternatives = [_type_schema(member) for member in members]
        if sorted(alt.get("type", "") for alt in alternatives) == ["integer", "string"]:
            return _int_or_string(*sorted(alternatives, key=lambda alt: str(alt["type"])))
        raise TypeError(f"cannot express {annotation!r} in a structural schema")
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        if args[1] is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_schema(annotation)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if annotation is datetime:
        return {"type": "string", "format": "date-time"}
    if annotation is Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    raise TypeError(f"no schema for {annotation!r}")
