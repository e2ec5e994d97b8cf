"""A namespaced install (issue 37): the controller watches a list of namespaces and has rights only there.

On the real control plane the controller runs under the identity ``kubedl-py manifests --watch-namespace``
renders (applied as an operator would: a Role and RoleBinding in each watched namespace, nothing cluster-wide
but the metrics endpoint's review rights and the reader role), with a token of that ServiceAccount straight
to the API server. It reconciles jobs in its namespaces (a host-network one too: it may not list pods
elsewhere, so it picks ports against its own namespaces' pods), leaves a job in another namespace untouched,
never sends a request RBAC refuses, and ``kubectl auth can-i`` says its ServiceAccount cannot create a pod
(or read a Secret) in ``kube-system``. On the embedded tier (no RBAC) the scoping is the same.

The command line's ``--namespace`` list and its refusals are checked here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_local.kubernetes.install import (
    CONTROLLER_IDENTITY_KINDS,
    apply,
    manifest_documents,
    resource_of,
    service_account_token,
)
from kubedl_py.cli.controller import controller_options
from kubedl_py.cli.errors import UsageError
from kubedl_py.cli.parser import build_parser
from kubedl_py.controllers.setup import discovered
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import NAMESPACES
from kubedl_py.templates import ManifestOptions
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    eventually,
    fast_options,
    pods_of,
    pytorchjob,
    services_of,
    wait_condition,
)
from tests.tiers import KUBERNETES

KUBECTL = str(Path(sys.executable).parent / "kubectl")


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode().strip()


@contextlib.asynccontextmanager
async def namespaced_identity(cluster: Env, kube: Kube, options: ManifestOptions, tmp_path: Path) -> Any:
    """The rendered identity of a namespaced install, applied; a client with its ServiceAccount's token (the
    real tier), or the test's controller client (embedded: no RBAC). Cluster-scoped objects go afterwards."""
    documents = manifest_documents(options, kinds=CONTROLLER_IDENTITY_KINDS)
    if cluster.real is None:
        yield cluster.controller_client()
        return
    await apply(kube, documents)
    try:
        token, _ = await service_account_token(kube, options.namespace, "kubedl-py-controller", seconds=3600)
        path = cluster.real.cluster.control_plane.token_kubeconfig(
            tmp_path / "namespaced.kubeconfig",
            user=f"system:serviceaccount:{options.namespace}:kubedl-py-controller",
            token=token,
        )
        yield KubeClient(kubeconfig=path)
    finally:
        for document in documents:
            if document["kind"].startswith("Cluster"):
                with contextlib.suppress(NotFound):
                    await kube.delete(resource_of(document), document["metadata"]["name"])


@pytest.mark.nodes(2)
async def test_a_namespaced_controller_reconciles_its_namespaces_only(cluster: Env, kube: Kube, tmp_path: Path) -> None:
    home, second, other = kube.ns, f"{kube.ns}-b", f"{kube.ns}-c"
    controller_ns = f"{kube.ns}-ctl"
    for name in (second, other, controller_ns):
        await create_namespace(kube, name)
    options = ManifestOptions(namespace=controller_ns, watch_namespaces=(home, second))
    try:
        async with namespaced_identity(cluster, kube, options, tmp_path) as client:
            if cluster.tier == KUBERNETES:
                admin = cluster.real.admin_kubeconfig if cluster.real is not None else Path()
                subject = f"system:serviceaccount:{controller_ns}:kubedl-py-controller"
                checks = {
                    ("create", "pods", "kube-system"): "no",
                    ("get", "secrets", "kube-system"): "no",
                    ("create", "pods", other): "no",
                    ("list", "pods", "--all-namespaces"): "no",
                    ("create", "pods", home): "yes",
                    ("patch", "services", second): "yes",
                }
                for (verb, resource, where), expected in checks.items():
                    scope = [where] if where.startswith("--") else ["-n", where]
                    code, answer = await kubectl(admin, "auth", "can-i", verb, resource, *scope, "--as", subject)
                    assert (answer, code) == (expected, 0 if expected == "yes" else 1), (verb, resource, where)

            async with client:
                found = await discovered(client, fast_options(namespaces=(home, second)))
                # RBAC decides where host-network pods are watched: everywhere only when it allows that
                assert found.host_pods_everywhere is (cluster.tier != KUBERNETES)
                running = _Running(cluster, client, found)
                await running.start()
                try:
                    await kube.create(PYTORCHJOBS, pytorchjob("mine", host=True), namespace=home)
                    await kube.create(PYTORCHJOBS, pytorchjob("also-mine"), namespace=second)
                    await kube.create(PYTORCHJOBS, pytorchjob("not-mine"), namespace=other)
                    for ns, job in ((home, "mine"), (second, "also-mine")):
                        scoped = cluster.client()
                        scoped.ns = ns
                        async with scoped:
                            await wait_condition(scoped, PYTORCHJOBS, job, "Running", within=60)
                            assert len(await pods_of(scoped, job)) == 3
                            # the Master's Service, the one replica dialed by name
                            assert [s["metadata"]["name"] for s in await services_of(scoped, job)] == [
                                f"{job}-master-0"
                            ]
                    ignored = cluster.client()
                    ignored.ns = other
                    async with ignored:
                        assert await pods_of(ignored, "not-mine") == []
                        untouched = await kube.get(PYTORCHJOBS, "not-mine", namespace=other)
                        assert not (untouched.get("status") or {}).get("conditions"), "a job outside its namespaces"
                    assert running.manager is not None
                    refused = [
                        s
                        for family in running.manager.metrics.registry.collect()
                        if family.name == "kubedl_api_errors"
                        for s in family.samples
                        if s.labels.get("code") == "403"
                    ]
                    assert refused == [], "the namespaced controller sent requests its RBAC refuses"
                finally:
                    await running.stop()
    finally:
        for name in (second, other, controller_ns):
            with contextlib.suppress(NotFound):
                await kube.delete(NAMESPACES, name)


class _Running(RunningController):
    """A controller on a client the test made (the namespaced ServiceAccount's)."""

    def __init__(self, cluster: Env, client: KubeClient, options: Any) -> None:
        super().__init__(cluster, options)
        self._given = client

    async def start(self) -> Any:
        from kubedl_py.controllers.setup import build_manager
        from tests.integration.conftest import _ready

        self.client = self._given
        self.manager = build_manager(self.client, self.options)
        self.task = asyncio.create_task(self.manager.run())
        manager = self.manager
        await eventually(lambda: _ready(manager), what="controller ready")
        return manager

    async def stop(self, *, crash: bool = False) -> None:
        self.client = None  # the caller closes it
        if self.task is not None and self.manager is not None:
            self.manager.stop()
            await self.task
        self.task = self.manager = None


# --------------------------------------------------------------------------------------------- the flags


def _options(*argv: str) -> Any:
    return controller_options(build_parser().parse_args(["controller", *argv]))


def test_namespace_flags_are_a_list() -> None:
    assert _options().watched is None
    assert _options("-n", "a").watched == ("a",)
    assert _options("--namespace", "a,b", "-n", "c", "-n", "a").watched == ("a", "b", "c")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--namespace", "Team_A"], "--namespace 'Team_A' is not a namespace name"),
        (["--namespace", "a,,b"], "--namespace '' is not a namespace name"),
        (["--metrics-secure"], "--metrics-secure needs --metrics-addr"),
        (["--metrics-addr", ":8443", "--metrics-cert-dir", "/nowhere"], "--metrics-cert-dir needs --metrics-secure"),
        (["--metrics-addr", ":8443", "--metrics-secure", "--metrics-cert-dir", "/nowhere"], "no tls.crt there"),
        (["--metrics-addr", ":8443", "--health-addr", "0.0.0.0:8443"], "need different ports"),
        (["--health-addr", "8081"], "--health-addr: expected HOST:PORT"),
    ],
)
def test_bad_endpoint_and_namespace_flags_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _options(*argv)
