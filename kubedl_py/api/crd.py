"""CustomResourceDefinitions generated from the pydantic models, so schema and models cannot drift.

The generator walks the models' type annotations and emits a *structural* schema as
``apiextensions.k8s.io/v1`` requires: every node typed, no ``$ref``, ``nullable`` never used (we omit unset
fields instead). Partly-typed Kubernetes structures (``OpenModel``: pod templates, containers) become
objects that keep unknown fields (``x-kubernetes-preserve-unknown-fields``), so a pod template survives the
API server's pruning whatever fields it carries.

What a schema cannot say about a map keyed by replica type (which keys exist, Master must be 1) is written
as CEL ``x-kubernetes-validations`` rules, which real API servers (1.25+) enforce; the embedded cluster does
not evaluate CEL, and the controller rejects such jobs with ``InvalidSpec`` anyway (validation.py).

Descriptions (what ``kubectl explain pytorchjob.spec`` shows) are the models' field docstrings (the string
under each field, read from the models' source here: pydantic's ``use_attribute_docstrings`` would parse it
at every import, a tenth of a second of every command), else the docstring of the field's model; a test keeps
every field described.

Pod templates are not marked ``x-kubernetes-embedded-resource``: that marker demands ``apiVersion`` and
``kind`` inside the template, which no PyTorchJob/TFJob author writes.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import itertools
import textwrap
import types
import typing
from datetime import datetime
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kubedl_py.api import constants as c
from kubedl_py.api.common import OpenModel
from kubedl_py.api.groups import KUBEDL, KUBEFLOW, RUN_POLICY_FIELDS, ApiGroup
from kubedl_py.api.kinds import all_kinds, kind_api
from kubedl_py.api.kinds.base import Framework, KindAPI
from kubedl_py.api.validation import KUBEDL_ONLY_REPLICA_FIELDS, KUBEDL_ONLY_SPEC_FIELDS

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
            "apiVersion": {"type": "string", "description": "The API group and version of the object."},
            "kind": {"type": "string", "description": f"The kind of the object: {model.__name__}."},
            # Nothing but the type: the API server refuses a CRD saying more about metadata, and describes it
            # itself (kubectl explain shows ObjectMeta's description).
            "metadata": {"type": "object"},
            "spec": generated["spec"],
            "status": generated["status"],
        },
        "required": ["spec"],
    }


def crd_for(kind: KindAPI | Framework, group: ApiGroup = KUBEDL) -> dict[str, Any]:
    """The CustomResourceDefinition of one job kind (its plug-in, or its Framework) in ``group``.

    Both groups' schemas come from the same model; kubeflow.org's has the run-policy fields under
    ``spec.runPolicy`` (the Training Operator's layout), training.kubedl.io's inline and, for KubeDL's
    MPIJob files, also under ``spec.runPolicy``. KubeDL's fields that kubedl-py does not implement are in
    the schema only to be refused by a rule that names them (not pruned, not a bare "unknown field")."""
    plugin = kind if isinstance(kind, KindAPI) else kind_api(kind.kind)
    if group not in plugin.groups:
        raise ValueError(f"{plugin.kind} is not served in {group.api_version}")
    framework = plugin.framework
    schema = openapi_schema(plugin.model)
    spec = schema["properties"]["spec"]
    specs = spec["properties"][framework.replica_specs_field]
    specs["minProperties"] = 1
    specs["maxProperties"] = len(framework.replica_types)
    specs["x-kubernetes-validations"] = _replica_rules(plugin)
    _lay_out_run_policy(spec, group)
    _refuse_unsupported(spec, framework)
    singular = framework.singular
    kubedl = group is KUBEDL
    names: dict[str, Any] = {
        "kind": framework.kind,
        "listKind": f"{framework.kind}List",
        "plural": framework.plural,
        "singular": singular,
        # kubeflow.org: the Training Operator's CRDs have no short names, and ``ptj`` stays ours
        "shortNames": list(framework.short_names) if kubedl else [],
        "categories": [group.category, "all"] if kubedl else [group.category],
    }
    if not names["shortNames"]:
        del names["shortNames"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{framework.plural}.{group.group}",
            "labels": {"app.kubernetes.io/part-of": c.CONTROLLER_NAME},
        },
        "spec": {
            "group": group.group,
            "scope": "Namespaced",
            "names": names,
            "versions": [
                {
                    "name": group.version,
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
                        {
                            "name": "Last-Failure",
                            "type": "string",
                            "description": "The reason of the job's latest pod failure (status.failures)",
                            "jsonPath": ".status.failures[-1:].reason",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def all_crds(*, kubeflow: bool = False) -> list[dict[str, Any]]:
    """The CRD of every registered kind, and with ``kubeflow`` those of kubeflow.org/v1 too."""
    crds = [crd_for(plugin) for plugin in all_kinds()]
    if kubeflow:
        crds += [crd_for(plugin, KUBEFLOW) for plugin in all_kinds() if KUBEFLOW in plugin.groups]
    return crds


def _lay_out_run_policy(spec: Schema, group: ApiGroup) -> None:
    """Put the run-policy properties where ``group`` has them (see ``groups.to_internal``)."""
    properties = spec["properties"]
    # Copies: the same dict twice in one document would be dumped as a YAML anchor and alias.
    policy = {key: copy.deepcopy(properties[key]) for key in RUN_POLICY_FIELDS if key in properties}
    where = (
        "here in this API group"
        if group.run_policy_field is not None
        else "here (as KubeDL's MPIJob files write them) or inline in spec, not both"
    )
    nested: Schema = {
        "type": "object",
        "description": f"Run policies: cleanup, TTL, deadline, backoff limit, gang scheduling, suspension; {where}.",
        "properties": policy,
    }
    # managedBy cannot be set, changed or removed after creation (the Training Operator's rule): a transition
    # rule where the field's parent always exists (runPolicy defaults to {}; KubeDL's layout has it in spec).
    immutable = {
        "rule": "has(self.managedBy) == has(oldSelf.managedBy) && "
        "(!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
        "message": "managedBy is immutable",
    }
    if group.run_policy_field is not None:
        for key in policy:
            del properties[key]
        # Stored as ``runPolicy: {}`` when omitted: the Kubeflow SDK's models refuse a job without it.
        nested["default"] = {}
        nested["x-kubernetes-validations"] = [immutable]
    else:
        spec.setdefault("x-kubernetes-validations", []).append(immutable)
    properties[group.run_policy_field or "runPolicy"] = nested


def _refuse_unsupported(spec: Schema, framework: Framework) -> None:
    """KubeDL-only fields: known to the schema, refused by a rule whose message says so and what to do."""
    properties = spec["properties"]
    rules = spec.setdefault("x-kubernetes-validations", [])
    for key, why in KUBEDL_ONLY_SPEC_FIELDS.items():
        properties[key] = _refused(key, why)
        rules.append({"rule": f"!has(self.{key})", "message": f"{key} {why}"})
    specs = properties[framework.replica_specs_field]
    replica = specs["additionalProperties"]
    for key, why in KUBEDL_ONLY_REPLICA_FIELDS.items():
        replica["properties"][key] = _refused(key, why)
        replica.setdefault("x-kubernetes-validations", []).append(
            {"rule": f"!has(self.{key})", "message": f"{key} {why}"}
        )


def _refused(key: str, why: str) -> Schema:
    """A KubeDL field kubedl-py refuses: in the schema only so the rule can name it, and described as refused
    (so ``kubectl explain`` does not list it as if it worked)."""
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": f"Refused: {key} {why}.",
    }


def _replica_rules(plugin: KindAPI) -> list[dict[str, str]]:
    """The rule every kind gets (only its replica types) and the kind's own rules."""
    types = plugin.framework.replica_types
    # In any letter case, as both peers accept (``worker``): the controller normalises the keys.
    pattern = "(?i)^(" + "|".join(t.lower() for t in types) + ")$"
    rules = [
        {
            "rule": f"self.all(k, k.matches('{pattern}'))",
            "message": f"unknown replica type; use one of {', '.join(types)}",
        },
        {
            # A job whose every type has replicas: 0 would stay Created for ever (replicas defaults to 1).
            "rule": "self.exists(k, !has(self[k].replicas) || self[k].replicas > 0)",
            "message": "has no replica to run: give at least one replica type replicas >= 1",
        },
    ]
    return rules + [dict(rule) for rule in plugin.cel_rules]


def _model_schema(model: type[BaseModel]) -> Schema:
    properties: dict[str, Schema] = {}
    required: list[str] = []
    docs = attribute_docs(model)
    for name, field in model.model_fields.items():
        key = field.alias or name
        properties[key] = _field_schema(field, field.description or docs.get(name))
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


def _field_schema(field: FieldInfo, description: str | None) -> Schema:
    schema = _type_schema(field.annotation)
    _apply_constraints(schema, field.metadata)
    if description:
        schema["description"] = " ".join(description.split())
    return schema


@functools.cache
def attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """The string under each field of ``model`` and its bases (a base's, unless the class redefines it)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):  # made at run time, no source
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        statements = body.body
        for statement, following in itertools.pairwise(statements):
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
            else:
                docs.pop(statement.target.id, None)
    return docs


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
