"""Protobuf request bodies: what client-go (and so kubectl) sends for built-in kinds.

The expected objects below are what the real server stores for each command (observed on v1.37.2); the
embedded server must store the same. The decoder itself is also checked against the real server's own
protobuf encoder (GET as protobuf == GET as JSON), and a test encoder built on the same table sends what
kubectl never does (pointer ``false``s, MicroTimes, int-or-strings, bytes) to both tiers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.apiserver import protobuf
from kubedl_local.apiserver.protobuf import decode, ensure_table, go_duration
from tests.fidelity.conftest import KUBECTL, Server, comparable
from tests.fidelity.protowire import Encoder
from tests.tiers import EMBEDDED, KUBERNETES

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")]

PROTOBUF = "application/vnd.kubernetes.protobuf"
DOCKER_FLAGS = ("--docker-server=r.io", "--docker-username=u", "--docker-password=p")
SERVICE_DEFAULTS = {
    "sessionAffinity": "None",
    "ipFamilies": ["IPv4"],
    "ipFamilyPolicy": "SingleStack",
    "internalTrafficPolicy": "Cluster",
}


def _expected(ns: str, command: str) -> tuple[list[str], str, dict[str, Any]]:
    """(kubectl arguments, the object's path, the object the real server stores)."""
    meta = {"namespace": ns}
    if command == "configmap":
        return (
            ["create", "configmap", "cm", "--from-literal=a=b", "--from-file=bin={binary}"],
            f"/api/v1/namespaces/{ns}/configmaps/cm",
            {
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {"name": "cm", **meta},
                "data": {"a": "b"},
                "binaryData": {"bin": "AAH/"},
            },
        )
    if command == "secret":
        return (
            ["create", "secret", "generic", "s", "--from-literal=k=hello"],
            f"/api/v1/namespaces/{ns}/secrets/s",
            {
                "kind": "Secret",
                "apiVersion": "v1",
                "metadata": {"name": "s", **meta},
                "data": {"k": "aGVsbG8="},
                "type": "Opaque",
            },
        )
    if command == "docker-registry":
        config = "eyJhdXRocyI6eyJyLmlvIjp7InVzZXJuYW1lIjoidSIsInBhc3N3b3JkIjoicCIsImF1dGgiOiJkVHB3In19fQ=="
        return (
            ["create", "secret", "docker-registry", "dr", *DOCKER_FLAGS],
            f"/api/v1/namespaces/{ns}/secrets/dr",
            {
                "kind": "Secret",
                "apiVersion": "v1",
                "metadata": {"name": "dr", **meta},
                "data": {".dockerconfigjson": config},
                "type": "kubernetes.io/dockerconfigjson",
            },
        )
    if command == "serviceaccount":
        return (
            ["create", "serviceaccount", "sa"],
            f"/api/v1/namespaces/{ns}/serviceaccounts/sa",
            {"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": "sa", **meta}},
        )
    if command == "service-clusterip":
        return (
            ["create", "service", "clusterip", "web", "--tcp=80:8080"],
            f"/api/v1/namespaces/{ns}/services/web",
            {
                "kind": "Service",
                "apiVersion": "v1",
                "metadata": {"name": "web", "labels": {"app": "web"}, **meta},
                "spec": {
                    "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                    "selector": {"app": "web"},
                    "type": "ClusterIP",
                    **SERVICE_DEFAULTS,
                },
                "status": {"loadBalancer": {}},
            },
        )
    assert command == "service-nodeport"
    return (
        ["create", "service", "nodeport", "np", "--tcp=81:8081"],
        f"/api/v1/namespaces/{ns}/services/np",
        {
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {"name": "np", "labels": {"app": "np"}, **meta},
            "spec": {
                "ports": [{"name": "81-8081", "protocol": "TCP", "port": 81, "targetPort": 8081}],
                "selector": {"app": "np"},
                "type": "NodePort",
                "externalTrafficPolicy": "Cluster",
                **SERVICE_DEFAULTS,
            },
            "status": {"loadBalancer": {}},
        },
    )


COMMANDS = ["configmap", "secret", "docker-registry", "serviceaccount", "service-clusterip", "service-nodeport"]


@pytest.mark.parametrize("command", COMMANDS)
async def test_kubectl_create_sends_protobuf_and_the_object_is_stored(
    server: Server, tmp_path: Path, command: str
) -> None:
    binary = tmp_path / "bin.dat"
    binary.write_bytes(b"\x00\x01\xff")  # not UTF-8: kubectl puts it in binaryData (protobuf bytes)
    args, path, expected = _expected(server.ns, command)
    run = await server.kubectl("-n", server.ns, *(a.format(binary=binary) for a in args))
    assert run.code == 0, run.err
    assert run.out.strip().endswith(" created"), run.out
    stored = await server.get(path)
    assert stored.status == 200, stored.body
    got = comparable(stored.body, drop_spec=("clusterIP", "clusterIPs"))
    if command == "service-nodeport":
        node_port = got["spec"]["ports"][0].pop("nodePort")
        assert 30000 <= node_port <= 32767
    assert got == expected


async def test_kubectl_create_namespace(server: Server) -> None:
    name = f"{server.ns}-n"
    run = await server.kubectl("create", "namespace", name)
    try:
        assert run.code == 0, run.err
        assert run.out.strip() == f"namespace/{name} created"
        stored = await server.get(f"/api/v1/namespaces/{name}")
        assert comparable(stored.body) == {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
    finally:
        await server.delete(f"/api/v1/namespaces/{name}")


def _rich_objects(ns: str) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) pairs that use every special type of the protobuf mapping."""
    return [
        (
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "rich", "labels": {"a": "b"}, "annotations": {"x": "y"}},
                "spec": {
                    # pointers set to their zero value: they must survive (not be defaulted)
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", "true"],
                            "ports": [{"name": "http", "containerPort": 80}],
                            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                            "readinessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 3},
                            "env": [
                                {"name": "A", "value": "1"},
                                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            ],
                        }
                    ],
                    "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "aGVsbG8="}},
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm"},
                "data": {"a": "b"},
                "binaryData": {"bin": "AAEC"},
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "svc"},
                "spec": {
                    "selector": {"a": "b"},
                    "ports": [
                        {"name": "a", "port": 80, "targetPort": "http"},
                        {"name": "b", "port": 81, "targetPort": 8081},
                    ],
                },
            },
        ),
        (
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "l"},
                "spec": {
                    "holderIdentity": "me",
                    "leaseDurationSeconds": 15,
                    "renewTime": "2026-01-02T03:04:05.123456Z",
                    "acquireTime": "2026-01-02T03:04:05.000000Z",
                    "leaseTransitions": 0,
                },
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "e1"},
                "involvedObject": {"kind": "Pod", "name": "rich", "namespace": ns},
                "reason": "Started",
                "message": "m",
                "type": "Normal",
                "eventTime": "2026-01-02T03:04:05.123456Z",
                "reportingComponent": "test",
                "reportingInstance": "test-1",
                "action": "Start",
            },
        ),
    ]


async def test_protobuf_and_json_bodies_store_the_same_object(server: Server) -> None:
    encoder = Encoder(ensure_table())
    for collection, obj in _rich_objects(server.ns):
        as_json = await server.post(collection, obj)
        assert as_json.status == 201, as_json.body
        renamed = {**obj, "metadata": {**obj["metadata"], "name": obj["metadata"]["name"] + "-pb"}}
        as_protobuf = await server.post(collection, raw=encoder.envelope(renamed), content_type=PROTOBUF)
        assert as_protobuf.status == 201, as_protobuf.body
        left = comparable(as_json.body, drop_spec=("clusterIP", "clusterIPs"))
        right = comparable(as_protobuf.body, drop_spec=("clusterIP", "clusterIPs"))
        right["metadata"]["name"] = obj["metadata"]["name"]
        assert right == left, obj["kind"]
    pod = (await server.get(f"/api/v1/namespaces/{server.ns}/pods/rich-pb")).body["spec"]
    assert (pod["enableServiceLinks"], pod["automountServiceAccountToken"]) == (False, False)
    assert pod["terminationGracePeriodSeconds"] == 0


async def test_protobuf_answers_decode_to_the_json_answers(server: Server) -> None:
    """A protobuf-only client's answer, decoded here, is exactly the JSON answer; on the real server the
    embedded encoder writes the same bytes for that JSON (so protobuf answers are the real ones)."""
    table = ensure_table()
    for collection, obj in _rich_objects(server.ns):
        created = await server.post(collection, obj)
        assert created.status == 201, created.body
        path = f"{collection}/{obj['metadata']['name']}"
        # Controllers may write the object between the two reads (the scheduler marks the pod Unschedulable):
        # compare two reads of the same resourceVersion.
        deadline = time.monotonic() + 10
        while True:
            as_json = await server.get(path)
            as_protobuf = await server.get(path, headers={"Accept": PROTOBUF})
            assert as_protobuf.headers["Content-Type"] == PROTOBUF
            decoded = decode(as_protobuf.body, table)
            same_version = decoded["metadata"]["resourceVersion"] == as_json.body["metadata"]["resourceVersion"]
            if same_version or time.monotonic() > deadline:
                break
        assert decoded == as_json.body, obj["kind"]
        if server.tier == KUBERNETES:
            assert protobuf.encode(as_json.body, table) == as_protobuf.body, obj["kind"]


async def test_protobuf_lists_and_what_has_no_protobuf(server: Server) -> None:
    """Lists come in protobuf too; a custom resource has no protobuf form (406, its Status in protobuf)."""
    table = ensure_table()
    path = f"/api/v1/namespaces/{server.ns}/configmaps"
    assert (await server.post(path, {"metadata": {"name": "a"}, "data": {"k": "v"}})).status == 201
    listed = await server.get(path, headers={"Accept": PROTOBUF})
    assert (listed.status, listed.headers["Content-Type"]) == (200, PROTOBUF)
    decoded = decode(listed.body, table)
    assert decoded["kind"] == "ConfigMapList" and "a" in [i["metadata"]["name"] for i in decoded["items"]]
    jobs = await server.get(
        f"/apis/training.kubedl.io/v1alpha1/namespaces/{server.ns}/pytorchjobs", headers={"Accept": PROTOBUF}
    )
    assert (jobs.status, jobs.headers["Content-Type"]) == (406, PROTOBUF)  # the Status too is in protobuf
    status = decode(jobs.body, table)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "NotAcceptable", 406)
    assert status["message"] == (
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf"
    )


async def test_malformed_protobuf_is_a_bad_request(server: Server) -> None:
    path = f"/api/v1/namespaces/{server.ns}/configmaps"
    reply = await server.post(path, raw=b"k8s\x00\xff\xff", content_type=PROTOBUF)
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"].startswith("the object provided is unrecognized (must be of type ConfigMap): ")
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/configmaps", raw=b"hello", content_type=PROTOBUF)
    assert reply.status == 400
    assert reply.body["message"].startswith("the object provided is unrecognized (must be of type ConfigMap): ")


async def test_unknown_media_type_is_415(server: Server) -> None:
    reply = await server.post(
        f"/api/v1/namespaces/{server.ns}/configmaps", {"metadata": {"name": "x"}}, content_type="text/plain"
    )
    assert (reply.status, reply.body["reason"]) == (415, "UnsupportedMediaType")
    assert reply.body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    )


# ------------------------------------------------------------------------------------------ embedded only


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cached table and no reachable module proxy."""
    monkeypatch.setenv("KUBEDL_PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9")
    monkeypatch.setattr(protobuf, "_loaded", None)


async def test_without_the_table_protobuf_is_415_saying_how_to_get_it(server: Server, offline: None) -> None:
    if server.tier != EMBEDDED:
        pytest.skip("the real server has the types compiled in")
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/configmaps", raw=b"k8s\x00", content_type=PROTOBUF)
    assert (reply.status, reply.body["reason"]) == (415, "UnsupportedMediaType")
    assert "python -m kubedl_local.sources" in reply.body["message"]
    assert "application/json" in reply.body["message"]


async def test_protobuf_custom_resources_are_415(server: Server) -> None:
    if server.tier != EMBEDDED:
        pytest.skip("the real server (v1.37.2) drops the connection on this: an apiserver panic")
    body = Encoder(ensure_table()).envelope({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    reply = await server.post(
        f"/apis/training.kubedl.io/v1alpha1/namespaces/{server.ns}/pytorchjobs", raw=body, content_type=PROTOBUF
    )
    assert (reply.status, reply.body["reason"]) == (415, "UnsupportedMediaType")


@pytest.mark.parametrize(
    "nanoseconds,text",
    [
        (0, "0s"),
        (1, "1ns"),
        (1500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (90 * 10**9, "1m30s"),
        (3600 * 10**9, "1h0m0s"),
        (-(2 * 10**9 + 5), "-2.000000005s"),
        (26 * 3600 * 10**9 + 1, "26h0m0.000000001s"),
    ],
)
def test_go_duration_format(nanoseconds: int, text: str) -> None:
    assert go_duration(nanoseconds) == text
