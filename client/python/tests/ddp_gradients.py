"""A worker for test_torch.py: two-rank DDP (gloo) steps with
rescale.torch.GradientNoise, saving, per step, this rank's local gradient
(from a plain copy of the model with the same weights, on the same samples)
and the statistics GradientNoise measured, to OUT_DIR/rank<RANK>.pt."""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import rescale.torch as rescale_torch

BATCH = 16


def main(out_dir):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(net, bucket_cap_mb=0.001)  # several buckets
    noise = rescale_torch.GradientNoise(ddp, local_batch_size=BATCH)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    local_grads, measured = [], []
    for _ in range(5):
        x = torch.randn(BATCH, 8, generator=g)
        y = x.sum(dim=1, keepdim=True) + torch.randn(BATCH, 1, generator=g)
        shadow = copy.deepcopy(net)
        F.mse_loss(shadow(x), y).backward()
        local_grads.append(torch.cat([p.grad.reshape(-1) for p in shadow.parameters()]))
        optimizer.zero_grad()
        F.mse_loss(ddp(x), y).backward()
        stats = noise.measure()
        measured.append((stats.sqr, stats.var, stats.batch))
        optimizer.step()
    torch.save({"local": local_grads, "measured": measured}, os.path.join(out_dir, f"rank{rank}.pt"))
    # Both ranks done before either tears down: a rank that exits while its
    # peer still holds the gloo group can abort the peer ("terminate called
    # without an active exception", seen under a loaded ctest -j 2; the
    # same pattern as mosaicml/streaming#186 and pytorch/pytorch#28126).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
