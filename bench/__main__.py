"""``make bench``: run every benchmark, print its figures, and collect them in ``bench/results.json``.

Each benchmark runs in its own process (so one's leftovers cannot skew the next) and ends its output with
one JSON line of figures. ``--control-plane`` picks the set: ``embedded`` (kubedl-py's own API server, each
benchmark run 5 times and every figure reported as the median with its min and max), ``kubernetes`` (the
real control plane, side by side with the Training Operator and KubeDL built from their Go modules; those
scripts repeat what needs repeating themselves), or ``all`` (the default). ``--smoke`` runs tiny sizes
(what ``make test`` checks: that they still run) and writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MACHINE = {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
EMBEDDED_REPEATS = 5
EMBEDDED: dict[str, list[str]] = {
    "apiserver": ["bench_apiserver.py"],
    "controller_n50": ["bench_controller.py", "--jobs", "50", "--idle-seconds", "10"],
    "controller_n200": ["bench_controller.py", "--jobs", "200", "--idle-seconds", "10"],
    "controller_n500": ["bench_controller.py", "--jobs", "500", "--idle-seconds", "10"],
    "lifecycle": ["bench_lifecycle.py"],
    "failover": ["bench_failover.py"],
    "failover_under_load": ["bench_failover.py", "--background-jobs", "200"],
    "proxy": ["bench_proxy.py"],
}
KUBERNETES: dict[str, list[str]] = {
    "real_n50": ["real_controller.py", "--jobs", "50", "--runs", "5"],
    "real_n200": ["real_controller.py", "--jobs", "200", "--runs", "5", "--idle-seconds", "60"],
    # the same with kube-scheduler's client limit raised (it binds ~50 pods/s by default), so that the time until
    # every pod is Running measures the controllers; against both peers tuned (their best settings)
    "real_n200_scheduler500": [
        "real_controller.py",
        "--jobs",
        "200",
        "--runs",
        "5",
        "--shipped-runs",
        "0",
        "--scheduler-qps",
        "500",
        "--contenders",
        "bare-client,kubedl-py,kubedl-tuned,training-operator-tuned",
    ],
    # 8,000 pods (each contender waits until its 8,000 pods run), against both peers tuned, the scheduler raised so
    # that a round ends in minutes rather than the ~7 the default's 50 binds/s take
    "real_n1000": [
        "real_controller.py",
        "--jobs",
        "1000",
        "--runs",
        "5",
        "--shipped-runs",
        "0",
        "--nodes",
        "1000",
        "--scheduler-qps",
        "500",
        "--contenders",
        "bare-client,kubedl-py,kubedl-tuned,training-operator-tuned",
        # the tuned Training Operator takes about 3x the others' time: one round of it
        "--runs-of",
        "training-operator-tuned=1",
    ],
    # N = 1,250: the scale row of the throughput table and the 10,000 pods of the cost table in one run
    "real_pods10000": [
        "real_controller.py",
        "--jobs",
        "1250",
        "--runs",
        "1",
        "--shipped-runs",
        "0",
        "--nodes",
        "1000",
        "--contenders",
        "bare-client,kubedl-py,training-operator-raised,kubedl-raised",
    ],
    # the idle window again once every pod runs (real_controller waits for that since this was added)
    "real_idle": [
        "real_controller.py",
        "--jobs",
        "200",
        "--runs",
        "1",
        "--shipped-runs",
        "0",
        "--contenders",
        "kubedl-py,training-operator-raised,kubedl-raised",
        "--idle-seconds",
        "60",
    ],
    # 20,000 host-network pods on 1,000 nodes, with the default port range and with 100 ports (issue 31)
    "real_hostnet_scale": ["real_hostnet_scale.py", "--scheduler-qps", "500"],
    # the same with only its 100-port range (20,000 pods on 1,000 nodes need every port reused per node): half the time
    "real_hostnet_scale_100_ports": ["real_hostnet_scale.py", "--scheduler-qps", "500", "--ranges", "20000-20099"],
    "real_lifecycle": ["real_lifecycle.py", "--runs", "10"],
    "real_failover": ["real_failover.py"],
    "real_failover_under_load": ["real_failover.py", "--background-jobs", "200"],
    # the same with kubedl-py's write gate off: what holding other writes during a failover buys and costs
    "real_failover_under_load_without_gate": [
        "real_failover.py",
        "--background-jobs",
        "200",
        "--contenders",
        "kubedl-py",
        "--urgent-write-hold",
        "0",
    ],
}
SMOKE: dict[str, list[str]] = {
    "apiserver": ["--smoke"],
    "controller_n50": ["--smoke"],
    "controller_n200": ["--smoke"],
    "controller_n500": ["--smoke"],
    "lifecycle": ["--smoke"],
    "failover": ["--smoke"],
    "failover_under_load": ["--smoke", "--background-jobs", "5"],
    "proxy": ["--mb", "16", "--conns", "50"],
    "real_n50": ["--smoke"],
    "real_n200": ["--smoke", "--contenders", "bare-client,kubedl-py"],
    "real_n200_scheduler500": ["--smoke", "--contenders", "bare-client,kubedl-py", "--scheduler-qps", "500"],
    "real_n1000": ["--smoke", "--contenders", "bare-client,kubedl-py"],
    "real_pods10000": ["--smoke", "--contenders", "kubedl-py"],
    "real_idle": ["--smoke", "--contenders", "kubedl-py,kubedl"],
    "real_hostnet_scale": ["--smoke"],
    "real_hostnet_scale_100_ports": ["--smoke"],
    "real_lifecycle": ["--smoke"],
    "real_failover": ["--smoke"],
    "real_failover_under_load": ["--smoke", "--background-jobs", "2", "--contenders", "kubedl-py"],
    "real_failover_under_load_without_gate": [
        "--smoke",
        "--background-jobs",
        "2",
        "--contenders",
        "kubedl-py",
        "--urgent-write-hold",
        "0",
    ],
}
BENCHMARKS = {**EMBEDDED, **KUBERNETES}
#: part of another benchmark (real_hostnet_scale's 100-port range), for the sets: left out of make bench's default
NAMED_ONLY = frozenset({"real_hostnet_scale_100_ports"})
#: named sets of benchmarks, run as one dated run (each entry written carries the run's start and commit)
SETS: dict[str, list[str]] = {
    # issue 38's figures: the peers at their best, both scheduler settings, N = 1,000, a job's life, failover
    # under a burst, and host-network mode at scale (the 100-port range: 20,000 pods need ports reused per node)
    "issue38": [
        "real_n200_scheduler500",
        "real_n1000",
        "real_n200",
        "real_failover_under_load",
        "real_lifecycle",
        "real_hostnet_scale_100_ports",
    ],
}
#: real-plane benchmarks whose figures swing so much from run to run that one run says little: run this often,
#: each figure reported as the median with its min and max (the others repeat inside their scripts)
REAL_REPEATS = {"real_failover_under_load": 5, "real_failover_under_load_without_gate": 5}


def run_once(name: str, smoke: bool) -> dict[str, Any]:
    script, *args = BENCHMARKS[name]
    if smoke:
        args = SMOKE[name]
    command = [sys.executable, str(HERE / script), *args]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-4000:])
        raise SystemExit(f"benchmark {name} failed with exit code {result.returncode}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    figures: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    return figures


def spread(runs: list[Any]) -> Any:
    """Per numeric figure (nested dicts followed): {"median", "min", "max"} over the runs."""
    first = runs[0]
    if isinstance(first, dict):
        return {key: spread([run[key] for run in runs if key in run]) for key in first}
    if isinstance(first, bool) or not isinstance(first, int | float):
        return first
    return {"median": round(statistics.median(runs), 3), "min": min(runs), "max": max(runs)}


def run(name: str, smoke: bool) -> dict[str, Any]:
    repeats = 1 if smoke else EMBEDDED_REPEATS if name in EMBEDDED else REAL_REPEATS.get(name, 1)
    runs = [run_once(name, smoke) for _ in range(repeats)]
    if repeats == 1:
        return runs[0]
    return {"repeats": repeats, "figures": spread(runs), "runs": runs}


def commit() -> str:
    """The checkout's commit, marked ``+changes`` when its tracked files differ from it ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "names", nargs="*", choices=[*BENCHMARKS, *SETS, []], help="which benchmarks or sets (default: the set)"
    )
    parser.add_argument("--control-plane", choices=["embedded", "kubernetes", "all"], default="all")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; do not write results.json")
    args = parser.parse_args(argv)
    # a benchmark that only repeats part of another (NAMED_ONLY) runs when named or in a set, not in make bench
    kubernetes = [name for name in KUBERNETES if name not in NAMED_ONLY]
    chosen = {"embedded": list(EMBEDDED), "kubernetes": kubernetes, "all": [*EMBEDDED, *kubernetes]}
    names = [name for given in args.names for name in SETS.get(given, [given])] or chosen[args.control_plane]
    out = HERE / "results.json"
    this_run = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "benchmarks": names,
    }
    for name in names:
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        figures: dict[str, Any] = {"measured_at": started, "machine": MACHINE, "run": this_run}
        if os.environ.get("BENCH_CONTROLLER_ARGS"):  # flags every kubedl-py controller of the run was given
            figures["controller_args"] = os.environ["BENCH_CONTROLLER_ARGS"]
        figures.update(run(name, args.smoke))
        if not args.smoke:
            # Written after each benchmark (a long run stopped half-way keeps what it measured); each entry
            # carries its own date, and a partial re-run replaces only its own entries.
            previous = json.loads(out.read_text()) if out.exists() else {}
            out.write_text(json.dumps({**previous, name: figures}, indent=2) + "\n")
            print(f"figures of {name} written to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
