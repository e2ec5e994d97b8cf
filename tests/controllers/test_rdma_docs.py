"""docs/rdma.md shows the examples and the pods the controller makes of them: what it shows must be what
the files hold and what the controller builds, or a reader copying from it gets something else.

Each ```yaml block of the page that starts with ``# examples/<file>`` must be a part of that file (every key
it shows, with the value it shows; ``(abridged)`` only allows leaving things out). The pod of the opt-in
scenario must be a part of the pod the controller makes of that example (``...`` entries stand for the rest).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_py.api import load_jobs_file, with_defaults
from kubedl_py.controllers.pods import addressing_for
from tests.controllers.building import built_pod

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "rdma.md").read_text()
BLOCKS = re.findall(r"```yaml\n(.*?)```", PAGE, flags=re.DOTALL)


def problems(shown: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``shown`` is not a part of ``actual``: mappings by key, lists item by item (each shown item a
    part of some actual item, in any order), scalars equal; a string starting with ``...`` matches anything."""
    if isinstance(shown, str) and shown.startswith("..."):
        return []
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path or '/'}: shown a mapping, is {actual!r}"]
        found: list[str] = []
        for key, value in shown.items():
            if key not in actual:
                found.append(f"{path}/{key}: shown, not there (there: {sorted(actual)})")
            else:
                found += problems(value, actual[key], f"{path}/{key}")
        return found
    if isinstance(shown, list):
        if not isinstance(actual, list):
            return [f"{path}: shown a list, is {actual!r}"]
        return [
            f"{path}[{i}]: {item!r} matches no item of {actual!r}"
            for i, item in enumerate(shown)
            if not any(not problems(item, candidate) for candidate in actual)
        ]
    return [] if shown == actual else [f"{path}: shown {shown!r}, is {actual!r}"]


def example_blocks() -> list[tuple[str, str]]:
    named = []
    for block in BLOCKS:
        match = re.match(r"# (examples/[\w.-]+)", block)
        if match:
            named.append((match[1], block))
    return named


def test_the_page_shows_the_examples() -> None:
    assert {name for name, _ in example_blocks()} >= {
        "examples/rdma-defaults.yaml",
        "examples/pytorch-rdma-optin.yaml",
        "examples/pytorch-rdma-spiderpool.yaml",
        "examples/pytorch-gang-topology.yaml",
    }


@pytest.mark.parametrize(("name", "block"), example_blocks(), ids=[name for name, _ in example_blocks()])
def test_each_example_block_is_part_of_its_file(name: str, block: str) -> None:
    shown = yaml.safe_load(block)
    actual = yaml.safe_load((ROOT / name).read_text())
    assert not problems(shown, actual), f"docs/rdma.md's block of {name} differs from the file:\n" + "\n".join(
        problems(shown, actual)
    )


def test_the_opt_in_scenarios_pod_is_the_pod_the_controller_builds() -> None:
    pod_block = next(block for block in BLOCKS if block.startswith("spec:\n  hostNetwork: true"))
    shown = yaml.safe_load(pod_block)
    (job,) = load_jobs_file(ROOT / "examples" / "pytorch-rdma-optin.yaml")
    job = with_defaults(job)
    # The page's pod is worker 0's ("kubectl get pod resnet-rdma-optin-worker-0"), in host-network mode.
    assert job.host_network and "Worker 0's pod (`kubectl get pod resnet-rdma-optin-worker-0" in PAGE
    pod = built_pod(job, "Worker", 0, addressing_for(job, host_ports={("Worker", 0): 20001}))
    assert not problems(shown, pod), "docs/rdma.md's pod differs from the one built:\n" + "\n".join(
        problems(shown, pod)
    )
