"""``kubedl-py local up`` run as a user runs it, for tests that need a whole local cluster for a while: a
subprocess in a home of its own, ready once it prints its ``export KUBECONFIG=`` line, stopped with Ctrl-C.

Its output is read all the time it runs (kept in :attr:`LocalUpProcess.output`): a cluster whose log pipe is
full would stop in the middle of a write and look hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from kubedl_local.pins import cache_root

CLI = [sys.executable, "-m", "kubedl_py.cli"]


def user_env(home: Path) -> dict[str, str]:
    """A user's environment with ``home`` as HOME (so ``~/.kubedl-py`` is the test's own) and no cluster set.
    What was built for this machine (the real control plane, the pinned release's tables) is found where it
    is: ``KUBEDL_PY_CACHE`` names it, since the new home has no ``~/.cache``."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["KUBEDL_PY_CACHE"] = str(cache_root())
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class LocalUpProcess:
    """``kubedl-py local up ARGS`` (``argv`` replaces the command, e.g. a documented ``.venv/bin/kubedl-py``)."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path | None = None, argv: list[str] | None = None) -> None:
        self.argv = argv if argv is not None else [*CLI, "local", "up", *args]
        self.env = env
        self.cwd = cwd
        self.process: asyncio.subprocess.Process | None = None
        self.output: list[str] = []
        self._ready = asyncio.Event()
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group: stopped as one, never by a broad kill
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.process.stdout)),
            asyncio.create_task(self._read(self.process.stderr)),
        ]

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while raw := await stream.readline():
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            if line.startswith("export KUBECONFIG="):
                self._ready.set()

    async def ready(self, within: float = 60.0) -> None:
        """Wait for the ``export KUBECONFIG=`` line; fail with its output if it ends or takes too long."""
        assert self.process is not None
        waiter = asyncio.create_task(self._ready.wait())
        ended = asyncio.create_task(self.process.wait())
        try:
            await asyncio.wait({waiter, ended}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, ended):
                task.cancel()
        if not self._ready.is_set():
            tail = "\n".join(self.output[-30:])
            raise AssertionError(f"local up was not ready within {within} s (exit {self.process.returncode}):\n{tail}")

    async def stop(self) -> int:
        """Ctrl-C, as a user stops it; its exit code."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(self.process.wait(), 60)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        assert self.process.returncode is not None
        return self.process.returncode
