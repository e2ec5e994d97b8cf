"""One DistributedDataParallel training run per GPU the pod was given (NCCL), or on the CPU (gloo) without one.

Launched by torchrun (``examples/pytorch-gpu.yaml``), which reads the ``PET_*`` settings the controller gives
every PyTorchJob pod and starts ``nprocPerNode`` ranks. Why it chooses its device itself: the same job file
must run on a GPU workstation (``kubedl-py local up`` finds the GPUs and hands one to the pod, naming it in
``CUDA_VISIBLE_DEVICES``) and be rehearsed on a laptop (``local up --node-resources nvidia.com/gpu=1``: the
pod is given a pretend GPU, ``KUBEDL_PRETEND_DEVICES`` says so, and CUDA sees nothing), so it trains on
``cuda`` when CUDA sees a GPU and on the CPU otherwise, and prints which, for the e2e test and for you.

The data is synthetic (a fixed random linear map plus noise, seeded): the loss falls predictably and nothing
is downloaded.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to keep the device after training (tests)")
    args = parser.parse_args()

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy is fine here
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    pretend = os.environ.get("KUBEDL_PRETEND_DEVICES")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
        where = f"cuda:{local_rank} ({torch.cuda.get_device_name(local_rank)})"
    else:
        device, backend = torch.device("cpu"), "gloo"
        where = "cpu" + (f" (pretend devices: {pretend})" if pretend else "")
    print(f"[rank {rank}] device {where} backend {backend} CUDA_VISIBLE_DEVICES={visible}", flush=True)
    dist.init_process_group(backend)  # env:// from torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    world = dist.get_world_size()

    gen = torch.Generator().manual_seed(1234)
    true_w = torch.randn(64, 1, generator=gen).to(device)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    data_gen = torch.Generator().manual_seed(rank + 1)
    started = time.monotonic()
    first = last = 0.0
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 64, generator=data_gen).to(device)
        y = x @ true_w + 0.01 * torch.randn(args.batch, 1, generator=data_gen).to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # DDP all-reduces the gradients here
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        value = mean.item() / world
        first = value if step == 1 else first
        last = value
    seconds = time.monotonic() - started
    done = f"trained {args.steps} steps on {device.type} over {backend} in {seconds:.2f}s"
    print(f"[rank {rank}] {done}: loss {first:.4f} -> {last:.4f}", flush=True)
    time.sleep(args.hold)
    dist.destroy_process_group()
    return 0 if last < first else 1


if __name__ == "__main__":
    raise SystemExit(main())
