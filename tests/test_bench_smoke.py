"""The benchmarks still run (tiny sizes). Their figures are not asserted here: they are measurements,
printed by `make bench` and recorded in docs/benchmarks.md, not timed tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "name",
    [
        "apiserver",
        "controller_n200",
        "lifecycle",
        "failover_under_load",
        "proxy",
        # the real control plane, with the Training Operator and KubeDL: make test-peers (and make bench) runs
        # these, with tests/peers; make test leaves them out (docs/testing.md)
        pytest.param("real_n50", marks=pytest.mark.peers),
        pytest.param("real_lifecycle", marks=pytest.mark.peers),
        pytest.param("real_failover", marks=pytest.mark.peers),
    ],
)
def test_benchmark_runs(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", name, "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert figures
