"""CustomResourceDefinitions: serving, discovery, validation (422 with field paths), pruning, defaults,
status subresource and generation, printer columns, and removal."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBS = "/apis/test.kubedl.io/v1/namespaces/default/trainjobs"

REPLICA = {
    "type": "object",
    "required": ["replicas"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0, "maximum": 100},
        "restartPolicy": {
            "type": "string",
            "enum": ["Always", "OnFailure", "Never", "ExitCode"],
            "default": "OnFailure",
        },
        "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["replicaSpecs"],
            "properties": {
                "replicaSpecs": {"type": "object", "additionalProperties": REPLICA},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "ratio": {"type": "number"},
                "port": {"x-kubernetes-int-or-string": True},
                "pod": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def crd(status: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)},
        "additionalPrinterColumns": [
            {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
            {"name": "Workers", "type": "integer", "jsonPath": ".spec.replicaSpecs.Worker.replicas"},
        ],
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trainjobs.test.kubedl.io"},
        "spec": {
            "group": "test.kubedl.io",
            "scope": "Namespaced",
            "names": {"plural": "trainjobs", "singular": "trainjob", "kind": "TrainJob", "shortNames": ["tj"]},
            "versions": [version],
        },
    }


def job(job_name: str, workers: Any = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "test.kubedl.io/v1",
        "kind": "TrainJob",
        "metadata": {"name": job_name},
        "spec": {"replicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {"x": 1}}}}, **spec},
    }


async def test_crd_serves_immediately_with_discovery(http: Http) -> None:
    r = await http.post(CRDS, crd())
    assert r.status == 201
    conds = {c["type"]: c["status"] for c in r.body["status"]["conditions"]}
    assert conds["Established"] == "True" and conds["NamesAccepted"] == "True"
    groups = [g["name"] for g in (await http.get("/apis")).body["groups"]]
    assert "test.kubedl.io" in groups
    res = (await http.get("/apis/test.kubedl.io/v1")).body["resources"]
    assert {r["name"] for r in res} == {"trainjobs", "trainjobs/status"}
    assert next(r for r in res if r["name"] == "trainjobs")["shortNames"] == ["tj"]
    created = await http.post(JOBS, job("a"))
    assert created.status == 201, created.body
    assert created.body["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"  # schema default
    assert created.body["metadata"]["generation"] == 1


async def test_validation_errors_name_fields(http: Http) -> None:
    await http.post(CRDS, crd())
    r = await http.post(JOBS, job("bad", workers="two"))
    assert (r.status, r.body["reason"]) == (422, "Invalid")
    fields = [c["field"] for c in r.body["details"]["causes"]]
    assert fields == ["spec.replicaSpecs.Worker.replicas"]
    assert r.body["details"]["kind"] == "TrainJob" and r.body["details"]["group"] == "test.kubedl.io"
    assert 'TrainJob.test.kubedl.io "bad" is invalid' in r.body["message"]
    r = await http.post(JOBS, job("bad", workers=101, name="UPPER", tags=[], ratio="x", port=True))
    causes = {c["field"]: c["reason"] for c in r.body["details"]["causes"]}
    assert causes == {
        "spec.replicaSpecs.Worker.replicas": "FieldValueInvalid",
        "spec.name": "FieldValueInvalid",
        "spec.tags": "FieldValueInvalid",
        "spec.ratio": "FieldValueTypeInvalid",
        "spec.port": "FieldValueTypeInvalid",
    }
    bad = job("bad")
    bad["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    del bad["spec"]["replicaSpecs"]["Worker"]["replicas"]
    r = await http.post(JOBS, bad)
    causes = {c["field"]: c["reason"] for c in r.body["details"]["causes"]}
    assert causes == {
        "spec.replicaSpecs.Worker.replicas": "FieldValueRequired",
        "spec.replicaSpecs.Worker.restartPolicy": "FieldValueNotSupported",
    }
    r = await http.post(
        JOBS, {"apiVersion": "test.kubedl.io/v1", "kind": "TrainJob", "metadata": {"name": "x"}, "spec": {}}
    )
    assert r.body["details"]["causes"][0]["field"] == "spec.replicaSpecs"
    r = await http.post(JOBS, job("okname", name="abcdefghij"))
    assert r.body["details"]["causes"][0]["reason"] == "FieldValueTooLong"


async def test_pruning_preserve_and_embedded(http: Http) -> None:
    await http.post(CRDS, crd())
    body = job("p", port="http", junk={"a": 1})
    body["spec"]["pod"] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "bogus": 1}, "spec": {"k": 1}}
    body["top"] = 1
    r = await http.post(JOBS, body)
    assert r.status == 201, r.body
    spec = r.body["spec"]
    assert "junk" not in spec and "top" not in r.body
    assert spec["replicaSpecs"]["Worker"]["template"] == {"spec": {"x": 1}}  # preserved
    assert spec["pod"]["metadata"] == {"name": "x"} and spec["pod"]["spec"] == {"k": 1} and spec["port"] == "http"
    strict = await http.post(JOBS + "?fieldValidation=Strict", job("s", junk=1))
    assert strict.status == 400 and 'unknown field "spec.junk"' in strict.body["message"]


async def test_status_subresource_and_generation(http: Http) -> None:
    await http.post(CRDS, crd())
    j = (await http.post(JOBS, job("g", status={"x": 1}))).body
    assert "status" not in j  # status is dropped on create with a status subresource
    j2 = (
        await http.patch(
            f"{JOBS}/g", {"status": {"conditions": [{"type": "Running"}]}, "metadata": {"labels": {"a": "b"}}}
        )
    ).body
    assert "status" not in j2 and j2["metadata"]["generation"] == 1
    j3 = (await http.patch(f"{JOBS}/g/status", {"status": {"conditions": [{"type": "Running"}]}})).body
    assert j3["status"]["conditions"] == [{"type": "Running"}] and j3["metadata"]["generation"] == 1
    j4 = (await http.patch(f"{JOBS}/g", {"spec": {"replicaSpecs": {"Worker": {"replicas": 3}}}})).body
    assert j4["metadata"]["generation"] == 2 and j4["status"]["conditions"] == [{"type": "Running"}]
    j4["spec"]["replicaSpecs"]["Worker"]["replicas"] = 4
    del j4["metadata"]["resourceVersion"]
    r = await http.put(f"{JOBS}/g", j4)
    assert r.status == 422  # custom resources need metadata.resourceVersion on update
    table = await http.get(JOBS, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert table.body["kind"] == "Table"
    # the CRD's own printer columns replace the default Age
    assert [c["name"] for c in table.body["columnDefinitions"]] == ["Name", "State", "Workers"]
    assert table.body["rows"][0]["cells"][:3] == ["g", "Running", 3]


async def test_crd_without_status_subresource_bumps_generation_on_any_change(http: Http) -> None:
    await http.post(CRDS, crd(status=False))
    await http.post(JOBS, job("n"))
    j = (await http.patch(f"{JOBS}/n", {"status": {"phase": "x"}})).body
    assert j["status"] == {"phase": "x"} and j["metadata"]["generation"] == 2
    assert (await http.get(f"{JOBS}/n/status")).status == 404


async def test_deleting_crd_removes_objects_and_stops_serving(cluster: LocalCluster, http: Http) -> None:
    await http.post(CRDS, crd())
    await http.post(JOBS, job("d"))
    r = await http.delete(f"{CRDS}/trainjobs.test.kubedl.io")
    assert r.status == 200

    async def purged() -> bool:
        return cluster.store.count(("test.kubedl.io", "trainjobs")) == 0

    await eventually(purged)
    assert (await http.get(JOBS)).status == 404
    assert "test.kubedl.io" not in [g["name"] for g in (await http.get("/apis")).body["groups"]]
    await http.post(CRDS, crd())  # recreated: empty
    assert (await http.get(JOBS)).body["items"] == []


async def test_invalid_crd_rejected(http: Http) -> None:
    bad = crd()
    bad["metadata"]["name"] = "wrong.name"
    r = await http.post(CRDS, bad)
    assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "metadata.name"
    bad = crd()
    del bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"]
    r = await http.post(CRDS, bad)
    assert r.status == 422


async def test_deleting_crd_named_like_a_builtin_keeps_the_builtin(http: Http) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}}
    assert (await http.post(leases, lease)).status == 201
    shadow = crd()
    shadow["metadata"]["name"] = "leases.coordination.k8s.io"
    shadow["spec"]["group"] = "coordination.k8s.io"
    shadow["spec"]["names"] = {"plural": "leases", "singular": "lease", "kind": "Lease"}
    assert (await http.post(CRDS, shadow)).status == 201
    assert (await http.delete(f"{CRDS}/leases.coordination.k8s.io")).status == 200
    await asyncio.sleep(0.1)  # the purge would run on the next loop iteration
    r = await http.get(f"{leases}/l")
    assert r.status == 200 and r.body["kind"] == "Lease"
    assert (await http.get(leases)).status == 200
