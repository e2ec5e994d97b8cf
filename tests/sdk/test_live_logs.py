"""Live logs on the local clusters: a line a job prints reaches ``kubectl logs -f`` and ``kubedl-py logs -f``
within a second, on both control planes, from a process and from a container.

Run as a user runs it: ``kubedl-py local up --runtime container`` (a subprocess; its node runs the pods whose
image is in the local podman store in containers and the others as processes, through the same code as
``--runtime process``), a job submitted with ``kubedl-py submit``, and the two followers as subprocesses
whose lines are timed as they arrive. The job's program prints a burst of 300 lines (more than the 256 the
node agents used to hold back), then one line a second, each stamped with the time it was printed. Of the
stamped lines printed once a follower was streaming, :data:`LIVE_LINES` must arrive within :data:`WITHIN`
seconds of their stamp, and none later than :data:`JITTER` (a machine shared by several test runs delays a
process now and then; a follower that holds lines back delays them all, for ever).
Skipped without podman (the container job) or root (the container runtime's network).
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kubedl_local.image import BASE_IMAGE, INSTALL_HINT, Engine, ensure_base_image
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS
from tests.sdk.local_up import LocalUpProcess, user_env
from tests.sdk.test_cli import kubedl
from tests.tiers import EMBEDDED, KUBERNETES, require_tier

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason=f"podman is not installed ({INSTALL_HINT})"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the container runtime's pod network needs root"),
    pytest.mark.timeout(600),
]

KUBECTL = str(Path(sys.executable).parent / "kubectl")
#: the promise: a printed line is shown by a follower within this many seconds
WITHIN = 1.0
BURST = 300
#: stamped lines that must be seen live (within WITHIN) by each follower
LIVE_LINES = 3
#: no live line may be later than this (scheduling delays of a loaded machine, not a held-back line)
JITTER = 2 * WITHIN

PROGRAM = f"""
import time
for i in range({BURST}):
    print("burst", i, flush=True)
for i in range(120):
    time.sleep(1.0)
    print("tick", i, repr(time.time()), flush=True)
"""


@dataclass
class Follower:
    """A ``... logs -f`` subprocess and the lines it printed, each with the time it arrived."""

    name: str
    process: asyncio.subprocess.Process
    lines: list[tuple[float, str]] = field(default_factory=list)

    async def read(self) -> None:
        assert self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            self.lines.append((time.time(), raw.decode().rstrip("\n")))

    def burst(self) -> int:
        return sum(1 for _, line in self.lines if _words(line)[:1] == ["burst"])

    def live_delays(self) -> list[float]:
        """Delays of the stamped lines printed after the whole burst had arrived (the follower was streaming)."""
        burst_done = next((at for at, line in self.lines if _words(line)[:2] == ["burst", str(BURST - 1)]), None)
        if burst_done is None:
            return []
        delays = []
        for at, line in self.lines:
            words = _words(line)
            if words[:1] == ["tick"] and float(words[2]) > burst_done:
                delays.append(at - float(words[2]))
        return delays

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
        await asyncio.wait_for(self.process.wait(), 30)


def _words(line: str) -> list[str]:
    """The program's words of a line, without the ``[pod]`` prefix ``kubedl-py logs`` adds."""
    words = line.split()
    return words[1:] if words[:1] and words[0].startswith("[") else words


def job(name: str, image: str) -> dict[str, object]:
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "image": image, "command": ["python3", "-u", "-c", PROGRAM]}
                            ]
                        }
                    },
                }
            }
        },
    }


@pytest.fixture(scope="module")
def base_image() -> str:
    ensure_base_image(Engine("podman"), out=io.StringIO())
    return BASE_IMAGE


async def follow(name: str, *argv: str, env: dict[str, str]) -> Follower:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env
    )
    return Follower(name, process)


async def running(kubeconfig: Path, pod: str) -> bool:
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        try:
            found = await kube.get(PODS, pod, namespace="default")
        except Exception:
            return False
    return (found.get("status") or {}).get("phase") == "Running"


@pytest.mark.parametrize("control_plane", [EMBEDDED, KUBERNETES])
async def test_followers_show_each_line_within_a_second(control_plane: str, base_image: str, tmp_path: Path) -> None:
    require_tier(control_plane)
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    config = home / "local.kubeconfig"
    env["KUBECONFIG"] = str(config)
    cluster = LocalUpProcess(
        "--runtime", "container", "--control-plane", control_plane, "--kubeconfig", str(config),
        "--bridge", f"kdl{uuid.uuid4().hex[:6]}",
        "--pod-cidr", f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24",
        env=env,
    )  # fmt: skip
    followers: list[Follower] = []
    readers: list[asyncio.Task[None]] = []
    await cluster.start()
    try:
        await cluster.ready(within=180)
        jobs = {"in-a-container": base_image, "as-a-process": "kubedl.test/not-in-the-store:1"}
        path = tmp_path / "jobs.yaml"
        path.write_text(yaml.safe_dump_all([job(name, image) for name, image in jobs.items()]))
        submitted = await kubedl(None, "submit", str(path), env=env)
        assert submitted.code == 0, submitted.err
        for name in jobs:
            deadline = time.monotonic() + 120
            while not await running(config, f"{name}-master-0"):
                assert time.monotonic() < deadline, f"{name}-master-0 is not Running after 120 s"
                await asyncio.sleep(0.2)
            followers.append(await follow(f"kubectl {name}", KUBECTL, "logs", "-f", f"{name}-master-0", env=env))
            cli = [sys.executable, "-m", "kubedl_py.cli", "logs", name, "-f"]
            followers.append(await follow(f"kubedl-py {name}", *cli, env=env))
        readers = [asyncio.create_task(f.read()) for f in followers]
        deadline = time.monotonic() + 90
        while not all(sum(d < WITHIN for d in f.live_delays()) >= LIVE_LINES for f in followers):
            if time.monotonic() > deadline:
                seen = {f.name: (len(f.lines), f.burst(), f.live_delays()) for f in followers}
                raise AssertionError(f"followers did not see {LIVE_LINES} live lines in 90 s: {seen}")
            await asyncio.sleep(0.2)
        for follower in followers:
            words = [_words(line) for _, line in follower.lines]
            assert [w[1] for w in words if w[:1] == ["burst"]] == [str(i) for i in range(BURST)], follower.name
            delays = follower.live_delays()
            assert max(delays) < JITTER, f"{follower.name}: lines arrived {delays} s after they were printed"
    finally:
        for follower in followers:
            await follower.stop()
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        assert await cluster.stop() == 0
