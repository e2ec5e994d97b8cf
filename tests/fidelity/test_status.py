"""Status bodies of failures (and of deletions), exactly as the real server shapes them.

Clients read more than the code: kubectl tells a missing object from a missing resource by
``details.name`` (``kubectl debug`` crashed on a 404 without ``details``), retries on ``reason``, and
prints ``message``. Every expected body below was observed on the real server (v1.37.2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fidelity.conftest import KUBECTL, Server


def _status(code: int, reason: str | None, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    out["message"] = message
    if reason is not None:
        out["reason"] = reason
    if details is not None:
        out["details"] = details
    out["code"] = code
    return out


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
async def test_system_namespaces_may_not_be_deleted(server: Server, name: str) -> None:
    reply = await server.delete(f"/api/v1/namespaces/{name}")
    assert (reply.status, reply.body) == (
        403,
        _status(
            403,
            "Forbidden",
            f'namespaces "{name}" is forbidden: this namespace may not be deleted',
            {"name": name, "kind": "namespaces"},
        ),
    )
    assert (await server.get(f"/api/v1/namespaces/{name}")).body["status"] == {"phase": "Active"}


async def test_not_found(server: Server) -> None:
    ns = server.ns
    missing = [
        (f"/api/v1/namespaces/{ns}/pods/nope", 'pods "nope" not found', {"name": "nope", "kind": "pods"}),
        (
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/nope",
            'leases.coordination.k8s.io "nope" not found',
            {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"},
        ),
        (
            f"/apis/training.kubedl.io/v1alpha1/namespaces/{ns}/pytorchjobs/nope",
            'pytorchjobs.training.kubedl.io "nope" not found',
            {"name": "nope", "group": "training.kubedl.io", "kind": "pytorchjobs"},
        ),
        (
            "/api/v1/namespaces/nope-nope",
            'namespaces "nope-nope" not found',
            {"name": "nope-nope", "kind": "namespaces"},
        ),
    ]
    for path, message, details in missing:
        reply = await server.get(path)
        assert (reply.status, reply.body) == (404, _status(404, "NotFound", message, details)), path
    no_resource = _status(404, "NotFound", "the server could not find the requested resource", {})
    for path in (
        "/api/v1/foos",
        f"/api/v1/namespaces/{ns}/foos/x",
        f"/api/v1/namespaces/{ns}/pods/x/nope",
        "/apis/coordination.k8s.io/v2/leases",
        "/api/v2/pods",
    ):
        reply = await server.get(path)
        assert (reply.status, reply.body) == (404, no_resource), path
    for path in ("/apis/nope.io/v1/foos", "/apis/training.kubedl.io/v1alpha1/foos", "/nope"):
        reply = await server.get(path)
        assert (reply.status, reply.body) == (404, b"404 page not found\n"), path
        assert reply.headers["Content-Type"] == "text/plain; charset=utf-8"


async def test_conflicts(server: Server) -> None:
    path = f"/api/v1/namespaces/{server.ns}/configmaps"
    assert (await server.post(path, {"metadata": {"name": "c1"}})).status == 201
    reply = await server.post(path, {"metadata": {"name": "c1"}})
    assert (reply.status, reply.body) == (
        409,
        _status(409, "AlreadyExists", 'configmaps "c1" already exists', {"name": "c1", "kind": "configmaps"}),
    )
    reply = await server.put(f"{path}/c1", {"metadata": {"name": "c1", "resourceVersion": "1"}})
    assert (reply.status, reply.body) == (
        409,
        _status(
            409,
            "Conflict",
            'Operation cannot be fulfilled on configmaps "c1": the object has been modified; please apply your '
            "changes to the latest version and try again",
            {"name": "c1", "kind": "configmaps"},
        ),
    )


async def test_invalid(server: Server) -> None:
    ns = server.ns
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "restartPolicy": "Sometimes"}}
    reply = await server.post(f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
    assert reply.status == 422
    assert reply.body["details"] == {
        "name": "p",
        "kind": "Pod",
        "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"},
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
                "field": "spec.restartPolicy",
            },
        ],
    }
    assert reply.body["message"] == (
        'Pod "p" is invalid: [spec.containers[0].image: Required value, spec.restartPolicy: Unsupported value: '
        '"Sometimes": supported values: "Always", "OnFailure", "Never"]'
    )
    job = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Sometimes",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
                }
            }
        },
    }
    reply = await server.post(f"/apis/training.kubedl.io/v1alpha1/namespaces/{ns}/pytorchjobs?dryRun=All", job)
    assert reply.status == 422
    assert {k: v for k, v in reply.body["details"].items() if k != "causes"} == {
        "name": "j",
        "group": "training.kubedl.io",
        "kind": "PyTorchJob",
    }
    assert reply.body["details"]["causes"] == [
        {
            "reason": "FieldValueNotSupported",
            "message": 'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"',
            "field": "spec.pytorchReplicaSpecs.Master.restartPolicy",
        },
        {
            # the CRD's CEL rules are not evaluated on an object its schema refuses, and the server says so
            "reason": "FieldValueInvalid",
            "message": "Invalid value: null: some validation rules were not checked because the object was invalid; "
            "correct the existing errors to complete validation",
            "field": "<nil>",
        },
    ]


_TYPE_META = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
_UNRECOGNIZED = (
    "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: "
)
BAD_BODIES = [
    (b"", "unexpected end of JSON input (<empty>)"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string ({\"a\":1,})"),
    (b'{"a" 1}', "invalid character '1' after object key ({\"a\" 1})"),
    (b"[1 2]", "invalid character '2' after array element (5b3120325d)"),
    (b'{"a":tru}', "invalid character '}' in literal true (expecting 'e') ({\"a\":tru})"),
    (b'{"a":-}', "invalid character '}' in numeric literal ({\"a\":-})"),
    (b'{"a":1.}', "invalid character '}' after decimal point in numeric literal ({\"a\":1.})"),
    (b'{"a":"\\q"}', 'invalid character \'q\' in string escape code ({"a":"\\q"})'),
    (b'{"metadata":{"name":"x"}} x', 'invalid character \'x\' after top-level value ({"metadata":{"name":"x"}} x)'),
    (b"[1,2]", f"json: cannot unmarshal array into Go value of type {_TYPE_META} (5b312c325d)"),
    (b'"x"', f"json: cannot unmarshal string into Go value of type {_TYPE_META} (227822)"),
    (b"5", f"json: cannot unmarshal number into Go value of type {_TYPE_META} (35)"),
]


@pytest.mark.parametrize("raw,message", BAD_BODIES)
async def test_bodies_that_are_not_json_objects(server: Server, raw: bytes, message: str) -> None:
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/configmaps?dryRun=All", raw=raw)
    assert (reply.status, reply.body) == (400, _status(400, "BadRequest", _UNRECOGNIZED + message))


async def test_other_bad_requests(server: Server) -> None:
    ns = server.ns
    cases = [
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}},
            400,
            "BadRequest",
            'ConfigMap in version "v2" cannot be handled as a ConfigMap: no kind "ConfigMap" is registered for '
            'version "v2" in scheme "pkg/runtime/scheme.go:111"',
        ),
        (
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            {"apiVersion": "coordination.k8s.io/v2", "kind": "Lease", "metadata": {"name": "x"}},
            400,
            "BadRequest",
            'Lease in version "v2" cannot be handled as a Lease: no kind "Lease" is registered for version '
            '"coordination.k8s.io/v2" in scheme "pkg/runtime/scheme.go:111"',
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}},
            400,
            "BadRequest",
            'Secret in version "v1" cannot be handled as a ConfigMap: converting (v1.Secret) to (core.ConfigMap): '
            "unknown conversion",
        ),
        (
            f"/apis/training.kubedl.io/v1alpha1/namespaces/{ns}/pytorchjobs",
            {"apiVersion": "training.kubedl.io/v2", "kind": "PyTorchJob", "metadata": {"name": "x"}},
            400,
            "BadRequest",
            "the API version in the data (training.kubedl.io/v2) does not match the expected API version "
            "(training.kubedl.io/v1alpha1)",
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {"metadata": {"name": "x", "resourceVersion": "5"}},
            500,  # sic, and only when not a dry run: the storage layer refuses it, without a reason
            None,
            "resourceVersion should not be set on objects to be created",
        ),
    ]
    for path, body, code, reason, message in cases:
        reply = await server.post(path if code == 500 else f"{path}?dryRun=All", body)
        assert (reply.status, reply.body) == (code, _status(code, reason, message)), body


async def test_deletion_answers(server: Server) -> None:
    ns = server.ns
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    await server.post(cms, {"metadata": {"name": "held", "finalizers": ["test.kubedl.io/hold"]}})
    held = await server.delete(f"{cms}/held")
    assert held.status == 200  # not 202: the object is returned, deletion pending
    assert held.body["metadata"]["deletionGracePeriodSeconds"] == 0
    again = await server.delete(f"{cms}/held", {"orphanDependents": False})
    assert again.status == 202  # the one case the real server answers Accepted
    await server.request(
        "PATCH", f"{cms}/held", {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json"
    )
    job = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}}
            }
        },
    }
    jobs = f"/apis/training.kubedl.io/v1alpha1/namespaces/{ns}/pytorchjobs"
    created = await server.post(jobs, job)
    assert created.status == 201, created.body
    deleted = await server.delete(f"{jobs}/j")
    assert (deleted.status, deleted.body) == (
        200,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": "j",
                "group": "training.kubedl.io",
                "kind": "pytorchjobs",
                "uid": created.body["metadata"]["uid"],
            },
        },
    )


async def test_a_terminating_namespace_refuses_new_content(server: Server) -> None:
    name = f"{server.ns}-t"
    await server.post("/api/v1/namespaces", {"metadata": {"name": name}})
    cms = f"/api/v1/namespaces/{name}/configmaps"
    await server.post(cms, {"metadata": {"name": "held", "finalizers": ["test.kubedl.io/hold"]}})
    try:
        deleted = await server.delete(f"/api/v1/namespaces/{name}")
        assert deleted.status == 200
        assert "deletionGracePeriodSeconds" not in deleted.body["metadata"]
        assert deleted.body["status"]["phase"] == "Terminating"
        reply = await server.post(cms, {"metadata": {"name": "late"}})
        assert (reply.status, reply.body) == (
            403,
            _status(
                403,
                "Forbidden",
                f'configmaps "late" is forbidden: unable to create new content in namespace {name} because it is '
                "being terminated",
                {
                    "name": "late",
                    "kind": "configmaps",
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {name} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            ),
        )
    finally:
        await server.request(
            "PATCH", f"{cms}/held", {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json"
        )


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
async def test_kubectl_debug(server: Server) -> None:
    run = await server.kubectl("-n", server.ns, "debug", "nope", "--image=busybox:1.36")
    assert (run.code, run.err.strip()) == (1, 'Error from server (NotFound): pods "nope" not found')
    pod = {"metadata": {"name": "dbg"}, "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}
    assert (await server.post(f"/api/v1/namespaces/{server.ns}/pods", pod)).status == 201
    run = await server.kubectl("-n", server.ns, "debug", "dbg", "--image=busybox:1.36", "--container=dbg-shell")
    assert run.code == 0, run.err
    stored = (await server.get(f"/api/v1/namespaces/{server.ns}/pods/dbg")).body
    assert stored["spec"]["ephemeralContainers"] == [
        {
            "name": "dbg-shell",
            "image": "busybox:1.36",
            "resources": {},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
        }
    ]
    sub = f"/api/v1/namespaces/{server.ns}/pods/dbg/ephemeralcontainers"
    removed = await server.request(
        "PATCH",
        sub,
        [{"op": "remove", "path": "/spec/ephemeralContainers/0"}],
        content_type="application/json-patch+json",
    )
    assert removed.status == 422
    assert removed.body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": 'Forbidden: existing ephemeral containers "dbg-shell" may not be removed\n',
            "field": "spec.ephemeralContainers",
        }
    ]
    ports = await server.request(
        "PATCH",
        sub,
        {"spec": {"ephemeralContainers": [{"name": "e2", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert ports.status == 422
    assert ports.body["message"] == (
        'Pod "dbg" is invalid: spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container'
    )
