"""Job kinds are plug-ins: a fifth kind is two files and one registry line, and then it is everywhere.

The kind is a test double (``tests/kinds/double/``: ``api.py`` and ``controller.py``), registered by the one
line a kind author adds to ``kubedl_py/api/kinds/__init__.py`` (here a monkeypatch of ``KINDS``). Nothing
else is touched, and the CRDs, the install manifests, parsing, defaults, validation and the controller all
serve it; so the registry is the only list of kinds.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import kubedl_py.api.kinds as registry
from kubedl_local.kubernetes.install import apply, manifest_documents
from kubedl_py.api import JobValidationError, parse_job, with_defaults
from kubedl_py.api.crd import all_crds, crd_for
from kubedl_py.api.kinds.base import KindAPI
from kubedl_py.controllers.failures.policies import completion_of
from kubedl_py.controllers.gang import min_resources
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.resources import Resource
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


#: modules that name kinds by design, and why; every other module of the package is generic
NAMING_KINDS = {
    "kubedl_py/api/kinds/__init__.py": "the registry, the one list of kinds",
    "kubedl_py/api/__init__.py": "the models by their public names (docs/api.md)",
    "kubedl_py/api/jobs.py": "the models by their public names (docs/api.md)",
    "kubedl_py/sdk/__init__.py": "the SDK's public names (docs/sdk.md)",
    "kubedl_py/sdk/shortcuts.py": "pytorch_job and tf_job, the generic builder under the names users know",
    "kubedl_py/sdk/kubeflow/": "the Kubeflow training SDK's own constants and messages, as its scripts read them",
}
#: assignments a generic module keeps (module -> names): the resource names of the first two kinds, which tests
#: and benchmarks address
KEPT = {"kubedl_py/api/constants.py": {"PYTORCH_KIND", "TF_KIND"}}


def kind_words() -> set[str]:
    """What names a kind: its kind, plug-in and container names, its replica-spec field and replica types."""
    words: set[str] = set()
    for plugin in registry.all_kinds():
        framework = plugin.framework
        words |= {framework.kind, plugin.name, framework.container_name, framework.replica_specs_field}
        words |= set(framework.replica_types)
    return words


def names_in_code(source: str, kept: set[str]) -> list[tuple[int, str]]:
    """Identifiers, and string constants that are one token (a key, a type, a name, not a sentence), outside
    docstrings and outside assignments to ``kept`` names: (line, text)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id in kept for target in targets):
                skipped |= {id(inner) for inner in ast.walk(node)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        texts: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not re.search(r"\s", node.value):
            texts.append(node.value)
        elif isinstance(node, ast.Name):
            texts.append(node.id)
        elif isinstance(node, ast.Attribute):
            texts.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            texts.append(node.name)
        elif isinstance(node, ast.arg):
            texts.append(node.arg)
        elif isinstance(node, ast.alias):
            texts += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            texts.append(node.module or "")
        found += [(getattr(node, "lineno", 0), text) for text in texts]
    return found


def test_no_generic_module_names_a_kind() -> None:
    """Replica types, kinds and framework names live in the kinds' plug-ins (their ``Framework``): a generic
    module (the reconcile, its steps, the API machinery, the SDK, the command line, the local clusters) that
    names one has a kind's rule in the wrong place."""
    pattern = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, sorted(kind_words()))) + r")(?![a-z0-9])")
    plugins = {f"kubedl_py/api/kinds/{plugin.name}.py" for plugin in registry.all_kinds()}
    plugins |= {plugin.controller_module.replace(".", "/") + ".py" for plugin in registry.all_kinds()}
    offenders: list[str] = []
    checked: set[str] = set()
    for path in sorted((ROOT / "kubedl_py").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module in plugins or any(module.startswith(prefix) for prefix in NAMING_KINDS):
            continue
        checked.add(module)
        for line, text in names_in_code(path.read_text(), KEPT.get(module, set())):
            match = pattern.search(text)
            if match:
                offenders.append(f"{module}:{line}: {match.group(1)!r} in {text!r}")
    generic = (
        "controllers/job.py",
        "controllers/creation.py",
        "controllers/gang.py",
        "controllers/failures/recovery.py",
        "controllers/failures/handling.py",
        "api/validation.py",
        "sdk/builders.py",
    )
    assert {f"kubedl_py/{name}" for name in generic} <= checked
    assert not offenders, "generic modules name kinds (a kind's rule belongs to its plug-in):\n" + "\n".join(offenders)


def test_the_guard_catches_a_kind_named_in_the_reconcile() -> None:
    """What the guard looks at: a replica type in code, not in a docstring or a message."""
    source = '''"""Worker and Master in a docstring are prose."""\nkey = ("Worker", 0)\nsay = "a Master replica"\n'''
    pattern = re.compile(r"(?<![A-Za-z0-9])(Worker|Master)(?![a-z0-9])")
    hits = [(line, text) for line, text in names_in_code(source, set()) if pattern.search(text)]
    assert hits == [(2, "Worker")]


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


def test_the_kinds_framework_orders_its_gang_and_names_its_workers(relay: KindAPI) -> None:
    """No list of replica types outside the plug-in: a PodGroup's minResources fills from the kind's start order
    (its master types first), and completionPolicy counts the kind's worker type unless told."""
    document = relay_job("r", followers=3, schedulingPolicy={"minAvailable": 2}, completionPolicy={"minSucceeded": 2})
    specs = document["spec"]["relayReplicaSpecs"]
    specs["Leader"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    specs["Follower"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    job = with_defaults(parse_job(document))
    assert job.framework.start_order == ("Leader", "Follower")
    assert min_resources(job) == {"cpu": "5"}  # the Leader and one Follower, not two Followers
    completion = completion_of(job)
    assert completion is not None and (completion.replica_type, completion.total) == ("Follower", 3)


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
