"""The example files a user is pointed at, run as their comments say: ``kubedl-py submit FILE --follow`` on
``kubedl-py local up`` with its default (process) runtime, so every command in them runs for real.

- ``examples/quickstart-pytorch.yaml``: the quick start's job succeeds on the process runtime too, so a
  user who leaves out ``--runtime simulated`` does not get a crash-looping job;
- ``examples/tfjob-ps-worker-python.yaml``: a TFJob (1 PS, 2 workers, host-network mode) whose processes find
  each other through TF_CONFIG and the Services, and which succeeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import REPO, Target

EXAMPLES = REPO / "examples"


@pytest.fixture
def local(target: Target) -> Iterator[Target]:
    if not target.local:
        pytest.skip("the examples' commands name files of this checkout; a remote target has them in its image")
    yield target


def followed(target: Target, example: Path, name: str) -> list[str]:
    """``submit --follow``: the log lines it streamed; asserts it exited 0 (the job succeeded)."""
    try:
        run = target.cli("submit", str(example), "--follow", "--timeout", "120")
        assert run.returncode == 0, (run.stdout, run.stderr)
        lines = run.stdout.splitlines()
        assert lines[-1].endswith(f"/{name} succeeded"), lines
        return lines
    finally:
        target.cli("delete", name, "--wait", "--timeout", "60")


def test_the_quick_start_job_succeeds_on_the_process_runtime(local: Target) -> None:
    lines = followed(local, EXAMPLES / "quickstart-pytorch.yaml", "quickstart")
    ranks = sorted(line.split("] ", 1)[1].split(",")[0] for line in lines if "] rank " in line)
    assert ranks == ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"], lines


def test_the_tfjob_example_runs_for_real_and_succeeds(local: Target) -> None:
    lines = followed(local, EXAMPLES / "tfjob-ps-worker-python.yaml", "tf-ps-worker")
    for worker in ("worker-0", "worker-1"):
        assert any(
            line.startswith(f"[tf-ps-worker-{worker}] ")
            and "reached ps-0 at tf-ps-worker-ps-0.default.svc:2222" in line
            for line in lines
        ), lines
        assert (
            f"[tf-ps-worker-{worker}] {worker} done: 5 rounds, every peer answered through its Service address" in lines
        )
