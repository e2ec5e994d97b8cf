"""A rank that hangs on its first run and finishes on the next: what ``progressDeadlineSeconds`` is for.

It prints ``--steps`` steps, then, the first time (no marker file for its rank in ``--state-dir``), stops
printing and sleeps as a rank stuck in a collective would; on a later run it prints ``done`` and exits 0.
The e2e scenario ``e2e/test_recovery.py`` runs it with ``progressDeadlineSeconds: 20``: the controller sees
no new log line, marks the job ``Stalled`` and restarts it once, and the second run succeeds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", required=True, help="where the first run leaves its marker")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hang-seconds", type=float, default=3600.0)
    args = parser.parse_args()
    rank = os.environ.get("RANK", "0")
    for step in range(1, args.steps + 1):
        print(f"[rank {rank}] step {step}/{args.steps}", flush=True)
        time.sleep(0.2)
    marker = Path(args.state_dir) / f"rank-{rank}.started"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        print(f"[rank {rank}] waiting for a peer that never answers", flush=True)
        time.sleep(args.hang_seconds)
        return 1
    print(f"[rank {rank}] done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
