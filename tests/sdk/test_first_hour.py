"""The first hour with ``kubedl-py``: what a new user meets, answered in one line and at once.

A stopped cluster, a garbage kubeconfig, a busy port, a closed pipe, a second ``local up`` over a running
one's kubeconfig, ``--version``, ``--help``, ``get -w``, a bad ``--image``: each is run as a user would (a
real subprocess) and judged by its exit code and its output lines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

import kubedl_py
from kubedl_py.sdk import AsyncTrainingClient
from tests.integration.conftest import Env
from tests.sdk.helpers import running_forever, succeeding
from tests.sdk.test_cli import Run, kubedl, one_line, write

CLI = [sys.executable, "-m", "kubedl_py.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig_for(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(home)
    return env


async def closed_stdout(*args: str) -> Run:
    """Run the CLI with its stdout a pipe whose reader has gone, as ``kubedl-py ... | head -1`` once head
    has exited: the first write meets a closed pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        process = await asyncio.create_subprocess_exec(*CLI, *args, stdout=write_end, stderr=asyncio.subprocess.PIPE)
    finally:
        os.close(write_end)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Run(process.returncode, "", err.decode())


# ------------------------------------------------------------------------------------- without a cluster


async def test_version_is_the_packages() -> None:
    run = await kubedl(None, "--version")
    assert (run.code, run.out.strip()) == (0, f"kubedl-py {kubedl_py.__version__}")


async def test_help_speaks_to_users_not_maintainers() -> None:
    run = await kubedl(None, "--help")
    assert run.code == 0
    text = run.out
    for internal in ("``", "argparse", "_build_parser", "handlers return", "subcommand a small function"):
        assert internal not in text, f"--help shows an internal docstring ({internal!r}):\n{text}"
    assert "local up" in text and "submit" in text


async def test_a_stopped_cluster_answers_at_once_in_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there any more: a cluster that was stopped
    config = kubeconfig_for(tmp_path / "stopped.kubeconfig", f"https://127.0.0.1:{port}")
    # What the command costs before it connects (the interpreter, the imports, reading a kubeconfig), measured
    # here: on a loaded machine (CI builds beside the tests) that alone is seconds, and is not the point.
    started = time.monotonic()
    baseline_run = await kubedl(None, "get", "--kubeconfig", str(tmp_path / "missing.kubeconfig"))
    baseline = time.monotonic() - started
    assert baseline_run.code != 0
    started = time.monotonic()
    run = await kubedl(None, "get", "--kubeconfig", str(config))
    elapsed = time.monotonic() - started - baseline
    assert run.code == 1, run.err
    line = one_line(run.err)
    assert f"https://127.0.0.1:{port}" in line and "kubedl-py local up" in line, line
    assert "ClientConnectorError" not in line and "ConnectionKey" not in line, line
    assert elapsed < 1.5, f"took {elapsed:.1f}s more than a command that never connects ({baseline:.1f}s)"


@pytest.mark.parametrize(
    "content",
    [b"apiVersion: v1\nclusters: [\n  - {name: x\n::: garbage\n", bytes(range(256)), b"just a string\n"],
    ids=["bad-yaml", "binary", "not-a-mapping"],
)
async def test_a_garbage_kubeconfig_is_one_line(tmp_path: Path, content: bytes) -> None:
    config = tmp_path / "garbage.kubeconfig"
    config.write_bytes(content)
    run = await kubedl(None, "get", "--kubeconfig", str(config))
    assert run.code == 2
    line = one_line(run.err)
    assert line.startswith(f"kubedl-py: cannot read kubeconfig {config}"), line


async def test_a_closed_pipe_ends_the_command_quietly() -> None:
    run = await closed_stdout("manifests")
    assert run.err == "" and run.code == 141, (run.code, run.err)


@pytest.mark.parametrize("image", ["my image:1.0", "Registry.example.com/ML/Trainer:1", "", "kubedl-py:", "a//b"])
async def test_manifests_refuses_an_invalid_image(image: str) -> None:
    run = await kubedl(None, "manifests", "--image", image)
    assert run.code == 2 and run.out == ""
    line = one_line(run.err)
    assert line.startswith(f"kubedl-py: --image {image!r}") and "e.g." in line, line


@pytest.mark.parametrize(
    "image",
    [
        "kubedl-py:0.1.0",
        "registry.example.com/ml/kubedl-py:0.1.0",
        "localhost:5000/kubedl-py",
        "Registry.Example.com:443/ml/kubedl_py__x:v1.2-rc_3",
        "ghcr.io/org/kubedl-py@sha256:" + "a" * 64,
    ],
)
async def test_manifests_accepts_valid_images(image: str) -> None:
    run = await kubedl(None, "manifests", "--image", image)
    assert run.code == 0, run.err
    assert f"image: {image}" in run.out


# -------------------------------------------------------------------------------------------- local up


class LocalUp:
    """``kubedl-py local up`` as a user runs it: a subprocess, stopped with Ctrl-C (SIGINT)."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.args = args
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *CLI,
            "local",
            "up",
            "--runtime",
            "simulated",
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )

    async def ready(self, within: float = 30.0) -> str:
        """The ``export KUBECONFIG=...`` line, once printed."""
        assert self.process is not None and self.process.stdout is not None
        async with asyncio.timeout(within):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    err = await self.process.stderr.read() if self.process.stderr else b""
                    raise AssertionError(f"local up ended before it was ready: {self.lines} {err.decode()}")
                line = raw.decode().rstrip("\n")
                self.lines.append(line)
                if line.startswith("export KUBECONFIG="):
                    return line

    async def stop(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        await asyncio.wait_for(self.process.communicate(), 30)
        assert self.process.returncode is not None
        return self.process.returncode


@pytest.fixture
async def home(tmp_path: Path) -> AsyncIterator[Path]:
    (tmp_path / "home").mkdir()
    yield tmp_path / "home"


async def test_local_up_prints_the_export_line_and_will_not_take_over_a_running_clusters_kubeconfig(
    home: Path,
) -> None:
    env = clean_env(home)
    config = home / "cluster.kubeconfig"
    first = LocalUp("--kubeconfig", str(config), env=env)
    await first.start()
    try:
        assert await first.ready() == f"export KUBECONFIG={config}"
        server = yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"]
        before = config.read_text()

        second = await asyncio.create_subprocess_exec(
            *CLI, "local", "up", "--runtime", "simulated", "--kubeconfig", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        _, err = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 2
        line = one_line(err.decode())
        assert str(config) in line and server in line and "--kubeconfig" in line, line
        assert config.read_text() == before, "the running cluster's kubeconfig was kept"

        # A busy --port is one line too.
        port = int(server.rsplit(":", 1)[1])
        busy = await asyncio.create_subprocess_exec(
            *CLI, "local", "up", "--runtime", "simulated", "--port", str(port), "--kubeconfig", str(home / "other"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        _, err = await asyncio.wait_for(busy.communicate(), 30)
        assert busy.returncode == 2
        line = one_line(err.decode())
        assert f"--port {port}" in line and "in use" in line, line
    finally:
        assert await first.stop() == 0

    # The first cluster is gone; its kubeconfig is stale and is replaced by the next cluster's.
    third = LocalUp("--kubeconfig", str(config), env=env)
    await third.start()
    try:
        assert await third.ready() == f"export KUBECONFIG={config}"
        assert yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"] != server
    finally:
        assert await third.stop() == 0


# ------------------------------------------------------------------------------------------ on a cluster


async def test_logs_into_a_closed_pipe_end_quietly(cluster: Env, client: AsyncTrainingClient) -> None:
    await client.submit(succeeding("piped"))
    await client.wait("piped", timeout=30)
    run = await closed_stdout("logs", "piped", "--kubeconfig", str(cluster.kubeconfig_path))
    assert run.err == "" and run.code == 141, (run.code, run.err)


async def test_get_watch_prints_the_table_then_a_row_per_change_until_ctrl_c(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path
) -> None:
    await client.submit(running_forever("already"))
    process = await asyncio.create_subprocess_exec(
        *CLI, "get", "-w", "--kubeconfig", str(cluster.kubeconfig_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []

    async def line() -> str:
        raw = await asyncio.wait_for(process.stdout.readline(), 30)  # type: ignore[union-attr]
        if not raw:
            err = await process.stderr.read() if process.stderr else b""
            raise AssertionError(f"get -w ended by itself ({process.returncode}): {err.decode()!r}; printed {seen}")
        seen.append(raw.decode().rstrip("\n"))
        return seen[-1]

    try:
        assert (await line()).split() == ["NAME", "KIND", "STATE", "ACTIVE/SUCCEEDED/FAILED", "AGE"]
        assert (await line()).split()[:2] == ["already", "PyTorchJob"]
        path = write(tmp_path, "new.yaml", succeeding("arrives").to_dict())
        assert (await kubedl(cluster, "submit", path)).code == 0
        # A row per change of the new job, until it has succeeded.
        while not (seen[-1].split()[:1] == ["arrives"] and seen[-1].split()[2] == "Succeeded"):
            row = (await line()).split()
            assert row[0] in ("arrives", "already"), seen
        states = [row.split()[2] for row in seen[2:] if row.split()[0] == "arrives"]
        assert states[0] in ("Pending", "Created") and states[-1] == "Succeeded", states
        # Columns line up with the table's header.
        assert all(row.index(row.split()[1]) == seen[0].index("KIND") for row in seen[1:]), seen
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 130 and err.decode() == "", (process.returncode, err.decode())
