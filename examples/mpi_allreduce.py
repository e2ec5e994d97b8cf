"""An MPI job's real work in miniature: every rank contributes to an allreduce whose result is checked.

Run by ``mpirun`` on an MPIJob's launcher (``mpirun -np N python3 mpi_allreduce.py``): ranks 0..N-1 start on
the Workers named in the hostfile (``/etc/mpi/hostfile``, their Service names), over SSH. Each round every
rank contributes ``rank + 1 + round`` and checks that the sum it gets back is ``N(N+1)/2 + N*round``; rank 0
prints the result. ``--interval`` spaces the rounds (the e2e test kills a Worker while they run). Needs
``mpi4py`` (Debian: ``python3-mpi4py`` with ``openmpi-bin``). Exit 0 when every round's sum was right.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

from mpi4py import MPI


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.0)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # A rank that mpirun started over SSH inherits SSH_CONNECTION: "client-ip client-port server-ip server-port",
    # the server port being the port the Worker's sshd listens on (its host port in host-network mode).
    via = os.environ.get("SSH_CONNECTION", "").split()
    started = f"over ssh to port {via[3]}" if len(via) == 4 else "locally"
    print(f"rank {rank}/{size} pid={os.getpid()} host={socket.gethostname()} started {started}", flush=True)
    for round_ in range(args.rounds):
        total = comm.allreduce(rank + 1 + round_, op=MPI.SUM)
        expected = size * (size + 1) // 2 + size * round_
        if total != expected:
            print(f"rank {rank}: round {round_}: allreduce gave {total}, expected {expected}", flush=True)
            return 1
        if rank == 0:
            print(f"round {round_}: allreduce over {size} ranks = {total} (expected {expected})", flush=True)
        time.sleep(args.interval)
    if rank == 0:
        print(f"done: {args.rounds} rounds over {size} ranks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
