"""Job kinds are plug-ins: a fifth kind is two files and one registry line, and then it is everywhere.

The kind is a test double (``tests/kinds/double/``: ``api.py`` and ``controller.py``), registered by the one
line a kind author adds to ``kubedl_py/api/kinds/__init__.py`` (here a monkeypatch of ``KINDS``). Nothing
else is touched, and the CRDs, the install manifests, parsing, defaults, validation and the controller all
serve it; so the registry is the only list of kinds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import kubedl_py.api.kinds as registry
from kubedl_py.api import JobValidationError, parse_job, with_defaults
from kubedl_py.api.crd import all_crds, crd_for
from kubedl_py.api.kinds.base import KindAPI
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.resources import Resource
from kubedl_py.local.kubernetes.install import apply, manifest_documents
from kubedl_py.templates import render_manifests
from tests.conftest import CRDS, SESSION_MANIFESTS
from tests.integration.conftest import (
    Env,
    Kube,
    RunningController,
    env_of,
    eventually,
    fast_options,
    pods_of,
    services_of,
    wait_condition,
)
from tests.kinds.double import api as relay_api

ROOT = Path(__file__).resolve().parents[2]
RELAYJOBS = Resource("training.kubedl.io", "v1alpha1", "relayjobs", "RelayJob")


@pytest.fixture
def relay(monkeypatch: pytest.MonkeyPatch) -> Iterator[KindAPI]:
    # The one registry line.
    monkeypatch.setattr(registry, "KINDS", (*registry.KINDS, relay_api.KIND))
    yield relay_api.KIND


def relay_job(name: str, followers: int = 2, **spec: Any) -> dict[str, Any]:
    def replica(count: int, **annotations: str) -> dict[str, Any]:
        template: dict[str, Any] = {"spec": {"containers": [{"name": "relay", "image": "busybox"}]}}
        if annotations:
            template["metadata"] = {"annotations": annotations}
        return {"replicas": count, "template": template}

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "RelayJob",
        "metadata": {"name": name},
        "spec": {
            "relayReplicaSpecs": {
                "Leader": replica(1, **{"local.kubedl.io/exit-code": "0", "local.kubedl.io/run-seconds": "0.5"}),
                "Follower": replica(followers),
            },
            **spec,
        },
    }


def test_the_double_is_two_files() -> None:
    files = sorted(p.name for p in (ROOT / "tests" / "kinds" / "double").glob("*.py") if p.name != "__init__.py")
    assert files == ["api.py", "controller.py"]


def test_no_kind_is_named_in_the_reconcile() -> None:
    text = (ROOT / "kubedl_py" / "controllers" / "job.py").read_text()
    for name in ("PyTorch", "pytorch", "TFJob", "Tensor", "tfReplica", "Master", "Worker"):
        assert name not in text, f"controllers/job.py names {name!r}: a kind's rule belongs to its plug-in"


def test_the_registered_kind_gets_a_crd_rbac_parsing_defaults_and_validation(relay: KindAPI) -> None:
    crd = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "RelayJob")
    assert crd == crd_for(relay)
    assert crd["spec"]["names"]["shortNames"] == ["rlj"] and crd["metadata"]["name"] == "relayjobs.training.kubedl.io"
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "relayReplicaSpecs"
    ]["x-kubernetes-validations"]
    assert rules[0]["rule"] == "self.all(k, k.matches('(?i)^(leader|follower)$'))"
    role = next(d for d in yaml.safe_load_all(render_manifests()) if d and d["kind"] == "ClusterRole")
    assert any("relayjobs" in rule["resources"] for rule in role["rules"])
    assert any("relayjobs/status" in rule["resources"] for rule in role["rules"])

    job = parse_job(relay_job("r"))
    assert type(job).__name__ == "RelayJob" and job.framework.kind == "RelayJob"
    assert with_defaults(job).spec.baton == "red"  # type: ignore[attr-defined]
    document = relay_job("r")
    del document["spec"]["relayReplicaSpecs"]["Leader"]
    with pytest.raises(JobValidationError) as refused:
        parse_job(document)
    assert [e.field for e in refused.value.errors] == ["spec.relayReplicaSpecs.Leader"]


@contextlib.asynccontextmanager
async def relay_installed(cluster: Env, kube: Kube) -> Any:
    """The RelayJob CRD, and on a real cluster the ClusterRole rendered with it (the session's is not)."""
    with contextlib.suppress(AlreadyExists):
        await kube.create(CRDS, crd_for(relay_api.KIND))

    async def served() -> bool:
        try:
            await kube.list(RELAYJOBS, namespace=kube.ns)
        except Exception:
            return False
        return True

    await eventually(served, what="relayjobs served")
    if cluster.real is not None:
        await apply(kube, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))
    try:
        yield
    finally:
        if cluster.real is not None:
            with registry_without_relay():
                await apply(kube, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))


@contextlib.contextmanager
def registry_without_relay() -> Iterator[None]:
    saved = registry.KINDS
    registry.KINDS = tuple(k for k in saved if k.kind != "RelayJob")
    try:
        yield
    finally:
        registry.KINDS = saved


async def test_the_controller_runs_the_registered_kind(relay: KindAPI, cluster: Env, kube: Kube) -> None:
    async with relay_installed(cluster, kube):
        running = RunningController(cluster, fast_options(namespace=kube.ns))
        await running.start()
        try:
            await kube.create(RELAYJOBS, relay_job("relay", followers=2, baton="blue"), namespace=kube.ns)

            async def three() -> list[dict[str, Any]] | None:
                pods = await pods_of(kube, "relay")
                return pods if len(pods) == 3 else None

            pods = await eventually(three, what="3 pods")
            assert [p["metadata"]["name"] for p in pods] == ["relay-follower-0", "relay-follower-1", "relay-leader-0"]
            follower = env_of(pods[1])
            assert follower["RELAY_LEADER"] == f"relay-leader-0.{kube.ns}.svc:7777"
            assert (follower["RELAY_FOLLOWERS"], follower["RELAY_BATON"]) == ("2", "blue")
            assert pods[2]["metadata"]["labels"]["training.kubedl.io/job-role"] == "master"
            assert [s["metadata"]["name"] for s in await services_of(kube, "relay")] == [
                "relay-follower-0",
                "relay-follower-1",
                "relay-leader-0",
            ]
            done = await wait_condition(kube, RELAYJOBS, "relay", "Succeeded")
            assert done["status"]["replicaStatuses"]["Leader"]["succeeded"] == 1
        finally:
            await running.stop()
