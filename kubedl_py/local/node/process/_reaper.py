"""Watchdog that kills every container process group when the cluster process dies, even by SIGKILL.

Why it exists: ``PR_SET_PDEATHSIG`` only reaches the *direct* child of the cluster. A container whose
command is ``sh -c "python train.py"`` or ``torchrun ...`` has grandchildren that would be orphaned and keep
running (holding ports and GPUs) after the cluster is gone. Each container runs in its own process group;
the cluster tells this watchdog ``+<pgid>`` / ``-<pgid>`` over a pipe, and when the pipe reaches EOF — which
the kernel guarantees when the cluster exits in any way, because nobody else holds the write end — the
watchdog SIGKILLs every group still registered and exits.

Run as a plain script (``python _reaper.py``), deliberately importing nothing of ours, so that it starts fast
and works whatever the state of the package. It lives in its own session so a terminal's Ctrl-C, which
reaches the cluster's process group, does not kill the watchdog before it has done its job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def _kill_all(groups: set[int]) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def main() -> None:
    groups: set[int] = set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(_sig: int, _frame: object) -> None:
        _kill_all(groups)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    for raw in sys.stdin.buffer:
        line = raw.strip()
        if not line:
            continue
        op, pgid = line[:1], int(line[1:])
        if op == b"+":
            groups.add(pgid)
        elif op == b"-":
            groups.discard(pgid)
    _kill_all(groups)


if __name__ == "__main__":
    main()
