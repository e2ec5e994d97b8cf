"""A failed job leaves something to debug, through the CLI as a user runs it (real subprocesses), on both
control planes: the failure's message names the replica and its exit code, ``logs`` says why it has nothing
and exits non-zero, ``logs --previous`` prints the failed rank's last lines (its pod replaced or deleted),
``describe`` shows the restarts counted and the attempts, and the job has a Warning event."""

from __future__ import annotations

import asyncio

from kubedl_py.sdk import AsyncTrainingClient, pytorch_job
from tests.integration.conftest import Env, eventually
from tests.sdk.helpers import ending
from tests.sdk.test_cli import kubedl


async def test_a_job_failing_by_its_backoff_limit_can_be_debugged(cluster: Env, client: AsyncTrainingClient) -> None:
    # The default restart policy (OnFailure: restarts in place), a rank that exits 1, backoffLimit 3.
    job = pytorch_job("failing", "busybox", ["python", "train.py"], backoff_limit=3, pod_annotations=ending(1, 0.2))
    await client.submit(job)
    waited = await kubedl(cluster, "wait", "failing", "--for", "Succeeded", "--timeout", "60")
    assert waited.code == 1, waited
    assert "BackoffLimitExceeded" in waited.err and "Master 0 exited with code 1" in waited.err, waited.err

    logs, master, previous, described = await asyncio.gather(
        kubedl(cluster, "logs", "failing"),
        kubedl(cluster, "logs", "failing", "--replica", "master"),
        kubedl(cluster, "logs", "failing", "--previous"),
        kubedl(cluster, "describe", "failing"),
    )
    assert logs.code == 1 and "has Failed" in logs.err and "--previous" in logs.err, logs
    assert master.code == 1 and "(yet)" not in master.err and "pods were deleted" in master.err, master
    assert previous.code == 0, previous
    header, *lines = previous.out.splitlines()
    assert header.startswith("==> failing-master-0 (Master 0): user failure Error, exit code 1"), header
    assert "[simulated] container pytorch exiting with code 1" in lines, previous.out
    text = described.out
    rows = {line.split()[0]: line.split() for line in text.split("Replica Statuses:\n")[1].splitlines()[1:2]}
    assert rows["Master"][4:6] == ["3", "0"], text  # RESTARTS (user) 3, INFRA RESTARTS 0
    assert "Failed Attempts:" in text and "User" in text, text
    events = (await client.describe("failing")).events
    assert any(e["type"] == "Warning" and e["reason"] == "BackoffLimitExceeded" for e in events), events


async def test_logs_previous_prints_a_replaced_ranks_last_lines(cluster: Env, client: AsyncTrainingClient) -> None:
    # ExitCode: a rank killed by a signal is replaced by a new pod, whose log does not have the old lines.
    job = pytorch_job(
        "replaced", "busybox", ["python", "train.py"], restart_policy="ExitCode", pod_annotations=ending(137, 0.3)
    )
    await client.submit(job)

    async def replaced() -> bool:
        current = await client.get("replaced")
        failures = (current.status.failures if current.status else None) or []
        return bool(failures)

    await eventually(replaced, within=60, what="a failure recorded")
    run = await kubedl(cluster, "logs", "replaced", "--previous", "--replica", "master")
    assert run.code == 0, run
    header, *lines = run.out.splitlines()
    assert header.startswith("==> replaced-master-0 (Master 0): user failure Error, exit code 137, signal 9"), header
    assert lines[-1] == "[simulated] container pytorch exiting with code 137", run.out
    job_now = await client.get("replaced")
    assert job_now.status is not None and job_now.status.replica_statuses is not None
    last = job_now.status.replica_statuses["Master"].last_failure
    assert last is not None and (last.failure_class, last.reason, last.exit_code) == ("User", "Error", 137)


async def test_logs_previous_says_when_there_is_nothing(cluster: Env, client: AsyncTrainingClient) -> None:
    await client.submit(pytorch_job("healthy", "busybox", ["python", "train.py"]))
    await client.wait("healthy", ["Running"], timeout=60)
    run = await kubedl(cluster, "logs", "healthy", "--previous")
    assert run.code == 1 and "no failed run" in run.err, run
