"""OpenAPI v3: the documents kubectl reads, and ``kubectl explain`` compared between the two servers.

The embedded server publishes the real server's own documents for built-in kinds (from the pinned
release, with the enums a live server adds) and builds the custom resources' documents as the
apiextensions server does; ``kubectl explain`` must print exactly what it prints against the real one.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fidelity.conftest import KUBECTL, Server

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")]


def _qualified(what: str) -> list[str]:
    """Our kinds are served in kubeflow.org too (the session's clusters install both groups): name ours."""
    ours = what.startswith(("pytorchjobs", "tfjobs"))
    return [what, "--api-version=training.kubedl.io/v1alpha1"] if ours else [what]


EXPLAINED = [
    "pytorchjobs.spec",
    "tfjobs.spec.tfReplicaSpecs",
    "pytorchjobs.spec.nprocPerNode",
    "pytorchjobs.metadata",
    "tfjobs",
    "pods.spec.restartPolicy",
    "pods.spec.containers.ports",
    "services.spec",
    "leases.spec",
    "nodes.status.capacity",
]


async def _published(server: Server, key: str = "apis/training.kubedl.io/v1alpha1") -> dict[str, Any]:
    """The root document once it lists ``key``: the real server publishes a CRD's document some seconds after
    the CRD is established (its OpenAPI controller), so a fresh cluster may not list it yet."""
    deadline = time.monotonic() + 60
    while True:
        root = await server.get("/openapi/v3")
        assert root.status == 200
        if key in root.body["paths"]:
            found: dict[str, Any] = root.body
            return found
        assert time.monotonic() < deadline, f"{key} was not published within 60s"
        await asyncio.sleep(0.2)


async def test_kubectl_explain_prints_what_it_prints_against_the_real_server(both: tuple[Server, Server]) -> None:
    real, embedded = both
    await _published(real)
    for what in EXPLAINED:
        expected = await real.kubectl("explain", *_qualified(what))
        assert expected.code == 0, (what, expected.err)
        got = await embedded.kubectl("explain", *_qualified(what))
        assert (got.code, got.out, got.err) == (0, expected.out, expected.err), what
    expected = await real.kubectl("explain", "pytorchjobs", "--recursive", "--api-version=training.kubedl.io/v1alpha1")
    got = await embedded.kubectl("explain", "pytorchjobs", "--recursive", "--api-version=training.kubedl.io/v1alpha1")
    assert got.out == expected.out


async def test_kubectl_explain_describes_the_job_fields(server: Server) -> None:
    """The models' field docstrings reach ``kubectl explain`` through the CRD, on either server."""
    await _published(server)
    for what in ("pytorchjobs.spec", "pytorchjobs.spec.pytorchReplicaSpecs", "tfjobs.status.replicaStatuses"):
        shown = await server.kubectl("explain", *_qualified(what))
        assert shown.code == 0, (what, shown.err)
        assert "<no description>" not in shown.out, f"{what}:\n{shown.out}"
    spec = " ".join((await server.kubectl("explain", *_qualified("pytorchjobs.spec"))).out.split())
    assert "backoffLimit <integer> Fail the job (reason BackoffLimitExceeded)" in spec, spec
    assert "cacheBackend <Object> Refused: cacheBackend is a KubeDL feature kubedl-py does not support" in spec


async def test_documents(server: Server) -> None:
    paths = (await _published(server))["paths"]
    for key in ("api/v1", "apis/training.kubedl.io/v1alpha1", "apis/coordination.k8s.io/v1"):
        assert paths[key]["serverRelativeURL"].startswith(f"/openapi/v3/{key}?hash=")
    assert "apis/training.kubedl.io" not in paths  # custom groups get no group document
    crds = await server.get(paths["apis/training.kubedl.io/v1alpha1"]["serverRelativeURL"])
    schemas = crds.body["components"]["schemas"]
    job = schemas["io.kubedl.training.v1alpha1.PyTorchJob"]
    assert job["x-kubernetes-group-version-kind"] == [
        {"group": "training.kubedl.io", "kind": "PyTorchJob", "version": "v1alpha1"}
    ]
    assert job["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert "io.kubedl.training.v1alpha1.PyTorchJobList" in schemas
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    core = await server.get(paths["api/v1"]["serverRelativeURL"])
    pod_spec = core.body["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]
    assert pod_spec["properties"]["containers"]["x-kubernetes-patch-merge-key"] == "name"
    assert pod_spec["properties"]["restartPolicy"]["enum"] == ["Always", "Never", "OnFailure"]
    patch = core.body["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
