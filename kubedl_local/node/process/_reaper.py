"""Watchdog that kills every container process group, and removes every engine container, when the cluster
process dies, even by SIGKILL.

Why it exists: ``PR_SET_PDEATHSIG`` only reaches the *direct* child of the cluster. A container whose
command is ``sh -c "python train.py"`` or ``torchrun ...`` has grandchildren that would be orphaned and keep
running (holding ports and GPUs) after the cluster is gone. Each container runs in its own process group;
the cluster tells this watchdog ``+<pgid>`` / ``-<pgid>`` over a pipe, and when the pipe reaches EOF — which
the kernel guarantees when the cluster exits in any way, because nobody else holds the write end — the
watchdog SIGKILLs every group still registered and exits.

Where containers run in cgroups (``cgroup.py``), the runtime registers the cgroup holding them as
``+g:<path>`` / ``-g:<path>``; on EOF every process in it and in its children is killed (``cgroup.kill``),
even one that left its process group, and the cgroups are removed.

Containers run by an engine (podman) are not our descendants at all: the engine's monitor (conmon) keeps
them alive when their client dies. The cluster registers them as ``+c:<id>`` / ``-c:<id>``, and on EOF the
watchdog runs the removal command it was started with (``python _reaper.py podman ... rm --force --time 0``)
with every id still registered appended.

Run as a plain script (``python _reaper.py [removal command...]``), deliberately importing nothing of ours,
so that it starts fast and works whatever the state of the package. It lives in its own session so a
terminal's Ctrl-C, which reaches the cluster's process group, does not kill the watchdog before it has done
its job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CONTAINER = b"c:"
CGROUP = b"g:"


def _kill_all(groups: set[int]) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _kill_cgroups(roots: set[str]) -> None:
    """cgroup.kill each root (which kills its descendants' processes too), then remove the container cgroups
    under it and the root, children first (the same as ``cgroup.remove_tree``; this script imports nothing)."""
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        with contextlib.suppress(OSError):
            (root / "cgroup.kill").write_text("1")
        children = [child for child in root.iterdir() if child.is_dir()]
        deadline = time.monotonic() + 5
        for path in [*children, root]:
            while path.exists() and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    path.rmdir()
                    break
                time.sleep(0.01)


def _remove_all(command: list[str], containers: set[str]) -> None:
    if command and containers:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*command, *sorted(containers)], capture_output=True, timeout=120, check=False)


def main() -> None:
    remove = sys.argv[1:]
    groups: set[int] = set()
    containers: set[str] = set()
    cgroups: set[str] = set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(_sig: int, _frame: object) -> None:
        _kill_all(groups)
        _kill_cgroups(cgroups)
        _remove_all(remove, containers)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    for raw in sys.stdin.buffer:
        line = raw.strip()
        if not line:
            continue
        op, what = line[:1], line[1:]
        if what.startswith(CGROUP):
            path = os.fsdecode(what[len(CGROUP) :])
            if op == b"+":
                cgroups.add(path)
            elif op == b"-":
                cgroups.discard(path)
        elif what.startswith(CONTAINER):
            name = what[len(CONTAINER) :].decode()
            if op == b"+":
                containers.add(name)
            elif op == b"-":
                containers.discard(name)
        elif op == b"+":
            groups.add(int(what))
        elif op == b"-":
            groups.discard(int(what))
    _kill_all(groups)
    _kill_cgroups(cgroups)
    _remove_all(remove, containers)


if __name__ == "__main__":
    main()
