"""The ``kubedl-py`` job commands as real subprocesses against the embedded cluster: output and exit codes.

The cluster and the controller run in this test's event loop, so the CLI runs through asyncio's subprocess
API (a blocking ``subprocess.run`` would freeze the cluster it talks to).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api.kinds import all_kinds
from kubedl_py.kube.client import KubeClient
from kubedl_py.sdk import AsyncTrainingClient
from tests.integration.conftest import Env, RunningController, fast_options
from tests.sdk.helpers import failing, running_forever, succeeding


@dataclass
class Run:
    code: int
    out: str
    err: str


async def kubedl(cluster: Env | None, *args: str, env: dict[str, str] | None = None) -> Run:
    argv = [sys.executable, "-m", "kubedl_py.cli", *args]
    if cluster is not None:
        argv += ["--kubeconfig", str(cluster.kubeconfig_path)]
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or dict(os.environ),
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


def write(tmp_path: Path, name: str, *docs: dict[str, object]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs)))
    return str(path)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


async def test_cli_success_path(cluster: Env, client: AsyncTrainingClient, tmp_path: Path) -> None:
    path = write(tmp_path, "job.yaml", succeeding("cli-ok", host_network=True).to_dict())
    submitted = await kubedl(cluster, "submit", path, "--wait", "--timeout", "30")
    assert submitted.code == 0, submitted.err
    assert submitted.out.splitlines() == [
        "pytorchjob.training.kubedl.io/cli-ok created",
        "pytorchjob.training.kubedl.io/cli-ok succeeded",
    ]

    table, as_json, described, logs, master = await asyncio.gather(
        kubedl(cluster, "get"),
        kubedl(cluster, "get", "cli-ok", "-o", "json"),
        kubedl(cluster, "describe", "cli-ok"),
        kubedl(cluster, "logs", "cli-ok"),
        kubedl(cluster, "logs", "cli-ok", "--replica", "worker", "--index", "0"),
    )
    header, row = table.out.splitlines()
    assert header.split() == ["NAME", "KIND", "STATE", "ACTIVE/SUCCEEDED/FAILED", "AGE"]
    assert row.split()[:4] == ["cli-ok", "PyTorchJob", "Succeeded", "0/2/0"]
    assert json.loads(as_json.out)["metadata"]["name"] == "cli-ok"

    assert described.code == 0, described.err
    for needle in ("State:        Succeeded", "Network:      host", "JobSucceeded", "cli-ok-master-0", "Events:"):
        assert needle in described.out
    lines = described.out.splitlines()
    pod_line = next(line for line in lines if line.strip().startswith("cli-ok-master-0"))
    _name, node, phase, _restarts, host_port, service, target = pod_line.split()
    assert node in cluster.node_names and host_port.isdigit()
    assert (phase, service, target) == ("Succeeded", "cli-ok-master-0", host_port)
    # the Worker is dialed by nobody: no Service, shown as "-"
    worker_line = next(line for line in lines if line.strip().startswith("cli-ok-worker-0"))
    assert worker_line.split()[-2:] == ["-", "-"]

    assert {line.split()[0] for line in logs.out.splitlines()} == {"[cli-ok-master-0]", "[cli-ok-worker-0]"}
    assert master.out.splitlines()[-1] == "[simulated] container pytorch exiting with code 0"

    deleted = await kubedl(cluster, "delete", "cli-ok", "--wait", "--timeout", "10")
    assert (deleted.code, deleted.out.strip()) == (0, 'pytorchjob.training.kubedl.io "cli-ok" deleted')
    gone = await kubedl(cluster, "get", "cli-ok")
    assert gone.code == 1 and 'job "cli-ok" not found' in one_line(gone.err)


async def test_cli_failed_job_exits_1_with_the_reason(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    path = write(tmp_path, "crash.yaml", failing("cli-crash").to_dict())
    run = await kubedl(cluster, "submit", path, "--follow", "--timeout", "30")
    assert run.code == 1
    assert "[cli-crash-master-0] [simulated] container pytorch exiting with code 3" in run.out
    line = one_line(run.err)
    assert f"PyTorchJob {cluster.namespace}/cli-crash failed: ReplicaFailed:" in line and "exited with code 3" in line
    again = await kubedl(cluster, "wait", "cli-crash")
    assert again.code == 1 and "ReplicaFailed" in one_line(again.err)


async def test_cli_wait_times_out_with_exit_3(cluster: Env, client: AsyncTrainingClient) -> None:
    await client.submit(running_forever("cli-slow"))
    run = await kubedl(cluster, "wait", "cli-slow", "--for", "condition=Succeeded", "--timeout", "1")
    assert run.code == 3
    expected = f"timed out after 1s waiting for {cluster.namespace}/cli-slow to be Succeeded; last state"
    assert expected in one_line(run.err)
    running = await kubedl(cluster, "wait", "cli-slow", "--for", "Running", "--timeout", "20")
    assert (running.code, running.out.strip()) == (0, "pytorchjob.training.kubedl.io/cli-slow condition met (Running)")


async def test_cli_invalid_input_exits_2_naming_the_field(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    deployment = write(tmp_path, "deploy.yaml", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}})
    bad = succeeding("cli-bad").to_dict()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = -1
    bad_field = write(tmp_path, "bad.yaml", bad)
    wrong_kind, bad_run, missing, bad_flag, debug = await asyncio.gather(
        kubedl(cluster, "submit", deployment),
        kubedl(cluster, "submit", bad_field, "--wait"),
        kubedl(cluster, "submit", str(tmp_path / "nope.yaml")),
        kubedl(cluster, "wait", "x", "--for", "Done"),
        kubedl(cluster, "--debug", "submit", deployment),
    )
    assert wrong_kind.code == 2
    assert one_line(wrong_kind.err) == (
        f"kubedl-py: invalid {deployment}: kind: 'Deployment' is not a training job kind; use one of "
        + ", ".join(plugin.kind for plugin in all_kinds())
    )
    assert bad_run.code == 2
    assert "spec.pytorchReplicaSpecs.Worker.replicas: must be >= 0" in one_line(bad_run.err)
    assert missing.code == 2 and "cannot read" in one_line(missing.err)
    assert bad_flag.code == 2 and "unknown condition 'Done'" in one_line(bad_flag.err)
    assert debug.code == 2 and "Traceback" in debug.err
    assert await client.list() == []


async def test_cli_without_configuration_points_at_local_up(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    run = await kubedl(None, "get", env=env)
    assert run.code == 2
    line = one_line(run.err)
    assert "pass --kubeconfig" in line and "`kubedl-py local up`" in line, line


async def test_cli_submit_uses_the_files_namespace_and_refuses_a_different_n(
    cluster: Env, kube: KubeClient, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    team_a, team_b = f"{kube.ns}-a", f"{kube.ns}-b"
    for namespace in (team_a, team_b):
        await create_namespace(kube, namespace)
    # A controller for the whole cluster: this test's jobs live in namespaces of their own.
    everywhere = RunningController(cluster, fast_options())
    await everywhere.start()
    try:
        in_team_a = succeeding("cli-team").to_dict()
        in_team_a["metadata"]["namespace"] = team_a
        path = write(tmp_path, "team.yaml", in_team_a)
        submitted = await kubedl(cluster, "submit", path, "--wait", "--timeout", "30")
        assert submitted.code == 0, submitted.err
        assert submitted.out.splitlines() == [
            "pytorchjob.training.kubedl.io/cli-team created",
            "pytorchjob.training.kubedl.io/cli-team succeeded",
        ]
        assert (await client.get("cli-team", namespace=team_a)).namespace == team_a

        # A file saying team-a with -n team-b is refused before anything is sent (as kubectl does).
        other = succeeding("cli-elsewhere").to_dict()
        other["metadata"]["namespace"] = team_a
        refused = await kubedl(cluster, "submit", write(tmp_path, "other.yaml", other), "-n", team_b, "--wait")
        assert refused.code == 2
        line = one_line(refused.err)
        assert f'"{team_a}"' in line and f'"{team_b}"' in line and "cli-elsewhere" in line
        for namespace in (team_a, team_b):
            assert "cli-elsewhere" not in [j.name for j in await client.list(namespace=namespace)]

        # A document without a namespace goes where -n says, and is waited for there.
        bare = succeeding("cli-bare").to_dict()
        assert "namespace" not in bare["metadata"]
        placed = await kubedl(cluster, "submit", write(tmp_path, "bare.yaml", bare), "-n", team_b, "--wait")
        assert placed.code == 0, placed.err
        assert (await client.get("cli-bare", namespace=team_b)).namespace == team_b
    finally:
        await everywhere.stop()


def test_cli_gang_scheduler_choices_are_the_controllers() -> None:
    from kubedl_py.cli.parser import GANG_SCHEDULERS as _GANG_SCHEDULERS
    from kubedl_py.controllers.gang import GANG_SCHEDULERS

    assert tuple(_GANG_SCHEDULERS) == tuple(GANG_SCHEDULERS)


async def test_cli_wait_for_failed_on_a_succeeded_job_says_so_and_exits_1(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    path = write(tmp_path, "job.yaml", succeeding("cli-fine").to_dict())
    assert (await kubedl(cluster, "submit", path, "--wait", "--timeout", "30")).code == 0
    run = await kubedl(cluster, "wait", "cli-fine", "--for", "Failed", "--timeout", "10")
    assert run.code == 1
    line = one_line(run.err)
    assert f"PyTorchJob {cluster.namespace}/cli-fine succeeded" in line and "will not become Failed" in line
    # Waiting for a state the job went through on its way is satisfied.
    assert (await kubedl(cluster, "wait", "cli-fine", "--for", "Running", "--timeout", "10")).code == 0


async def test_cli_describe_shows_only_this_jobs_events_with_their_age(
    cluster: Env, kube: KubeClient, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    first = failing("cli-again")
    path = write(tmp_path, "first.yaml", first.to_dict())
    assert (await kubedl(cluster, "submit", path, "--wait", "--timeout", "30")).code == 1
    described = await client.describe("cli-again")
    assert any(e["reason"] == "ReplicaFailed" for e in described.events)
    await client.delete("cli-again", wait=True, timeout=30)
    # Resubmitted under the same name: the predecessor's events (its failure, its pods') are not this job's.
    again = write(tmp_path, "again.yaml", succeeding("cli-again").to_dict())
    assert (await kubedl(cluster, "submit", again, "--wait", "--timeout", "30")).code == 0
    described = await client.describe("cli-again")
    uid = described.job.metadata.uid
    reasons = [e["reason"] for e in described.events]
    assert "ReplicaFailed" not in reasons, described.events
    assert all(
        (e.get("involvedObject") or {}).get("uid") == uid or (e.get("involvedObject") or {}).get("kind") == "Pod"
        for e in described.events
    )
    shown = await kubedl(cluster, "describe", "cli-again")
    assert shown.code == 0
    events = shown.out.split("Events:\n", 1)[1].splitlines()
    assert events[0].split() == ["AGE", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]
    assert all(re.match(r"\s+\d+[smhd]\s", row) for row in events[1:] if row.strip()), events


async def test_cli_delete_takes_several_names_and_goes_on_past_a_missing_one(
    cluster: Env, client: AsyncTrainingClient
) -> None:
    for name in ("del-a", "del-b"):
        await client.submit(running_forever(name))
    deleted = await kubedl(cluster, "delete", "del-a", "missing", "del-b", "--wait", "--timeout", "20")
    assert deleted.code == 1, deleted  # as kubectl: the missing one is said, the others are deleted
    assert deleted.out.splitlines() == [
        'pytorchjob.training.kubedl.io "del-a" deleted',
        'pytorchjob.training.kubedl.io "del-b" deleted',
    ], deleted
    assert 'job "missing" not found' in one_line(deleted.err)
    assert [j.name for j in await client.list()] == [], "both jobs are gone"


async def test_cli_usage_errors_print_the_commands_own_usage() -> None:
    wrong = await kubedl(None, "logs", "a", "b", "c", "--bogus")
    assert wrong.code == 2
    assert wrong.err.startswith("usage: kubedl-py logs "), wrong.err
    assert "unrecognized arguments: " in wrong.err and "--bogus" in wrong.err, wrong.err
    nested = await kubedl(None, "local", "node", "stop", "n1", "--bogus")
    assert nested.err.startswith("usage: kubedl-py local node stop "), nested.err
    for twice_or_never in (["submit"], ["submit", "a.yaml", "-f", "b.yaml"]):
        wrong = await kubedl(None, *twice_or_never)
        assert wrong.code == 2 and wrong.err.startswith("usage: kubedl-py submit "), wrong.err
        assert "give the jobs' file once: FILE or -f FILE" in wrong.err, wrong.err


async def test_cli_submit_takes_the_file_as_kubectl_does_too(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    """``kubedl-py submit -f job.yaml``, as a kubectl user types it, is ``submit job.yaml``."""
    path = write(tmp_path, "job.yaml", succeeding("cli-dash-f").to_dict())
    submitted = await kubedl(cluster, "submit", "-f", path, "--wait", "--timeout", "30")
    assert submitted.code == 0, submitted.err
    assert submitted.out.splitlines()[0] == "pytorchjob.training.kubedl.io/cli-dash-f created"
    assert [j.name for j in await client.list()] == ["cli-dash-f"]


async def test_cli_submit_follow_timeout_says_why_the_job_waits(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    del client  # the controller runs
    container = {
        "name": "pytorch",
        "image": "busybox",
        "command": ["python", "train.py"],
        "resources": {"requests": {"cpu": "100000"}},  # more than any node has
    }
    job = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "cli-big"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}},
    }
    run = await kubedl(cluster, "submit", write(tmp_path, "big.yaml", job), "--follow", "--timeout", "6")
    assert run.code == 3, run
    said = one_line(run.err)
    assert f"timed out after 6s following {cluster.namespace}/cli-big" in said, said
    assert "pod cli-big-master-0 is Pending: " in said and "Insufficient cpu" in said, said


async def test_cli_a_pod_template_typo_is_refused_before_sending_and_nothing_is_created(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    typo = succeeding("cli-typo").to_dict()
    container = typo["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["comand"] = container.pop("command")
    run = await kubedl(cluster, "submit", write(tmp_path, "typo.yaml", typo))
    assert run.code == 2, run
    said = one_line(run.err)
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].comand: is not a field of a Container" in said
    assert "(did you mean command?)" in said, said
    assert run.out == "" and await client.list() == []  # nothing was sent
    # the SDK refuses it the same way, before sending
    from kubedl_py.api.validation import JobValidationError

    with pytest.raises(JobValidationError, match=r"containers\[0\]\.comand"):
        await client.submit(typo)
    assert await client.list() == []
