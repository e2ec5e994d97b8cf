"""``make bench``: run every benchmark, print its figures, and collect them in ``bench/results.json``.

Each benchmark runs in its own process (so one's leftovers cannot skew the next) and ends its output with
one JSON line of figures. ``--smoke`` runs tiny sizes (what ``make test`` checks: that they still run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS: dict[str, list[str]] = {
    "apiserver": ["bench_apiserver.py"],
    "controller_n50": ["bench_controller.py", "--jobs", "50", "--idle-seconds", "10"],
    "controller_n200": ["bench_controller.py", "--jobs", "200", "--idle-seconds", "60"],
    "controller_n500": ["bench_controller.py", "--jobs", "500", "--idle-seconds", "10"],
    "lifecycle": ["bench_lifecycle.py"],
    "failover": ["bench_failover.py"],
    "failover_under_load": ["bench_failover.py", "--background-jobs", "200"],
    "proxy": ["bench_proxy.py"],
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
}


def run(name: str, smoke: bool) -> dict[str, object]:
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
    figures: dict[str, object] = json.loads(lines[-1]) if lines else {}
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="which benchmarks (default: all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; do not write results.json")
    args = parser.parse_args(argv)
    results = {name: run(name, args.smoke) for name in (args.names or BENCHMARKS)}
    if not args.smoke:
        out = HERE / "results.json"
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
