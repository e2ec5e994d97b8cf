"""The in-place restart agent: how the ranks of a job restarted whole in place are told, and held back.

``failurePolicy.restartScope: Job`` restarts every rank when one fails. In place (``restartMode`` Auto or
InPlace, docs/policies.md "Restart in place") that is the kubelet's ``RestartAllContainers`` (Kubernetes 1.37:
a container exit matching a rule with that action kills and removes every container of the pod, init
containers included, and starts them again in order, keeping the pod, its sandbox, IP, host port and volumes).
The failed rank's own exit triggers it in its pod; the healthy ranks must be told, and no rank of the new
attempt may run its program while a process of the old attempt still does (the new rendezvous must have no
member of the old one). The controller has no ``pods/exec`` right, so it speaks through each pod's
annotations, which the kubelet projects into a downward API volume within a second of a change:

- ``kubedl.io/restart-attempt``: the attempt the job is at (the controller raises it on a failure);
- ``kubedl.io/released-attempt``: the attempt every rank may run (raised once every pod has stopped its
  program of the one before).

Two small programs run in every pod, from the controller's image, with no rights (no API access) and no
root, each in a container the controller adds (``pods.build_pod``):

- the **barrier** (the last init container, so it runs again on every restart of the pod): it decides the
  attempt the pod is now at (:func:`next_attempt`: the pod's first run takes the one it was made at, every
  later run is at least one more than the one before, as every restart of the pod ends an attempt) and keeps it in an
  ``emptyDir`` (kept across the pod's restarts), then waits until that attempt is released (:func:`released`);
  the program starts after it;
- the **watcher** (a native sidecar, after the barrier): it exits with :data:`RESTART_EXIT_CODE`, which its
  restart rule turns into ``RestartAllContainers``, once the job's attempt is past the pod's
  (:func:`told_to_restart`).

The controller counts each pod's restarts by the barrier's ``restartCount`` (the kubelet adds one to every
container of a pod it restarts whole), so it knows when every pod has reached the new attempt, and releases
it. This module is the protocol's one source: names, paths and rules used by the controller, the simulated
node (which runs the two programs' decisions itself) and the programs below, which use nothing but the
standard library.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Final

#: the job's attempt, raised by the controller on a failure
ANNOTATION_ATTEMPT: Final = "kubedl.io/restart-attempt"
#: the attempt every rank may run, raised by the controller once every pod has stopped the one before
ANNOTATION_RELEASED: Final = "kubedl.io/released-attempt"
#: the attempt the pod was made at (never changed: the barrier's first run is at it)
ANNOTATION_CREATED: Final = "kubedl.io/created-attempt"

BARRIER: Final = "kubedl-barrier"
WATCHER: Final = "kubedl-watcher"
#: the downward API volume holding the two annotations, and the emptyDir holding the pod's attempt
SIGNALS_VOLUME: Final = "kubedl-restart-signals"
STATE_VOLUME: Final = "kubedl-restart-state"
SIGNALS_DIR: Final = "/var/run/kubedl/signals"
STATE_DIR: Final = "/var/run/kubedl/state"
ATTEMPT_FILE: Final = "attempt"
RELEASED_FILE: Final = "released"
CREATED_FILE: Final = "created"
#: the pod's current attempt, in the state volume
POD_ATTEMPT_FILE: Final = "pod-attempt"
#: the watcher's exit that its restart rule turns into RestartAllContainers
RESTART_EXIT_CODE: Final = 86
#: how often the programs look at the files (a local read of a few bytes)
POLL_SECONDS: Final = 0.1


def next_attempt(previous: int | None, job_attempt: int) -> int:
    """The attempt a pod's barrier run is at: the one the pod was made at on its first run (``previous``
    None, ``job_attempt`` then its ``kubedl.io/created-attempt``), else one past the run before, or the job's
    if that is further (every restart of a pod ends its attempt)."""
    if previous is None:
        return job_attempt
    return max(job_attempt, previous + 1)


def released(pod_attempt: int, released_attempt: int) -> bool:
    """Whether the barrier lets the program of ``pod_attempt`` start."""
    return released_attempt >= pod_attempt


def told_to_restart(pod_attempt: int, job_attempt: int) -> bool:
    """Whether the watcher restarts the pod: the job has moved past the pod's attempt."""
    return job_attempt > pod_attempt


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def barrier(signals: Path, state: Path, *, poll: float = POLL_SECONDS) -> int:
    """The barrier program: decide the pod's attempt, keep it, wait for its release."""
    previous = _read_int(state / POD_ATTEMPT_FILE)
    # The pod's first run is at the attempt it was made at: one raised since is the pod's next restart's
    # (the controller counts on it), reached through the watcher.
    job_attempt = _read_int(signals / (CREATED_FILE if previous is None else ATTEMPT_FILE)) or 0
    attempt = next_attempt(previous, job_attempt)
    temporary = state / f".{POD_ATTEMPT_FILE}.tmp"
    temporary.write_text(f"{attempt}\n")
    os.replace(temporary, state / POD_ATTEMPT_FILE)
    said = -1
    while True:
        now_released = _read_int(signals / RELEASED_FILE) or 0
        if released(attempt, now_released):
            print(f"attempt {attempt} released: starting", flush=True)
            return 0
        if now_released != said:
            print(f"attempt {attempt}: waiting until every rank has stopped attempt {attempt - 1}", flush=True)
            said = now_released
        time.sleep(poll)


def watcher(signals: Path, state: Path, *, poll: float = POLL_SECONDS) -> int:
    """The watcher program: exit :data:`RESTART_EXIT_CODE` once the job is past the pod's attempt."""
    attempt = _read_int(state / POD_ATTEMPT_FILE) or 0
    while True:
        job_attempt = _read_int(signals / ATTEMPT_FILE) or 0
        if told_to_restart(attempt, job_attempt):
            print(f"the job is at attempt {job_attempt}, this pod at {attempt}: restarting the pod", flush=True)
            return RESTART_EXIT_CODE
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("barrier", "watcher"):
        print("usage: kubedl-py-agent barrier|watcher", file=sys.stderr)
        return 2
    signals, state = (
        Path(os.environ.get("KUBEDL_SIGNALS_DIR", SIGNALS_DIR)),
        Path(os.environ.get("KUBEDL_STATE_DIR", STATE_DIR)),
    )
    try:
        return barrier(signals, state) if args[0] == "barrier" else watcher(signals, state)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
