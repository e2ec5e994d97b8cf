"""The reconcile's cross-cutting steps behind one contract (kubedl_py/controllers/steps.py).

The reconcile (controllers/job.py) calls each phase through ``Steps`` and names no step: a test parses it. A new
step is one file and one registry line: the test double (``tests/steps/double.py``) is registered by the line a
step author adds to ``STEPS`` (here a monkeypatch), and then takes part in the jobs of every kind on both
control planes.
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
from kubedl_py.controllers import setup
from kubedl_py.controllers import steps as contract
from kubedl_py.controllers.steps import Step
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
JOB_PY = ROOT / "kubedl_py" / "controllers" / "job.py"


def phases() -> set[str]:
    """The contract's phases: the public methods of ``Step``."""
    return {name for name, _ in inspect.getmembers(Step, inspect.isfunction) if not name.startswith("_")}


def step_modules() -> set[str]:
    return {install.__module__ for install in setup.STEPS}


def step_specific_names() -> set[str]:
    """What the registered steps define beyond the contract: their public classes and functions, and the
    public methods of their steps."""
    names: set[str] = set()
    for module_name in step_modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != module_name:
                continue
            names.add(name)
            if inspect.isclass(value) and issubclass(value, Step):
                names |= {method for method, _ in inspect.getmembers(value, inspect.isfunction)}
    return {name for name in names - phases() if not name.startswith("_")}


def test_the_reconcile_calls_no_step_by_name() -> None:
    tree = ast.parse(JOB_PY.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert step_modules() == {
        "kubedl_py.controllers.hostnetwork",
        "kubedl_py.controllers.gang",
        "kubedl_py.controllers.kueue",
        "kubedl_py.controllers.owned",
        "kubedl_py.controllers.rdma",
    }
    assert not imported & step_modules(), f"job.py imports a step: {sorted(imported & step_modules())}"
    assert {"HostNetwork", "PodGroups", "release", "ports", "unplaceable"} <= step_specific_names()
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    specific = used & step_specific_names()
    assert not specific, f"job.py uses what only a step defines: {sorted(specific)}"
    # Every call on the steps is a phase of the contract, and every phase is called.
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            on_steps = (isinstance(receiver, ast.Name) and receiver.id == "steps") or (
                isinstance(receiver, ast.Attribute) and receiver.attr == "steps"
            )
            if on_steps:
                called.add(node.func.attr)
    assert called <= phases(), f"job.py calls {sorted(called - phases())} on the steps, which are no phases"
    assert phases() - called == {"watches"}, "setup.py watches what the steps ask; job.py calls every other phase"


def test_the_double_is_one_file() -> None:
    files = sorted(p.name for p in (ROOT / "tests" / "steps").glob("*.py"))
    assert files == ["__init__.py", "conftest.py", "double.py", "test_steps.py"]
    assert double.install.__module__ == "tests.steps.double"


async def test_the_runner_calls_each_phase_on_every_step_in_order() -> None:
    """``Steps``: the first reason to hold wins, the first step that does not admit stops the rest, the
    replicas to recreate and the owned objects are all of them, the addressing passes from step to step."""
    said: list[str] = []

    class Said(Step):
        def __init__(self, name: str, *, hold: str | None = None, admit: bool = True) -> None:
            self.name, self._hold, self._admit = name, hold, admit

        async def hold(self, seen: Any) -> str | None:
            said.append(f"{self.name}.hold")
            return self._hold

        async def admit(self, seen: Any) -> bool:
            said.append(f"{self.name}.admit")
            return self._admit

        def address(self, seen: Any, addressing: Any, *, served: bool = False) -> Any:
            return [*addressing, self.name]

    steps = contract.Steps((Said("a"), Said("b", hold="b holds", admit=False), Said("c", hold="c holds")))
    assert await steps.hold(None) == "b holds"  # type: ignore[arg-type]
    assert not await steps.admit(None)  # type: ignore[arg-type]
    assert said == ["a.hold", "b.hold", "a.admit", "b.admit"]
    assert steps.address(None, [], served=True) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert steps.begin(None).steps == steps.steps  # type: ignore[arg-type]


@pytest.fixture
def stamped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The one registry line.
    monkeypatch.setattr(setup, "STEPS", (*setup.STEPS, double.install))
    yield


async def test_a_registered_step_takes_part_in_the_reconcile(stamped: None, cluster: Env, kube: Kube) -> None:
    running = RunningController(cluster, fast_options(namespace=kube.ns))
    await running.start()
    try:
        ending = {"exit_code": 0, "run_seconds": 0.5}
        job = pytorchjob("held", replicas={"Master": replica(1, **ending), "Worker": replica(2, **ending)})
        job["metadata"]["annotations"] = {double.HOLD: "yes"}
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        held = await wait_condition(kube, PYTORCHJOBS, "held", "Suspended")
        suspended = next(cond for cond in held["status"]["conditions"] if cond["type"] == "Suspended")
        assert "held by the stamp step" in suspended["message"]
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
