"""Container processes: argv/env/workingDir, terminated states, stop with grace, logs, and no orphans."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from kubedl_local.node.process import (
    ContainerConfigError,
    ContainerSpec,
    ContainerStartError,
    PodRef,
    ProcessRuntime,
    build_argv,
    expand_vars,
)
from tests.local_process.conftest import pid_gone, wait_until

REPO = Path(__file__).resolve().parents[2]


def pod(name: str = "p") -> PodRef:
    return PodRef(namespace="ns", name=name, uid=uuid.uuid4().hex)


def sh(name: str, script: str, **kw: object) -> ContainerSpec:
    return ContainerSpec(name=name, command=["/bin/sh", "-c"], args=[script], **kw)  # type: ignore[arg-type]


def test_argv_follows_kubernetes_command_args_semantics() -> None:
    env = {"A": "1"}
    spec = ContainerSpec(name="c", command=["echo", "$(A)"], args=["$(B)", "$$(A)", "x$(A)y"])
    assert build_argv(spec, env) == ["echo", "1", "$(B)", "$(A)", "x1y"]
    assert expand_vars("$$$(A)", env) == "$1"
    with pytest.raises(ContainerConfigError, match="no command"):
        build_argv(ContainerSpec(name="c", args=["--flag"]), env)


async def test_exit_codes_become_terminated_states(runtime: ProcessRuntime) -> None:
    p = pod()
    ok = await (await runtime.start_container(p, sh("ok", "exit 0"))).wait()
    assert (ok.exit_code, ok.reason, ok.signal) == (0, "Completed", None)
    bad = await (await runtime.start_container(p, sh("bad", "exit 3"))).wait()
    assert (bad.exit_code, bad.reason) == (3, "Error")
    # "$$$$" is "$$" after Kubernetes' $(VAR) expansion ("$$" escapes "$"): the shell kills itself.
    killed = await (await runtime.start_container(p, sh("killed", "kill -9 $$$$"))).wait()
    assert (killed.exit_code, killed.signal, killed.reason) == (137, 9, "Error")
    d = killed.to_dict()
    assert d["exitCode"] == 137 and d["reason"] == "Error" and d["containerID"].startswith("process://")
    assert "startedAt" in d and "finishedAt" in d and "signal" not in d


async def test_env_working_dir_and_var_expansion(runtime: ProcessRuntime, tmp_path: Path) -> None:
    spec = ContainerSpec(
        name="c",
        command=["/bin/sh", "-c", 'echo "$GREETING $(WHO) $(pwd)"'],
        env={"GREETING": "hello", "WHO": "world"},
        working_dir=str(tmp_path),
        image="pytorch/pytorch:latest",
    )
    c = await runtime.start_container(pod(), spec)
    assert (await c.wait()).exit_code == 0
    assert [ln.text for ln in c.log.read()] == [f"hello world {tmp_path}"]


async def test_start_errors_are_reported_like_containerd(runtime: ProcessRuntime) -> None:
    with pytest.raises(ContainerStartError) as err:
        await runtime.start_container(pod(), ContainerSpec(name="c", command=["no-such-binary-kubedl"]))
    t = err.value.terminated
    assert (t.exit_code, t.reason) == (128, "StartError")
    assert "executable file not found" in (t.message or "")
    with pytest.raises(ContainerStartError, match="workingDir"):
        await runtime.start_container(pod(), ContainerSpec(name="c", command=["true"], working_dir="/nonexistent/x"))
    with pytest.raises(ContainerConfigError):
        await runtime.start_container(pod(), ContainerSpec(name="c", args=["x"]))


async def test_stop_sigterm_within_grace(runtime: ProcessRuntime) -> None:
    # The process handles SIGTERM and exits 0: a graceful stop reports Completed.
    c = await runtime.start_container(
        pod(), sh("c", "trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.05; done")
    )
    await wait_until(lambda: len(c.log.read()) >= 1, what="container up")
    t = await c.stop(grace_seconds=5)
    assert (t.exit_code, t.reason) == (0, "Completed")
    texts = [ln.text for ln in c.log.read()]
    # (dash may also report its foreground `sleep` as "Terminated": the signal went to the whole group)
    assert texts[0] == "up" and texts[-1] == "bye"


async def test_stop_escalates_to_sigkill_after_grace(runtime: ProcessRuntime) -> None:
    c = await runtime.start_container(pod(), sh("c", "trap '' TERM; echo up; while :; do sleep 0.05; done"))
    await wait_until(lambda: len(c.log.read()) >= 1, what="container up")
    start = time.monotonic()
    t = await c.stop(grace_seconds=0.5)
    elapsed = time.monotonic() - start
    assert (t.exit_code, t.signal) == (137, 9)
    assert 0.5 <= elapsed < 3


async def test_stop_reaches_the_whole_process_group(runtime: ProcessRuntime, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # sh forks a child (not exec): SIGTERM to the group reaches it; afterwards nothing of the group is left.
    c = await runtime.start_container(pod(), sh("c", f"sleep 300 & echo $! > {pidfile}; wait"))
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", what="child pid")
    child = int(pidfile.read_text())
    t = await c.stop(grace_seconds=5)
    assert t.exit_code == 128 + signal.SIGTERM
    await wait_until(lambda: pid_gone(child), what="grandchild gone")


async def test_main_exit_kills_leftover_group_members(runtime: ProcessRuntime, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    c = await runtime.start_container(pod(), sh("c", f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}; exit 0"))
    assert (await c.wait()).exit_code == 0
    await wait_until(lambda: pid_gone(int(pidfile.read_text())), what="background process killed")


def detached(pidfile: Path, seconds: int) -> str:
    """A script whose background ``sleep`` leaves the process group (``setsid``, as PaddlePaddle's launcher
    starts its trainers), then ends."""
    return f"{leave_group(pidfile, seconds)}; exit 0"


def leave_group(pidfile: Path | str, seconds: int) -> str:
    """Start a ``sleep`` that has left the process group, and wait until it has: it writes its pid itself,
    after ``setsid`` (written by the parent, the pid could name a process still in the group, killed with
    it, and the tests would pass without the cgroup)."""
    return (
        # $$$$: a container's command and args expand $(VAR) and turn $$ into $ (kubelet semantics)
        f"setsid /bin/sh -c 'echo $$$$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; exec sleep {seconds}' "
        f">/dev/null 2>&1 & while [ ! -s {pidfile} ]; do sleep 0.01; done"
    )


async def test_a_process_that_left_the_group_dies_with_its_container(runtime: ProcessRuntime, tmp_path: Path) -> None:
    if runtime.cgroup_root is None:
        pytest.skip("cgroup v2 is not writable here: containers are contained by their process group only")
    pidfile = tmp_path / "detached.pid"
    c = await runtime.start_container(pod(), sh("c", detached(pidfile, 300)))
    assert c.scope is not None and c.scope.path.parent == runtime.cgroup_root
    assert (await c.wait()).exit_code == 0
    pid = int(pidfile.read_text())
    await wait_until(lambda: pid_gone(pid), what="the detached process killed with its container")
    await wait_until(lambda: not c.scope.path.exists(), what="the container's cgroup removed")  # type: ignore[union-attr]

    # The contrast: contained by the process group only, the same detached process outlives its container.
    plain = ProcessRuntime(tmp_path / "plain", cgroups=False)
    await plain.start()
    escaped = 0
    try:
        c = await plain.start_container(pod(), sh("c", detached(tmp_path / "escaped.pid", 301)))
        assert (await c.wait()).exit_code == 0 and c.scope is None
        escaped = int((tmp_path / "escaped.pid").read_text())
        assert not pid_gone(escaped), "without a cgroup the detached process escapes the group kill"
    finally:
        await plain.close(grace_seconds=1)
        if escaped:
            os.kill(escaped, signal.SIGKILL)


async def test_a_container_that_cannot_join_its_cgroup_fails_to_start(
    runtime: ProcessRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubedl_local.node.process import cgroup

    # A cgroup that is gone by the time the child joins it (as if removed under us): a start error, like
    # containerd's when it cannot place a container, and no process left behind.
    monkeypatch.setattr(cgroup.Scope, "create", classmethod(lambda cls, root, name: cls(tmp_path / "gone")))
    real_root, runtime.cgroup_root = runtime.cgroup_root, tmp_path  # cgroups in use, whatever this host has
    try:
        with pytest.raises(ContainerStartError, match=r"could not join its cgroup .*gone") as failure:
            await runtime.start_container(pod(), sh("c", "sleep 300"))
    finally:
        runtime.cgroup_root = real_root
    assert failure.value.terminated.exit_code == 128 and failure.value.terminated.reason == "StartError"
    assert runtime.running() == []


async def test_the_runtimes_cgroups_are_gone_after_close(tmp_path: Path) -> None:
    rt = ProcessRuntime(tmp_path / "state")
    await rt.start()
    root = rt.cgroup_root
    if root is None:
        await rt.close()
        pytest.skip("cgroup v2 is not writable here: containers are contained by their process group only")
    pidfile = tmp_path / "detached.pid"
    await rt.start_container(pod(), sh("a", "sleep 300"))
    await rt.start_container(pod(), sh("b", f"{leave_group(pidfile, 302)}; wait"))
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", what="detached pid")
    assert len([child for child in root.iterdir() if child.is_dir()]) == 2
    await rt.close(grace_seconds=1)
    assert not root.exists()
    await wait_until(lambda: pid_gone(int(pidfile.read_text())), what="the detached process killed")


async def test_logs_tail_follow_and_previous(runtime: ProcessRuntime, tmp_path: Path) -> None:
    p = pod()
    gate = tmp_path / "go"
    first = await runtime.start_container(p, sh("c", "echo one; echo two >&2; exit 1"))
    await first.wait()
    script = f"echo a; echo b; while [ ! -e {gate} ]; do sleep 0.02; done; echo c; printf 'no-newline'"
    second = await runtime.start_container(p, sh("c", script), restart_count=1)
    await wait_until(lambda: len(second.log.read()) == 2, what="two lines")

    live = runtime.container_log(p, "c")
    assert live is second.log and not live.closed
    assert [ln.text for ln in live.read(tail_lines=1)] == ["b"]

    async def collect() -> list[str]:
        return [ln.text async for ln in live.follow(tail_lines=1)]

    follower = asyncio.create_task(collect())
    gate.touch()
    # follow() ends by itself when the process exits and its output is drained.
    assert await asyncio.wait_for(follower, 10) == ["b", "c", "no-newline"]
    assert (await second.wait()).exit_code == 0

    prev = runtime.container_log(p, "c", previous=True)
    lines = prev.read()
    assert [(ln.stream, ln.text) for ln in lines] == [("stdout", "one"), ("stderr", "two")]
    assert lines[0].timestamp.endswith("Z") and "T" in lines[0].timestamp
    assert prev.read_text(timestamps=True).splitlines()[0] == f"{lines[0].timestamp} one"
    assert [ln.text async for ln in prev.follow()] == ["one", "two"]
    with pytest.raises(FileNotFoundError, match="no logs"):
        runtime.container_log(pod("other"), "c")


async def test_long_lines_are_split_and_joined(runtime: ProcessRuntime) -> None:
    c = await runtime.start_container(
        pod(), ContainerSpec(name="c", command=[sys.executable, "-c", "print('x' * 100000); print('end')"])
    )
    await c.wait()
    raw = c.log.path.read_bytes().splitlines()
    assert any(b" stdout P " in r for r in raw)
    assert [len(ln.text) for ln in c.log.read()] == [100000, 3]


async def test_previous_missing_for_first_instance(runtime: ProcessRuntime) -> None:
    p = pod()
    await (await runtime.start_container(p, sh("c", "true"))).wait()
    with pytest.raises(FileNotFoundError, match="previous terminated container"):
        runtime.container_log(p, "c", previous=True)


_PARENT = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from pathlib import Path
    from kubedl_local.node.process import ContainerSpec, PodRef, ProcessRuntime, Sandbox, check_mount_sandbox

    async def main():
        state, pidfile = Path(sys.argv[1]), sys.argv[2]
        rt = ProcessRuntime(state)
        await rt.start()
        p = PodRef(namespace="ns", name="orphan", uid=uuid.uuid4().hex)
        # Through the namespace wrappers when available: PDEATHSIG must survive their execs.
        sandbox = Sandbox(hostname="orphan") if check_mount_sandbox(rootless=False) is None else None
        direct = await rt.start_container(p, ContainerSpec(name="a", command=["sleep", "300"]), sandbox=sandbox)
        # A shell that forks: its child is a grandchild of this process, out of PDEATHSIG's reach.
        shell = await rt.start_container(
            p, ContainerSpec(name="b", command=["/bin/sh", "-c", f"sleep 301 & echo $! > {pidfile}; wait"]))
        # One that left its process group (it writes its pid after setsid): only the container's cgroup holds it
        # (without cgroups it is not reported).
        detached = pidfile + ".detached"
        await rt.start_container(p, ContainerSpec(
            name="c", command=["/bin/sh", "-c", f"setsid /bin/sh -c 'echo $$$$ > {detached}.tmp && "
                               f"mv {detached}.tmp {detached}; exec sleep 302' >/dev/null 2>&1 & wait"]))
        for path in (pidfile, detached):
            while not Path(path).exists() or not Path(path).read_text().strip():
                await asyncio.sleep(0.02)
        pids = [direct.pid, shell.pid, int(Path(pidfile).read_text()), rt.watchdog.pid]
        if rt.cgroup_root is not None:
            pids.append(int(Path(detached).read_text()))
        print(*pids, flush=True)
        print(rt.cgroup_root or "-", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_no_process_outlives_a_sigkilled_parent(tmp_path: Path) -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PARENT,
        str(tmp_path / "state"),
        str(tmp_path / "grandchild.pid"),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(parent.stdout.readline(), 20)
        pids = [int(x) for x in line.split()]
        root = (await asyncio.wait_for(parent.stdout.readline(), 20)).decode().strip()
        # with cgroups, the fifth is the process that left its group
        assert len(pids) == (4 if root == "-" else 5), line
        assert not any(pid_gone(p) for p in pids), "all started"
        os.kill(parent.pid, signal.SIGKILL)
        await parent.wait()
        for p in pids:  # direct children (PDEATHSIG), the grandchildren (watchdog) and the watchdog itself
            await wait_until(lambda p=p: pid_gone(p), deadline_s=10, what=f"pid {p} gone after parent SIGKILL")
        if root != "-":
            assert not await asyncio.to_thread(Path(root).exists), "the watchdog removes the runtime's cgroups"
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
