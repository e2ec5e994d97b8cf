"""`make demo`: what the project can show end to end today.

Until the embedded cluster and controller land, this validates the example jobs through the models, prints
what host-network mode will change for them, and renders the install manifests. It says so plainly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from kubedl_py.api import JobValidationError, load_jobs_file, with_defaults
from kubedl_py.templates import render_manifests

EXAMPLES = Path(__file__).resolve().parent


def main() -> int:
    print("kubedl-py demo (foundation stage): the embedded cluster is not built yet, so no job runs.")
    print("Validating the example jobs and rendering the install manifests instead.\n")
    for path in sorted(EXAMPLES.glob("*.yaml")):
        try:
            jobs = load_jobs_file(path)
        except JobValidationError as exc:
            print(f"FAIL {path.name}: {exc}")
            return 1
        for job in jobs:
            job = with_defaults(job)
            replicas = ", ".join(f"{t} x{s.replicas} ({s.restart_policy})" for t, s in job.replica_specs.items())
            mode = "host network" if job.host_network else "pod network"
            print(f"ok   {path.name}: {job.kind} {job.namespace}/{job.name} [{mode}] {replicas}")
    kinds = [doc["kind"] for doc in yaml.safe_load_all(render_manifests())]
    print(f"\nmanifests: {len(kinds)} objects ({', '.join(sorted(set(kinds)))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
