"""The reconcile's cross-cutting features behind narrow contracts (kubedl_py/controllers/features.py).

The reconcile (controllers/job.py and the modules it is made of) calls the features through one runner and names
none: a test parses it. A new feature is one file and one registry line: the test double
(``tests/steps/double.py``) is registered by the line a feature author adds to ``FEATURES`` (here a monkeypatch),
and then takes part in the jobs of every kind on both control planes. A reconcile decides once what holds for it
(``plan.py``): a test counts how often it resolves the kind and builds the addressing.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.controllers import features as contract
from kubedl_py.controllers import kinds, plan, setup
from kubedl_py.kube.resources import CONFIGMAPS
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    events_for,
    eventually,
    fast_options,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)
from tests.steps import double

ROOT = Path(__file__).resolve().parents[2]
CONTROLLERS = ROOT / "kubedl_py" / "controllers"
#: the modules the reconcile is made of: none may name a feature
RECONCILE = [
    CONTROLLERS / name
    for name in ("job.py", "creation.py", "reporting.py", "writes.py", "plan.py", "memory.py", "failures/handling.py")
]
CONTRACTS = (
    contract.Watches,
    contract.Remembers,
    contract.PerReconcile,
    contract.Gates,
    contract.ShapesPods,
    contract.OwnsObjects,
    contract.Suspends,
    contract.Finishes,
    contract.AroundCreates,
)


def session_calls() -> set[str]:
    """What the runner's session offers the reconcile: its public methods."""
    return {name for name, _ in inspect.getmembers(contract.Session, inspect.isfunction) if not name.startswith("_")}


def feature_modules() -> set[str]:
    return {install.__module__ for install in setup.FEATURES}


def contract_names() -> set[str]:
    return {name for proto in CONTRACTS for name in vars(proto) if not name.startswith("_")}


def feature_specific_names() -> set[str]:
    """What the registered features define beyond the contracts: their public classes, functions and methods."""
    names: set[str] = set()
    for module_name in feature_modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != module_name:
                continue
            names.add(name)
            if inspect.isclass(value):
                names |= {method for method, _ in inspect.getmembers(value, inspect.isfunction)}
    return {name for name in names - contract_names() - session_calls() if not name.startswith("_")}


def test_the_reconcile_calls_no_feature_by_name() -> None:
    assert feature_modules() == {
        "kubedl_py.controllers.hostnetwork.feature",
        "kubedl_py.controllers.gang",
        "kubedl_py.controllers.kueue",
        "kubedl_py.controllers.rdma",
    }
    assert {"HostNetwork", "PodGroups", "release", "ports", "unplaceable"} <= feature_specific_names()
    called: set[str] = set()
    for path in RECONCILE:
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        packages = {module.rpartition(".")[0] for module in feature_modules()} - {"kubedl_py.controllers"}
        assert not imported & (feature_modules() | packages), f"{path.name} imports a feature"
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        used |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        specific = used & feature_specific_names()
        assert not specific, f"{path.name} uses what only a feature defines: {sorted(specific)}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if isinstance(receiver, ast.Name) and receiver.id == "session":
                    called.add(node.func.attr)
    # Every call on the session is one it offers, and everything it offers is called.
    assert called == session_calls(), f"called but not offered, or offered but not called: {called ^ session_calls()}"


def test_the_double_is_one_file() -> None:
    files = sorted(p.name for p in (ROOT / "tests" / "steps").glob("*.py"))
    assert files == ["__init__.py", "conftest.py", "double.py", "test_steps.py"]
    assert double.install.__module__ == "tests.steps.double"


def test_features_are_found_by_the_contracts_they_implement() -> None:
    """Each registered feature implements only some of the contracts, found by type; the double only the four it
    takes part in."""
    stamp = double.Stamp(recorder=None)  # type: ignore[arg-type]
    session = contract.Session((stamp,))
    assert session.gates == [stamp] and session.shapers == [stamp] and session.owners == [stamp]
    assert session.finishers == [stamp] and session.suspenders == [] and session.around == []
    assert contract.Features((stamp,)).watches() == ()


async def test_the_runner_calls_each_contract_on_its_features_in_order() -> None:
    """The first reason to hold wins, the first feature that does not admit stops the rest, the addressing
    passes from feature to feature, and a feature is asked only what it implements."""
    said: list[str] = []

    class Said:
        def __init__(self, name: str, *, hold: str | None = None, admit: bool = True) -> None:
            self.name, self._hold, self._admit = name, hold, admit

        async def hold(self, plan: Any) -> str | None:
            said.append(f"{self.name}.hold")
            return self._hold

        async def admit(self, plan: Any) -> bool:
            said.append(f"{self.name}.admit")
            return self._admit

    class Shapes:
        def shape_pod(self, plan: Any, replica: Any, pod: dict[str, Any]) -> None:
            pod.setdefault("by", []).append("shapes")

    features = contract.Features((Said("a"), Shapes(), Said("b", hold="b holds", admit=False), Said("c", hold="c")))
    session = features.begin(None)  # type: ignore[arg-type]
    assert await session.hold(None) == "b holds"  # type: ignore[arg-type]
    assert not await session.admit(None)  # type: ignore[arg-type]
    assert said == ["a.hold", "b.hold", "a.admit", "b.admit"]
    pod: dict[str, Any] = {}
    session.shape_pod(None, None, pod)  # type: ignore[arg-type]
    assert pod == {"by": ["shapes"]}
    assert session.recreate(None) == []  # type: ignore[arg-type]


async def test_a_reconcile_resolves_the_kind_and_builds_the_addressing_once(
    cluster: Env, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host-network job's reconciles, counted: the kind's plug-in is resolved when the reconciler is made,
    never in a reconcile; the addressing (it reads every template) is built at most once per reconcile."""
    resolved: list[str] = []
    built: list[str] = []
    real_resolve, real_build = kinds.controller_for, plan.addressing_for

    def resolve(kind: Any) -> Any:
        resolved.append(str(kind))
        return real_resolve(kind)

    def build(job: Any, **kwargs: Any) -> Any:
        built.append(job.name)
        return real_build(job, **kwargs)

    for module in ("kubedl_py.controllers.job", "kubedl_py.controllers.rendezvous", "kubedl_py.controllers.kinds"):
        if hasattr(importlib.import_module(module), "controller_for"):
            monkeypatch.setattr(f"{module}.controller_for", resolve)
    monkeypatch.setattr(plan, "addressing_for", build)
    reconciles: list[int] = []
    real_reconcile = setup.JobReconciler.reconcile

    async def counted(self: Any, key: str) -> Any:
        before = (len(resolved), len(built))
        result = await real_reconcile(self, key)
        if key.endswith("/once"):
            reconciles.append(len(built) - before[1])
            assert len(resolved) == before[0], "a reconcile resolved the kind's plug-in again"
        return result

    monkeypatch.setattr(setup.JobReconciler, "reconcile", counted)
    running = RunningController(cluster, fast_options(namespace=kube.ns))
    await running.start()
    try:
        ending = {"exit_code": 0, "run_seconds": 0.5}
        job = pytorchjob("once", host=True, replicas={"Master": replica(1, **ending), "Worker": replica(2, **ending)})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        await wait_condition(kube, PYTORCHJOBS, "once", "Succeeded")
    finally:
        await running.stop()
    assert reconciles, "the job was never reconciled"
    assert max(reconciles) == 1, f"addressing built per reconcile: {reconciles}"
    assert sum(reconciles) >= 1  # the pods were made with it


@pytest.fixture
def stamped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The one registry line.
    monkeypatch.setattr(setup, "FEATURES", (*setup.FEATURES, double.install))
    yield


async def test_a_registered_feature_takes_part_in_the_reconcile(stamped: None, cluster: Env, kube: Kube) -> None:
    running = RunningController(cluster, fast_options(namespace=kube.ns))
    await running.start()
    try:
        ending = {"exit_code": 0, "run_seconds": 0.5}
        job = pytorchjob("held", replicas={"Master": replica(1, **ending), "Worker": replica(2, **ending)})
        job["metadata"]["annotations"] = {double.HOLD: "yes"}
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        held = await wait_condition(kube, PYTORCHJOBS, "held", "Suspended")
        suspended = next(cond for cond in held["status"]["conditions"] if cond["type"] == "Suspended")
        assert "held by the stamp feature" in suspended["message"]
        assert await pods_of(kube, "held") == []

        await kube.patch(PYTORCHJOBS, "held", {"metadata": {"annotations": {double.HOLD: None}}}, namespace=kube.ns)

        async def three() -> list[dict[str, Any]] | None:
            pods = await pods_of(kube, "held")
            return pods if len(pods) == 3 else None

        pods = await eventually(three, what="3 pods once released")
        assert [pod["metadata"]["labels"][double.STAMPED] for pod in pods] == ["master-0", "worker-0", "worker-1"]
        assert all(pod["metadata"]["labels"][c.LABEL_CONTROLLER] == c.CONTROLLER_NAME for pod in pods)
        stamp = await kube.get(CONFIGMAPS, "held-stamp", namespace=kube.ns)
        assert stamp["data"]["replicas"].split() == [
            f"held-master-0.{kube.ns}.svc",
            f"held-worker-0.{kube.ns}.svc",
            f"held-worker-1.{kube.ns}.svc",
        ]
        done = await wait_condition(kube, PYTORCHJOBS, "held", "Succeeded")
        assert stamp["metadata"]["ownerReferences"][0]["uid"] == done["metadata"]["uid"]

        async def stamped_event() -> dict[str, Any] | None:
            return next((e for e in await events_for(kube, "held") if e["reason"] == "Stamped"), None)

        event = await eventually(stamped_event, what="the Stamped event")
        assert event["involvedObject"]["kind"] == "PyTorchJob"
    finally:
        await running.stop()


def test_no_controller_module_over_600_lines_and_no_class_over_400() -> None:
    """The reconcile stays easy to read (issue 48): small modules, small classes."""
    too_long: list[str] = []
    for path in sorted(CONTROLLERS.rglob("*.py")):
        source = path.read_text()
        if source.count("\n") > 600:
            too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and (node.end_lineno or 0) - node.lineno + 1 > 400:
                too_long.append(f"{path.relative_to(ROOT)}: class {node.name}")
    assert not too_long, too_long
