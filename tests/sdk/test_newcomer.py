"""A newcomer's hour, round two (issue 33): what got in the way of a new user, each as the user met it.

Every job and CLI command runs against a cluster of each tier with the real controller; the CLI as a real
subprocess, judged by its exit code and its output. The README's SDK snippet printing only index-0 pods,
``kubeflow.org`` jobs invisible to the CLI, a wrong ``-c``/``--index`` answered with the wrong log or a
"(yet)", a wait that ran out without the scheduler's reason, Ctrl-C on ``submit --follow`` leaving users
wondering whether the job went with it, ``get -w`` rows out of line, ``local`` alone, ``--for running``
echoed in lower case, describe's mixed time formats and unsorted events, the SDK telling Python users to
pass ``--kubeconfig``, and the kubeconfig a stopped ``local up`` left behind.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from kubedl_py.sdk import AsyncTrainingClient, ConfigurationError, pytorch_job, resolve_config
from kubedl_py.sdk.views import events_of
from tests.integration.conftest import Env, RunningController, replica
from tests.sdk.helpers import running_forever, succeeding
from tests.sdk.local_up import LocalUpProcess, user_env
from tests.sdk.test_cli import kubedl, one_line, write

CLI = [sys.executable, "-m", "kubedl_py.cli"]


# ----------------------------------------------------------------------------------------- logs


async def test_logs_of_every_pod_when_no_replica_is_named(cluster: Env, client: AsyncTrainingClient) -> None:
    """The README's snippet, ``client.logs("hello", replica=None)``: every pod, not index 0 of each type."""
    await client.submit(succeeding("every", workers=2))
    await client.wait("every", timeout=60)
    text = await client.logs("every", replica=None)
    pods = {line.split()[0] for line in text.splitlines()}
    assert pods == {"[every-master-0]", "[every-worker-0]", "[every-worker-1]"}, text
    # One replica's log is still index 0 unless told.
    assert "[simulated]" in await client.logs("every", replica="worker")


async def test_a_container_or_index_the_job_has_not_is_refused(cluster: Env, client: AsyncTrainingClient) -> None:
    await client.submit(succeeding("picky", workers=2))
    await client.wait("picky", timeout=60)
    nope, beyond, fine = await asyncio.gather(
        kubedl(cluster, "logs", "picky", "-c", "nope"),
        kubedl(cluster, "logs", "picky", "--replica", "worker", "--index", "5"),
        kubedl(cluster, "logs", "picky", "--replica", "worker", "--index", "1", "-c", "pytorch"),
    )
    assert (nope.code, nope.out) == (2, ""), nope
    assert one_line(nope.err) == (
        'kubedl-py: container "nope" is not valid for the Master pods of job "picky": use one of pytorch'
    )
    assert (beyond.code, beyond.out) == (2, ""), beyond
    line = one_line(beyond.err)
    assert 'job "picky" has 2 Worker replicas (indexes 0 to 1); index 5 is not one of them' in line, line
    assert fine.code == 0 and "exiting with code 0" in fine.out, fine


# ------------------------------------------------------------------------------------ kubeflow.org


def kf_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {},
            "pytorchReplicaSpecs": {
                "Master": replica(1, exit_code=0, run_seconds=0.5),
                "Worker": replica(1, exit_code=0, run_seconds=0.2),
            },
        },
    }


async def test_kubeflow_org_jobs_work_with_every_command(
    cluster: Env, kubeflow_controller: RunningController, tmp_path: Path
) -> None:
    path = write(tmp_path, "jobs.yaml", kf_job("kf-hello"), succeeding("ours").to_dict())
    submitted = await kubedl(cluster, "submit", path, "--wait", "--timeout", "60")
    assert submitted.code == 0, submitted.err
    assert submitted.out.splitlines() == [
        "pytorchjob.kubeflow.org/kf-hello created",
        "pytorchjob.training.kubedl.io/ours created",
        "pytorchjob.kubeflow.org/kf-hello succeeded",
        "pytorchjob.training.kubedl.io/ours succeeded",
    ]

    listed, only_kf, only_ours, described, logs, waited = await asyncio.gather(
        kubedl(cluster, "get"),
        kubedl(cluster, "get", "--kind", "pytorchjobs.kubeflow.org"),
        kubedl(cluster, "get", "--kind", "pytorchjobs.training.kubedl.io"),
        kubedl(cluster, "describe", "kf-hello"),
        kubedl(cluster, "logs", "kf-hello"),
        kubedl(cluster, "wait", "kf-hello", "--for", "succeeded"),
    )
    rows = [line.split()[:3] for line in listed.out.splitlines()[1:]]
    assert rows == [["ours", "PyTorchJob", "Succeeded"], ["kf-hello", "PyTorchJob.kubeflow.org", "Succeeded"]]
    assert [line.split()[0] for line in only_kf.out.splitlines()[1:]] == ["kf-hello"], only_kf
    assert [line.split()[0] for line in only_ours.out.splitlines()[1:]] == ["ours"], only_ours
    assert described.code == 0 and "Kind:         PyTorchJob.kubeflow.org" in described.out, described
    assert "kf-hello-master-0" in described.out
    assert {line.split()[0] for line in logs.out.splitlines()} == {"[kf-hello-master-0]", "[kf-hello-worker-0]"}
    assert (waited.code, waited.out.strip()) == (0, "pytorchjob.kubeflow.org/kf-hello condition met (Succeeded)")

    deleted = await kubedl(cluster, "delete", "kf-hello", "--wait", "--timeout", "30")
    assert (deleted.code, deleted.out.strip()) == (0, 'pytorchjob.kubeflow.org "kf-hello" deleted'), deleted


# ------------------------------------------------------------------------------------- waiting


async def test_a_wait_that_runs_out_says_why_the_pods_are_pending(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    huge = pytorch_job("huge", "busybox", ["python", "train.py"], workers=0, resources={"cpu": 100000})
    path = write(tmp_path, "huge.yaml", huge.to_dict())
    run = await kubedl(cluster, "submit", path, "--wait", "--timeout", "5")
    assert run.code == 3, run
    line = one_line(run.err)
    assert "timed out after 5s waiting for" in line and "pod huge-master-0 is Pending: 0/" in line, line
    assert "Insufficient cpu" in line, line


async def test_wait_echoes_the_condition_as_kubernetes_spells_it(cluster: Env, client: AsyncTrainingClient) -> None:
    await client.submit(running_forever("echo"))
    run = await kubedl(cluster, "wait", "echo", "--for", "running", "--timeout", "30")
    assert (run.code, run.out.strip()) == (0, "pytorchjob.training.kubedl.io/echo condition met (Running)"), run


async def test_ctrl_c_on_submit_follow_says_the_job_keeps_running(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    path = write(tmp_path, "long.yaml", running_forever("long").to_dict())
    process = await asyncio.create_subprocess_exec(
        *CLI, "submit", path, "--follow", "--kubeconfig", str(cluster.kubeconfig_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        first = await asyncio.wait_for(process.stdout.readline(), 30)
        assert first.decode().strip() == "pytorchjob.training.kubedl.io/long created"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 130
    line = one_line(err.decode())
    assert "interrupted" in line and "long keeps running" in line and "kubedl-py delete" in line, line
    assert (await client.get("long")).name == "long"


async def test_get_watch_on_an_empty_namespace_keeps_its_columns_in_line(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        *CLI, "get", "-w", "--kubeconfig", str(cluster.kubeconfig_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    try:
        path = write(tmp_path, "job.yaml", succeeding("a-longer-job-name").to_dict())
        assert (await kubedl(cluster, "submit", path)).code == 0
        while not (len(seen) > 1 and seen[-1].split()[2] == "Succeeded"):
            raw = await asyncio.wait_for(process.stdout.readline(), 60)
            assert raw, f"get -w ended: {seen}"
            seen.append(raw.decode().rstrip("\n"))
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 30)
    header = seen[0]
    assert header.split() == ["NAME", "KIND", "STATE", "ACTIVE/SUCCEEDED/FAILED", "AGE"], seen
    for column in ("KIND", "STATE", "ACTIVE/SUCCEEDED/FAILED", "AGE"):
        at = header.index(column)
        assert all(row[at - 1] == " " and row[at] != " " for row in seen[1:]), (column, seen)


# ---------------------------------------------------------------------------------------- describe


async def test_describe_prints_times_one_way_and_events_oldest_first(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    path = write(tmp_path, "job.yaml", succeeding("timed").to_dict())
    assert (await kubedl(cluster, "submit", path, "--wait", "--timeout", "60")).code == 0
    run = await kubedl(cluster, "describe", "timed")
    assert run.code == 0, run
    head = run.out.split("Replica Statuses:")[0]
    assert "+00:00" not in head, head
    for field in ("Created:", "Start Time:", "Completed:"):
        line = next(row for row in head.splitlines() if row.startswith(field))
        when = line[len(field) :].split()[0]
        assert len(when) == 20 and when.endswith("Z"), line  # 2026-01-02T03:04:05Z


def test_events_are_ordered_by_time_whatever_their_precision() -> None:
    job = succeeding("j")
    job.metadata.uid = "u"
    job.metadata.creation_timestamp = "2026-01-01T00:00:00Z"

    def event(name: str, **times: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "involvedObject": {"uid": "u"}, **times}

    events = [
        event("later", lastTimestamp="2026-01-01T00:00:06Z"),
        event("micro", eventTime="2026-01-01T00:00:05.500000Z"),
        event("offset", lastTimestamp="2026-01-01T01:00:04+01:00"),  # 00:00:04Z
        event("first", lastTimestamp="2026-01-01T00:00:01Z"),
    ]
    assert [e["metadata"]["name"] for e in events_of(job, [], [], events)] == ["first", "offset", "micro", "later"]


# ------------------------------------------------------------------------------- configuration


def test_the_sdk_speaks_python_and_the_cli_flags(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    try:
        resolve_config()
    except ConfigurationError as exc:
        python = str(exc)
    try:
        resolve_config(command_line=True)
    except ConfigurationError as exc:
        flags = str(exc)
    assert "pass kubeconfig=" in python and "--kubeconfig" not in python, python
    assert "pass --kubeconfig" in flags and "kubeconfig=" not in flags, flags
    local = tmp_path / ".kubedl-py" / "local.kubeconfig"
    local.parent.mkdir()
    local.write_text("{}")
    try:
        resolve_config()
    except ConfigurationError as exc:
        python = str(exc)
    assert f'pass kubeconfig="{local}"' in python and "--kubeconfig" not in python, python


async def test_local_alone_names_its_commands() -> None:
    run = await kubedl(None, "local")
    assert run.code == 2
    assert "local_command" not in run.err and "choose a command" in run.err and "\n  up " in run.err, run.err


async def test_a_stopped_local_up_takes_its_kubeconfig_with_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    cluster = LocalUpProcess("--runtime", "simulated", env=env)
    await cluster.start()
    try:
        await cluster.ready()
        kubeconfig = home / ".kubedl-py" / "local.kubeconfig"
        assert kubeconfig.is_file()
    finally:
        assert await cluster.stop() == 0
    assert not kubeconfig.exists(), "the stopped cluster's kubeconfig was left behind"
    run = await kubedl(None, "get", env=env)
    assert run.code == 2
    line = one_line(run.err)
    assert "no cluster configured" in line and "a `kubedl-py local up` cluster wrote" not in line, line
