"""Decoding of request bodies: unknown fields (``fieldValidation``) and wrong types.

The real server decodes a built-in kind into its Go struct: a wrong type is always a 400 naming the Go
struct field and type; an unknown field is a 400 with ``fieldValidation=Strict`` (kubectl's default), a
``Warning`` header with ``Warn`` or without the parameter, nothing with ``Ignore``. Custom resources report
unknown fields (their schema's and their metadata's) the same way. Every expected message below is the real
server's (v1.37.2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fidelity.conftest import KUBECTL, Server

POD_WITH_UNKNOWN_FIELDS = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "foo": 1},
    "spec": {
        "bar": 2,
        "containers": [
            {"name": "c", "image": "busybox:1.36", "ports": [{"containerPort": 80, "hostIP2": "x"}], "baz": True}
        ],
    },
    "qux": 3,
}
UNKNOWN = [
    "metadata.foo",
    "spec.bar",
    "spec.containers[0].ports[0].hostIP2",
    "spec.containers[0].baz",
    "qux",
]


def _pods(server: Server, query: str = "") -> str:
    return f"/api/v1/namespaces/{server.ns}/pods?dryRun=All{query}"


def _warnings(headers: Any) -> list[str]:
    return list(headers.getall("Warning", []))


async def test_unknown_fields_strict_is_a_400_listing_them_in_document_order(server: Server) -> None:
    reply = await server.post(_pods(server, "&fieldValidation=Strict"), POD_WITH_UNKNOWN_FIELDS)
    assert (reply.status, reply.body["reason"]) == (400, "BadRequest")
    listed = ", ".join(f'unknown field "{path}"' for path in UNKNOWN)
    assert reply.body["message"] == f'Pod in version "v1" cannot be handled as a Pod: strict decoding error: {listed}'


@pytest.mark.parametrize("query", ["&fieldValidation=Warn", ""])
async def test_unknown_fields_warn_is_a_warning_header_each(server: Server, query: str) -> None:
    reply = await server.post(_pods(server, query), POD_WITH_UNKNOWN_FIELDS)
    assert reply.status == 201, reply.body
    assert _warnings(reply.headers) == [f'299 - "unknown field \\"{path}\\""' for path in UNKNOWN]
    assert "foo" not in reply.body["metadata"] and "qux" not in reply.body  # dropped, as by the Go struct
    assert "baz" not in reply.body["spec"]["containers"][0]


async def test_unknown_fields_ignore_says_nothing(server: Server) -> None:
    reply = await server.post(_pods(server, "&fieldValidation=Ignore"), POD_WITH_UNKNOWN_FIELDS)
    assert reply.status == 201, reply.body
    assert _warnings(reply.headers) == []
    assert "bar" not in reply.body["spec"]


async def test_an_unsupported_field_validation_is_422(server: Server) -> None:
    reply = await server.post(_pods(server, "&fieldValidation=Foo"), POD_WITH_UNKNOWN_FIELDS)
    supported = 'supported values: "", "Ignore", "Strict", "Warn"'
    assert reply.status == 422
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Foo": {supported}',
        "reason": "Invalid",
        "details": {
            "group": "meta.k8s.io",
            "kind": "CreateOptions",
            "causes": [
                {
                    "reason": "FieldValueNotSupported",
                    "message": f'Unsupported value: "Foo": {supported}',
                    "field": "fieldValidation",
                }
            ],
        },
        "code": 422,
    }


_CONTAINER = {"name": "c", "image": "busybox:1.36"}
WRONG_TYPES = [
    (
        {"containers": [{**_CONTAINER, "ports": [{"containerPort": "80"}]}]},
        "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort "
        "of type int32",
    ),
    (
        {"containers": "x"},
        "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container",
    ),
    (
        {"containers": ["x"]},
        "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type v1.Container",
    ),
    (
        {"containers": [_CONTAINER], "terminationGracePeriodSeconds": "30"},
        "json: cannot unmarshal string into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64",
    ),
    (
        {"containers": [_CONTAINER], "hostNetwork": "true"},
        "json: cannot unmarshal string into Go struct field PodSpec.spec.hostNetwork of type bool",
    ),
    (
        {"containers": [{**_CONTAINER, "name": 5}]},
        "json: cannot unmarshal number into Go struct field Container.spec.containers.name of type string",
    ),
    (
        {"containers": [{**_CONTAINER, "ports": [{"containerPort": 1.5}]}]},
        "json: cannot unmarshal number 1.5 into Go struct field ContainerPort.spec.containers.ports.containerPort "
        "of type int32",
    ),
    (
        {"containers": [{**_CONTAINER, "ports": [{"containerPort": 99999999999}]}]},
        "json: cannot unmarshal number 99999999999 into Go struct field "
        "ContainerPort.spec.containers.ports.containerPort of type int32",
    ),
    (
        {"containers": [{**_CONTAINER, "env": {"a": 1}}]},
        "json: cannot unmarshal object into Go struct field Container.spec.containers.env of type []v1.EnvVar",
    ),
    (
        {"containers": [{**_CONTAINER, "livenessProbe": {"httpGet": {"port": True}}}]},
        "json: cannot unmarshal bool into Go struct field "
        "HTTPGetAction.spec.containers.livenessProbe.ProbeHandler.httpGet.port of type int32",
    ),
    (
        {"containers": [_CONTAINER], "nodeSelector": []},
        "json: cannot unmarshal array into Go struct field PodSpec.spec.nodeSelector of type map[string]string",
    ),
    (
        {"containers": [{**_CONTAINER, "args": [1]}]},
        "json: cannot unmarshal number into Go struct field Container.spec.containers.args of type string",
    ),
    (
        {"containers": [{**_CONTAINER, "resources": {"limits": {"cpu": "abc"}}}]},
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
    (
        {"containers": [{**_CONTAINER, "resources": {"limits": {"cpu": True}}}]},
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
]


@pytest.mark.parametrize("spec,message", WRONG_TYPES)
@pytest.mark.parametrize("validation", ["Strict", "Ignore"])
async def test_wrong_types_are_a_400_whatever_field_validation_says(
    server: Server, spec: dict[str, Any], message: str, validation: str
) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "unknown": 1}, "spec": spec}
    reply = await server.post(_pods(server, f"&fieldValidation={validation}"), body)
    assert (reply.status, reply.body["reason"]) == (400, "BadRequest")
    assert reply.body["message"] == f'Pod in version "v1" cannot be handled as a Pod: {message}'


async def test_other_decoding_errors(server: Server) -> None:
    ns = server.ns
    cases = [
        (
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": "x"},
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field '
            "Pod.metadata of type v1.ObjectMeta",
        ),
        (
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": {"labels": {"a": 1}}},
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into Go struct field '
            "ObjectMeta.metadata.labels of type string",
        ),
        (
            f"/api/v1/namespaces/{ns}/services",
            {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": True}]}},
            'Service in version "v1" cannot be handled as a Service: json: cannot unmarshal bool into Go struct '
            "field ServicePort.spec.ports.targetPort of type int32",
        ),
        (
            f"/api/v1/namespaces/{ns}/secrets",
            {"metadata": {"name": "s"}, "data": {"k": "aGVsbG8"}},
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 4',
        ),
        (
            f"/api/v1/namespaces/{ns}/secrets",
            {"metadata": {"name": "s"}, "data": {"k": "aGV$bG8="}},
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3',
        ),
        (
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            {"metadata": {"name": "l"}, "spec": {"renewTime": "yesterday"}},
            'Lease in version "v1" cannot be handled as a Lease: parsing time "yesterday" as '
            '"2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006"',
        ),
        (
            f"/api/v1/namespaces/{ns}/events",
            {"metadata": {"name": "e"}, "involvedObject": {"name": "x"}, "lastTimestamp": "yesterday"},
            'Event in version "v1" cannot be handled as a Event: parsing time "yesterday" as '
            '"2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"',
        ),
    ]
    for path, body, message in cases:
        reply = await server.post(f"{path}?dryRun=All", body)
        assert (reply.status, reply.body.get("message")) == (400, message), body


async def test_stored_form_is_the_go_structs(server: Server) -> None:
    """Times in UTC at their precision, zero structs present, nulls in maps as zero values."""
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"name": "x", "namespace": server.ns},
        "reason": "Started",
        "lastTimestamp": "2026-01-02T03:04:05.7+02:00",
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "eventTime": "2026-01-02T03:04:05.123456+02:00",
        "reportingComponent": "a",
        "reportingInstance": "b",
        "action": "c",
    }
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/events?dryRun=All", event)
    assert reply.status == 201, reply.body
    got = {k: reply.body.get(k) for k in ("source", "firstTimestamp", "lastTimestamp", "eventTime")}
    assert got == {
        "source": {},
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "lastTimestamp": "2026-01-02T01:04:05Z",
        "eventTime": "2026-01-02T01:04:05.123456Z",
    }
    pod = {
        "metadata": {"name": "p", "labels": {"a": None}},
        "spec": {"containers": [{**_CONTAINER, "resources": {"limits": {"cpu": None}}}]},
    }
    reply = await server.post(_pods(server), pod)
    assert reply.status == 201, reply.body
    assert reply.body["metadata"]["labels"] == {"a": ""}
    assert reply.body["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "0"}
    node = await server.post("/api/v1/nodes?dryRun=All", {"metadata": {"name": f"{server.ns}-node"}})
    assert node.status == 201, node.body
    assert node.body["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 0}}
    assert node.body["status"]["nodeInfo"]["kubeletVersion"] == ""


def _job(**extra: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "foo": 1},
        "spec": {
            "backofLimit": 3,
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "bogus": 2, "template": template}},
        },
        **extra,
    }


CR_UNKNOWN = ["metadata.foo", "spec.backofLimit", "spec.pytorchReplicaSpecs.Master.bogus", "top"]


async def test_custom_resources_report_unknown_fields_the_same_way(server: Server) -> None:
    path = f"/apis/training.kubedl.io/v1alpha1/namespaces/{server.ns}/pytorchjobs?dryRun=All"
    strict = await server.post(path + "&fieldValidation=Strict", _job(top=1))
    listed = ", ".join(f'unknown field "{p}"' for p in CR_UNKNOWN)
    assert (strict.status, strict.body["message"]) == (
        400,
        f'PyTorchJob in version "v1alpha1" cannot be handled as a PyTorchJob: strict decoding error: {listed}',
    )
    for query in ("", "&fieldValidation=Warn"):
        warned = await server.post(path + query, _job(top=1))
        assert warned.status == 201, warned.body
        assert _warnings(warned.headers) == [f'299 - "unknown field \\"{p}\\""' for p in CR_UNKNOWN]
        assert "foo" not in warned.body["metadata"] and "top" not in warned.body
    ignored = await server.post(path + "&fieldValidation=Ignore", _job(top=1))
    assert (ignored.status, _warnings(ignored.headers)) == (201, [])


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
async def test_kubectl_reports_decoding_errors(server: Server, tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec:\n  containers:\n"
        "  - {name: c, image: 'busybox:1.36', imagePullPolicyy: Always}\n"
    )
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: wt}\nspec:\n  containers:\n"
        "  - {name: c, image: 'busybox:1.36', ports: [{containerPort: '80'}]}\n"
    )
    run = await server.kubectl("-n", server.ns, "apply", "-f", str(typo))
    assert run.code == 1
    assert run.err.strip() == (
        f'Error from server (BadRequest): error when creating "{typo}": Pod in version "v1" cannot be handled as '
        'a Pod: strict decoding error: unknown field "spec.containers[0].imagePullPolicyy"'
    )
    run = await server.kubectl("-n", server.ns, "create", "-f", str(wrong))
    assert run.code == 1
    assert run.err.strip() == (
        f'Error from server (BadRequest): error when creating "{wrong}": Pod in version "v1" cannot be handled as '
        "a Pod: json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort"
        " of type int32"
    )
    run = await server.kubectl("-n", server.ns, "create", "-f", str(typo), "--validate=warn")
    assert run.code == 0, run.err
    assert run.err.strip() == 'Warning: unknown field "spec.containers[0].imagePullPolicyy"'
    assert run.out.strip() == "pod/typo created"


async def test_duplicate_fields_are_reported_with_unknown_ones_in_document_order(server: Server) -> None:
    path = f"/api/v1/namespaces/{server.ns}/configmaps?dryRun=All"
    raw = b'{"metadata":{"name":"a","foo":1,"name":"b"},"zzz":1,"data":{"x":"1","x":"2"}}'
    expected = [
        'unknown field "metadata.foo"',
        'duplicate field "metadata.name"',
        'unknown field "zzz"',
        'duplicate field "data.x"',
    ]
    strict = await server.post(path + "&fieldValidation=Strict", raw=raw)
    assert (strict.status, strict.body["message"]) == (
        400,
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: ' + ", ".join(expected),
    )
    warned = await server.post(path, raw=raw)
    assert warned.status == 201, warned.body
    assert _warnings(warned.headers) == ['299 - "' + e.replace('"', '\\"') + '"' for e in expected]
    assert (warned.body["metadata"]["name"], warned.body["data"]) == ("b", {"x": "2"})  # the last one wins
    pods = f"/api/v1/namespaces/{server.ns}/pods?dryRun=All&fieldValidation=Strict"
    raw = b'{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}'
    reply = await server.post(pods, raw=raw)
    assert reply.body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'duplicate field "spec.containers[0].image"'
    )
    jobs = f"/apis/training.kubedl.io/v1alpha1/namespaces/{server.ns}/pytorchjobs?dryRun=All&fieldValidation=Strict"
    raw = (
        b'{"apiVersion":"training.kubedl.io/v1alpha1","kind":"PyTorchJob","metadata":{"name":"j"},'
        b'"spec":{"backoffLimit":1,"backoffLimit":2,"pytorchReplicaSpecs":{"Master":{"replicas":1,'
        b'"template":{"spec":{"containers":[{"name":"pytorch","image":"i"}]}}}}}}'
    )
    reply = await server.post(jobs, raw=raw)
    assert reply.body["message"] == (
        'PyTorchJob in version "v1alpha1" cannot be handled as a PyTorchJob: strict decoding error: '
        'duplicate field "spec.backoffLimit"'
    )
