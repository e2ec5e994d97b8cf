"""``python -m harness.builds``: the Go builds a test run needs, one after another, in the background of it.

Every program the tests run beside the controller is built from its Go module on first use (the real control
plane, the gang schedulers, Kueue, Helm, the benchmark's peers, the real node's programs), each by its own
module's ``main`` into ``~/.cache/kubedl-py``, under a file lock that makes a second build of the same program
wait for the first and reuse it. Cold, on 2 cores, they take about half an hour together; run before the tests,
that half hour is added to the run. Started here at the lowest CPU priority (nice 19) while the tests that need
none of them run (``make test`` runs the embedded tier and the unit tests first: tests/conftest.py), they take
only the time the tests leave idle, and a test that needs a program still being built waits for it on its lock.

``--wait COMMAND...`` runs COMMAND in the foreground meanwhile and exits with its status once the builds are
done too (a build that failed fails the run, naming its log, even when no test noticed). Without it, the builds
run in the foreground. Each build's wall time goes to ``--timings`` (one ``name seconds status`` line each,
appended; ``.ci/run`` prints them in its breakdown).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kubedl_local.pins import cache_root


@dataclass(frozen=True)
class Build:
    name: str
    #: the module whose ``python -m`` builds it (or finds it built)
    module: str
    #: what needs it, for the log
    needed_by: str


#: in the order the tests need them (tests/conftest.py puts the real control plane's tests after the rest)
BUILDS: Final[dict[str, Build]] = {
    build.name: build
    for build in (
        Build("control-plane", "kubedl_local.kubernetes", "the kubernetes tier (make test, make e2e)"),
        Build("schedulers", "harness.schedulers", "make test-gang (scheduler-plugins, Volcano)"),
        Build("kueue", "harness.kueue", "tests/kueue, tests/kueue_workloads"),
        Build("helm", "kubedl_local.kubernetes.helm", "tests/test_chart.py, tests/test_helm_install.py"),
        Build("node", "kubedl_local.kubernetes.real_node", "make test-node"),
    )
}
#: what ``make test`` needs (the gang schedulers are ``make test-gang``'s)
TEST_BUILDS: Final = ("control-plane", "kueue", "helm")


def log_dir() -> Path:
    return cache_root() / "build-logs"


def _say(message: str) -> None:
    print(f"kubedl-py builds: {message}", file=sys.stderr, flush=True)


#: the build running now, ended with the chain (SIGTERM, Ctrl-C): nothing is left compiling after it
_current: list[subprocess.Popen[bytes]] = []


def _stop_current(signum: int, frame: object) -> None:
    for proc in _current:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit(128 + signum)


def run_builds(names: Sequence[str], *, timings: Path | None, background: bool) -> list[str]:
    """Build ``names`` in order; the names of those that failed (each already said, with its log)."""
    logs = log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for name in names:
        build = BUILDS[name]
        log = logs / f"{name}.log"
        started = time.monotonic()
        with open(log, "a") as out:  # a second chain waiting on the same build appends, never truncates
            out.write(f"== {name}: python -m {build.module} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
            out.flush()
            # Its own process group, so that stopping the chain stops the compilers it started too.
            nice = ["nice", "-n", "19"] if background else []
            proc = subprocess.Popen(
                [*nice, sys.executable, "-m", build.module],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            _current[:] = [proc]
            try:
                proc.wait()
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                raise
            finally:
                _current.clear()
        seconds = time.monotonic() - started
        status = "ok" if proc.returncode == 0 else f"failed({proc.returncode})"
        if timings is not None:
            with open(timings, "a") as handle:
                handle.write(f"build:{name} {seconds:.0f} {status}\n")
        if proc.returncode == 0:
            _say(f"{name} ready in {seconds:.0f}s (for {build.needed_by}; log {log})")
        else:
            failed.append(name)
            tail = log.read_text(errors="replace").strip().splitlines()[-15:]
            _say(f"{name} FAILED after {seconds:.0f}s (exit {proc.returncode}); the end of {log}:")
            for line in tail:
                print(f"    {line}", file=sys.stderr)
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.builds", description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", help=f"of {', '.join(BUILDS)} (default: {', '.join(TEST_BUILDS)})")
    parser.add_argument("--timings", type=Path, help="append each build's wall time to this file")
    parser.add_argument("--wait", nargs=argparse.REMAINDER, help="run this command meanwhile (the rest of the line)")
    args = parser.parse_args(argv)
    names = list(args.builds or TEST_BUILDS)
    unknown = [name for name in names if name not in BUILDS]
    if unknown:
        parser.error(f"unknown build(s) {unknown}; choose from {', '.join(BUILDS)}")
    signal.signal(signal.SIGTERM, _stop_current)
    if not args.wait:
        return 1 if run_builds(names, timings=args.timings, background=False) else 0

    failed: list[str] = []
    builder = threading.Thread(
        target=lambda: failed.extend(run_builds(names, timings=args.timings, background=True)),
        name="builds",
        daemon=True,
    )
    _say(f"building {', '.join(names)} in the background at nice 19 (logs in {log_dir()})")
    builder.start()
    command = subprocess.Popen(args.wait)
    try:
        code = command.wait()
    except KeyboardInterrupt:
        command.send_signal(signal.SIGINT)
        command.wait()
        _stop_current(signal.SIGINT, None)
    except BaseException:  # SIGTERM (_stop_current): the command goes with the builds
        command.terminate()
        command.wait()
        raise
    if builder.is_alive():
        _say("the command is done; waiting for the builds still running")
    builder.join()
    if failed:
        _say(f"failed: {', '.join(failed)}")
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
