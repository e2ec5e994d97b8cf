"""Multi-process JAX as a JAXJob runs it: ``jax.distributed.initialize`` and a sum across the processes.

Reads the Training Operator's variables: ``COORDINATOR_ADDRESS``/``COORDINATOR_PORT`` (worker 0 hosts the
coordinator service; in host-network mode it binds its own host port and reaches itself at ``localhost``,
the others use its Service), ``NUM_PROCESSES`` and ``PROCESS_ID``. On the CPU, with gloo for the
cross-process collectives, every process contributes ``process_id + 1``; the gathered sum must be
``N(N+1)/2`` on every process. ``--hold`` keeps every process alive that many seconds afterwards (the e2e
test kills a worker meanwhile).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    n, me = int(os.environ["NUM_PROCESSES"]), int(os.environ["PROCESS_ID"])
    coordinator = f"{os.environ['COORDINATOR_ADDRESS']}:{os.environ['COORDINATOR_PORT']}"
    print(f"process {me}/{n} pid={os.getpid()} coordinator {coordinator}", flush=True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=me)
    assert jax.process_count() == n, jax.process_count()
    gathered = multihost_utils.process_allgather(jnp.array([me + 1]))
    total = int(jnp.sum(gathered))
    expected = n * (n + 1) // 2
    print(f"process {me}: sum over {jax.process_count()} processes = {total} (expected {expected})", flush=True)
    time.sleep(args.hold)
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()
    print(("done" if total == expected else "FAILED") + f": process {me}", flush=True)
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
