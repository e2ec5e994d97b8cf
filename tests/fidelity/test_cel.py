"""CEL validation rules (``x-kubernetes-validations``) at create and update, on both tiers.

Our own CRDs' rules are covered by tests/api/test_crd.py (create); here: updates, several failures at once,
and the rule features the real server offers (``messageExpression``, ``fieldPath``, ``reason``, transition
rules with ``oldSelf``, rules on list items), with a throwaway CRD. Expected bodies: the real server's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fidelity.conftest import Server
from tests.tiers import EMBEDDED

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBS = "/apis/training.kubedl.io/v1alpha1/namespaces/{ns}/pytorchjobs"
CONTAINERS = [{"name": "pytorch", "image": "busybox:1.36"}]


def _job(name: str, **replicas: Any) -> dict[str, Any]:
    specs = replicas or {"Master": {"replicas": 1, "template": {"spec": {"containers": CONTAINERS}}}}
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def _unordered(status: dict[str, Any]) -> dict[str, Any]:
    """A 422 Status with its causes (and the message listing them) in a canonical order."""
    out = dict(status)
    details = dict(out.get("details") or {})
    details["causes"] = sorted(details.get("causes") or [], key=lambda c: (c["field"], c["message"]))
    out["details"] = details
    head, sep, listed = str(out.get("message", "")).partition(" is invalid: [")
    if sep:
        out["message"] = head + sep + ", ".join(sorted(listed.rstrip("]").split(", "))) + "]"
    return out


def _invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> dict[str, Any]:
    messages = [f"{field}: {message}" for _, message, field in causes]
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{kind}.{group} "{name}" is invalid: {joined}',
        "reason": "Invalid",
        "details": {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, m, f in causes],
        },
        "code": 422,
    }


async def test_rules_hold_at_update(server: Server) -> None:
    path = JOBS.format(ns=server.ns)
    created = await server.post(path, _job("j"))
    assert created.status == 201, created.body
    two_masters = {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2}}}}
    patched = await server.request("PATCH", f"{path}/j", two_masters, content_type="application/merge-patch+json")
    expected = _invalid(
        "PyTorchJob",
        "training.kubedl.io",
        "j",
        [
            (
                "FieldValueInvalid",
                "Invalid value: a PyTorchJob has exactly one Master: set Master.replicas to 1",
                "spec.pytorchReplicaSpecs",
            )
        ],
    )
    assert (patched.status, patched.body) == (422, expected)
    unknown_type = {**created.body}
    wroker = {"template": {"spec": {"containers": CONTAINERS}}}
    unknown_type["spec"] = {"pytorchReplicaSpecs": {**created.body["spec"]["pytorchReplicaSpecs"], "Wroker": wroker}}
    put = await server.put(f"{path}/j", unknown_type)
    assert put.status == 422
    assert put.body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: unknown replica type; use one of Master, Worker",
            "field": "spec.pytorchReplicaSpecs",
        }
    ]


async def test_schema_and_rule_failures_are_reported_together(server: Server) -> None:
    """A minimum violated does not block the rules (a wrong type or enum value would)."""
    job = _job(
        "j",
        Master={"replicas": -1, "template": {"spec": {"containers": CONTAINERS}}},
        Wroker={"template": {"spec": {"containers": CONTAINERS}}},
    )
    job["spec"]["nprocPerNode"] = "lots"
    reply = await server.post(JOBS.format(ns=server.ns) + "?dryRun=All", job)
    # The real server evaluates the rules of sibling fields in Go map order: the same causes, any order.
    assert (reply.status, _unordered(reply.body)) == (
        422,
        _unordered(
            _invalid(
                "PyTorchJob",
                "training.kubedl.io",
                "j",
                [
                    (
                        "FieldValueInvalid",
                        "Invalid value: -1: spec.pytorchReplicaSpecs.Master.replicas in body should be greater than or "
                        "equal to 0",
                        "spec.pytorchReplicaSpecs.Master.replicas",
                    ),
                    (
                        "FieldValueInvalid",
                        "Invalid value: unknown replica type; use one of Master, Worker",
                        "spec.pytorchReplicaSpecs",
                    ),
                    (
                        "FieldValueInvalid",
                        "Invalid value: a PyTorchJob has exactly one Master: set Master.replicas to 1",
                        "spec.pytorchReplicaSpecs",
                    ),
                    (
                        "FieldValueInvalid",
                        'Invalid value: "lots": must be an integer >= 1 or a string matching '
                        "^(auto|cpu|gpu|[1-9][0-9]*)$",
                        "spec.nprocPerNode",
                    ),
                ],
            ),
        ),
    )


def _rules_crd(group: str) -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "replicas": {"type": "integer"},
            "frozen": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}],
            },
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.name.startsWith('x')"}],
                },
            },
        },
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max", "fieldPath": ".min"},
            {
                "rule": "self.replicas < 10",
                # string(self.replicas) would be refused by the real server's cost estimation
                "messageExpression": "self.replicas > 100 ? 'way too many replicas' : 'too many replicas'",
                "reason": "FieldValueForbidden",
            },
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"rules.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "rules", "singular": "rule", "kind": "Rule", "listKind": "RuleList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}},
                    },
                }
            ],
        },
    }


@pytest.fixture
async def rules(server: Server) -> AsyncIterator[str]:
    """A CRD with rules of every kind, served; yields its collection path."""
    group = f"{server.ns}.fidelity.kubedl.io"
    created = await server.post(CRDS, _rules_crd(group))
    assert created.status == 201, created.body
    path = f"/apis/{group}/v1/namespaces/{server.ns}/rules"
    deadline = time.monotonic() + 30
    while (await server.get(path)).status != 200:
        assert time.monotonic() < deadline, "the CRD was not served within 30s"
        await asyncio.sleep(0.1)
    try:
        yield path
    finally:
        await server.delete(f"{CRDS}/rules.{group}")


async def test_rule_features(server: Server, rules: str) -> None:
    group = rules.split("/")[2]
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "Rule",
        "metadata": {"name": "r"},
        "spec": {"min": 5, "max": 1, "replicas": 12, "items": [{"name": "xa"}, {"name": "b"}], "frozen": "a"},
    }
    reply = await server.post(rules, body)
    assert (reply.status, reply.body) == (
        422,
        _invalid(
            "Rule",
            group,
            "r",
            [
                ("FieldValueInvalid", "Invalid value: min must not exceed max", "spec.min"),
                ("FieldValueForbidden", "Forbidden: too many replicas", "spec"),
                ("FieldValueInvalid", "Invalid value: failed rule: self.name.startsWith('x')", "spec.items[1]"),
            ],
        ),
    )
    body["spec"].update(min=1, max=5, replicas=3, items=[{"name": "xa"}])
    created = await server.post(rules, body)  # the transition rule does not run on create
    assert created.status == 201, created.body
    changed = {**created.body, "spec": {**created.body["spec"], "frozen": "b"}}
    reply = await server.put(f"{rules}/r", changed)
    assert reply.status == 422
    assert reply.body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": 'Invalid value: "b": is immutable', "field": "spec.frozen"}
    ]


async def test_unsupported_functions_are_refused_with_the_crd(server: Server) -> None:
    """Kubernetes' CEL libraries are not in cel-python: the embedded server says so when the CRD is created
    (the real server accepts it; this is a documented difference)."""
    if server.tier != EMBEDDED:
        pytest.skip("the real server has Kubernetes' CEL libraries")
    crd = _rules_crd(f"{server.ns}.fidelity.kubedl.io")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "isURL(self.url)"}
    ]
    reply = await server.post(CRDS, crd)
    assert reply.status == 422
    (cause,) = reply.body["details"]["causes"]
    assert cause["field"] == "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    assert "uses isURL, which the kubedl-py embedded API server does not implement" in cause["message"]
