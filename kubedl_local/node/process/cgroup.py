"""A cgroup (v2) per container process, so that nothing a container started outlives it.

Why: a process group is what the runner signals and kills, but a program may leave it on purpose
(``setsid``, ``start_new_session``): PaddlePaddle's launcher starts its trainers that way, and such a trainer
kept running for minutes after its pod was deleted. A real runtime has the container's cgroup (and PID
namespace) for that. Here each container's first process moves itself, between fork and exec, into a cgroup
of its own, so everything it ever starts is in it too (a process cannot leave a cgroup it is not allowed to
write elsewhere); when the container ends, ``cgroup.kill`` (Linux 5.14+) SIGKILLs all of it at once and the
empty cgroup is removed.

Where: under this process's own cgroup in the cgroup v2 hierarchy (``/sys/fs/cgroup`` on a v2-only host,
``/sys/fs/cgroup/unified`` on a hybrid one), as ``kubedl-py-<pid>-<random>/<container>``. No controller is
enabled (nothing is limited: this is containment, not accounting), which is why it works under a parent
that has processes of its own. It needs write access there (root, or a delegated subtree); without it
:func:`containment_root` returns None and containers are contained by their process group only, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

#: how long :meth:`Scope.remove` waits for a killed cgroup to empty before leaving it for the runtime's end
_EMPTY_TIMEOUT = 5.0


def _cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted, from ``/proc/self/mounts``."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _own_cgroup(mount: Path) -> Path | None:
    """This process's cgroup in the v2 hierarchy (the ``0::<path>`` line of ``/proc/self/cgroup``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    return None


def containment_root() -> Path | None:
    """A new, empty cgroup for one runtime's containers, or None when cgroups cannot contain them here
    (no cgroup v2, no write access, or a kernel without ``cgroup.kill``)."""
    mount = _cgroup2_mount()
    own = _own_cgroup(mount) if mount is not None else None
    if own is None:
        return None
    root = own / f"kubedl-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir()
    except OSError as exc:
        log.info("containers are contained by their process group only: cannot create a cgroup in %s (%s)", own, exc)
        return None
    if not (root / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            root.rmdir()
        log.info("containers are contained by their process group only: this kernel has no cgroup.kill")
        return None
    return root


class Scope:
    """One container's cgroup: its first process joins it (:meth:`join`, in the child before exec)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._procs = os.fsencode(path / "cgroup.procs")

    @classmethod
    def create(cls, root: Path, name: str) -> Scope | None:
        path = root / name
        try:
            path.mkdir()
        except OSError as exc:
            log.warning("no cgroup for container %s (%s): it is contained by its process group only", name, exc)
            return None
        return cls(path)

    def join(self) -> None:  # pragma: no cover - runs in the forked child, between fork and exec
        """Move the calling process into this cgroup: raw syscalls only, it runs between fork and exec."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (those that left the container's process group included)."""
        with contextlib.suppress(FileNotFoundError):
            (self.path / "cgroup.kill").write_text("1")

    async def remove(self) -> None:
        """Kill what is left and remove the cgroup once empty (the kernel empties it within milliseconds; a
        cgroup that stays busy is left for the runtime's end, :func:`remove_tree`)."""
        self.kill()
        await asyncio.to_thread(_rmdir_when_empty, self.path, time.monotonic() + _EMPTY_TIMEOUT)


def _rmdir_when_empty(path: Path, deadline: float) -> None:
    """rmdir ``path``, retrying while its killed processes exit (EBUSY) until ``deadline``."""
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                log.warning("cgroup %s not removed (%s): processes in it did not exit", path, exc)
                return
            time.sleep(0.01)


def remove_tree(root: Path) -> None:
    """Kill everything under ``root`` and remove it, children first (best effort: what stays busy stays)."""
    if not root.is_dir():
        return
    with contextlib.suppress(OSError):
        (root / "cgroup.kill").write_text("1")  # the cgroup and all its descendants
    children = [child for child in root.iterdir() if child.is_dir()]
    deadline = time.monotonic() + _EMPTY_TIMEOUT
    for path in [*children, root]:
        _rmdir_when_empty(path, deadline)
