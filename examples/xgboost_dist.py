"""Distributed XGBoost as an XGBoostJob runs it: the Master hosts the tracker, every replica trains a shard.

Reads the Training Operator's variables: ``MASTER_ADDR``/``MASTER_PORT`` (the tracker; in host-network mode
the Master binds its own host port and reaches itself at ``127.0.0.1``, the Workers use its Service),
``WORLD_SIZE`` and ``RANK``. Each rank trains on its own shard of one synthetic regression problem; the
histogram allreduce makes every rank end with the same model, which is checked by broadcasting rank 0's
model digest. Prints the training RMSE of the first and last round; exit 0 when the ranks agree and the
error fell. ``--hold`` keeps every rank alive that many seconds after training (the e2e test kills a Worker
meanwhile).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker


def shard(rank: int, world: int, rows: int = 4000) -> xgb.DMatrix:
    rng = np.random.default_rng(7)  # the same problem everywhere; each rank keeps its own rows
    x = rng.normal(size=(rows, 8))
    y = x @ np.arange(1, 9) + 0.1 * rng.normal(size=rows)
    return xgb.DMatrix(x[rank::world], label=y[rank::world])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    print(f"rank {rank}/{world} pid={os.getpid()} tracker {address}:{port}", flush=True)
    tracker = None
    if rank == 0:
        tracker = RabitTracker(n_workers=world, host_ip="0.0.0.0", port=port, timeout=120)
        tracker.start()
    with collective.CommunicatorContext(
        dmlc_tracker_uri=address, dmlc_tracker_port=port, dmlc_task_id=str(rank), dmlc_retry=10, dmlc_timeout=120
    ):
        assert collective.get_world_size() == world, collective.get_world_size()
        history: dict[str, dict[str, list[float]]] = {}
        dtrain = shard(rank, world)
        booster = xgb.train(
            {"tree_method": "hist", "max_depth": 4, "eta": 0.3, "objective": "reg:squarederror"},
            dtrain,
            num_boost_round=args.rounds,
            evals=[(dtrain, "train")],
            evals_result=history,
            verbose_eval=False,
        )
        digest = hashlib.sha256(bytes(booster.save_raw("json"))).hexdigest()[:16]
        root_digest = collective.broadcast(digest, 0)
        rmse = history["train"]["rmse"]
        print(f"rank {rank}: rmse {rmse[0]:.3f} -> {rmse[-1]:.3f}, model {digest} (rank 0: {root_digest})", flush=True)
        time.sleep(args.hold)
    if tracker is not None:
        tracker.wait_for()
    ok = digest == root_digest and rmse[-1] < rmse[0] / 2
    print(("done" if ok else "FAILED") + f": rank {rank}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
