"""Collective PaddlePaddle as a PaddleJob runs it: ``paddle.distributed.launch`` on every pod, then a sum.

Started by ``python -m paddle.distributed.launch --nproc_per_node 1 paddle_dist.py``, which reads the
Training Operator's variables itself: ``PADDLE_MASTER`` (worker 0's endpoint: its own pod IP and port on
worker 0, the Service elsewhere; in host-network mode the port is its host port), ``PADDLE_NNODES`` and
``PADDLE_JOB_ID``. Each trainer contributes ``rank + 1`` to an all-reduce (gloo on the CPU) and checks the
sum ``N(N+1)/2``. ``--hold`` keeps every trainer alive that many seconds afterwards (the e2e test kills a
worker meanwhile).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import paddle
import paddle.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"trainer {rank}/{world} pid={os.getpid()} master {os.environ.get('PADDLE_MASTER')}", flush=True)
    total = paddle.to_tensor([rank + 1])
    dist.all_reduce(total)
    got, expected = int(total.numpy()[0]), world * (world + 1) // 2
    print(f"trainer {rank}: sum over {world} trainers = {got} (expected {expected})", flush=True)
    time.sleep(args.hold)
    print(("done" if got == expected else "FAILED") + f": trainer {rank}", flush=True)
    return 0 if got == expected else 1


if __name__ == "__main__":
    sys.exit(main())
