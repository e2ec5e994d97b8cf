"""The in-place restart agent (``kubedl_py.agent``): its rules, and its two programs run as a pod runs them
(``kubedl-py-agent barrier|watcher`` over a downward API directory and an emptyDir)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubedl_py import agent


def test_the_first_run_is_at_the_attempt_the_pod_was_made_at_and_every_later_one_ends_an_attempt() -> None:
    assert agent.next_attempt(None, 3) == 3
    assert agent.next_attempt(3, 3) == 4  # the pod's own failure: the job has not moved yet
    assert agent.next_attempt(3, 5) == 5  # told of a later attempt
    assert agent.released(4, 4) and not agent.released(4, 3)
    assert agent.told_to_restart(3, 4) and not agent.told_to_restart(4, 4)


def program(kind: str, signals: Path, state: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "KUBEDL_SIGNALS_DIR": str(signals), "KUBEDL_STATE_DIR": str(state)}
    return subprocess.Popen([sys.executable, "-m", "kubedl_py.agent", kind], env=env, stdout=subprocess.PIPE, text=True)


def write(directory: Path, name: str, value: int) -> None:
    """As the kubelet writes a downward API file: atomically (a rename)."""
    temporary = directory / f".{name}"
    temporary.write_text(str(value))
    temporary.replace(directory / name)


def wait(process: subprocess.Popen[str], within: float) -> int | None:
    try:
        return process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return None


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    signals, state = tmp_path / "signals", tmp_path / "state"
    signals.mkdir()
    state.mkdir()
    for name, value in ((agent.ATTEMPT_FILE, 2), (agent.RELEASED_FILE, 2), (agent.CREATED_FILE, 2)):
        write(signals, name, value)
    return signals, state


def test_the_barrier_lets_a_new_pod_start_and_holds_a_restarted_one_until_its_attempt_is_released(
    dirs: tuple[Path, Path],
) -> None:
    signals, state = dirs
    assert wait(program("barrier", signals, state), 10) == 0  # the pod's first run: attempt 2, released
    assert (state / agent.POD_ATTEMPT_FILE).read_text().strip() == "2"
    held = program("barrier", signals, state)  # the pod restarted whole: attempt 3, not released
    try:
        assert wait(held, 0.5) is None
        assert (state / agent.POD_ATTEMPT_FILE).read_text().strip() == "3"
        write(signals, agent.RELEASED_FILE, 3)
        assert wait(held, 10) == 0
    finally:
        held.kill()
    assert held.stdout is not None and "attempt 3 released" in held.stdout.read()


def test_the_watcher_exits_86_once_the_job_is_past_the_pods_attempt(dirs: tuple[Path, Path]) -> None:
    signals, state = dirs
    (state / agent.POD_ATTEMPT_FILE).write_text("2\n")
    watcher = program("watcher", signals, state)
    try:
        assert wait(watcher, 0.5) is None
        started = time.monotonic()
        write(signals, agent.ATTEMPT_FILE, 3)
        assert wait(watcher, 10) == agent.RESTART_EXIT_CODE
        assert time.monotonic() - started < 2  # it looks every 0.1 s
    finally:
        watcher.kill()


def test_a_rank_left_in_crash_loop_back_off_past_the_bound_is_due_for_a_new_pod() -> None:
    """``in_place.stuck_in_back_off``: waiting in CrashLoopBackOff for longer than the bound since its last run
    ended (the kubelet's back-off doubles from 10 s to 5 minutes), the rank gets a new pod."""
    from datetime import UTC, datetime, timedelta

    from kubedl_py.controllers.failures.in_place import BACK_OFF_BOUND_SECONDS, stuck_in_back_off

    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

    def pod(reason: str, ended_ago: float) -> dict[str, object]:
        ended = (now - timedelta(seconds=ended_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {"state": {"waiting": {"reason": reason}}, "lastState": {"terminated": {"finishedAt": ended}}}
        return {"status": {"containerStatuses": [{"name": "pytorch", **status}]}}

    assert stuck_in_back_off(pod("CrashLoopBackOff", BACK_OFF_BOUND_SECONDS + 5), "pytorch", now) is not None
    assert stuck_in_back_off(pod("CrashLoopBackOff", BACK_OFF_BOUND_SECONDS - 5), "pytorch", now) is None
    assert stuck_in_back_off(pod("ContainerCreating", BACK_OFF_BOUND_SECONDS + 5), "pytorch", now) is None
