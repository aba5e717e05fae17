"""A small real training job for rescale-launch: an MLP regressing a fixed
random teacher on synthetic data, with DistributedDataParallel (gloo, CPU),
checkpoint/resume across restarts, and the two lines that let Rescale drive
it (rescale.Reporter, and rescale.torch.GradientNoise for the statistics).

    rescale-launch --job demo/mlp --min 1 --max 4 --total-samples 200000 \\
        --local-batch-size 64 examples/pytorch/train.py --checkpoint-dir /tmp/mlp

Exactly-once accounting: sample i of the dataset is a pure function of i, and
the checkpoint keeps how many samples the job has consumed. Each step takes
the next world_size x batch samples, so a restart at any size continues where
the checkpoint left off. On SIGTERM (a resize or a suspension) the workers
agree, through a one-float all-reduce each step, to stop after the same
step; rank 0 saves the checkpoint and all exit 0.
"""
import argparse
import dataclasses
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import rescale
import rescale.torch as rescale_torch

FEATURES, HIDDEN = 32, 256


def samples(start, count, seed=7):
    """Samples start .. start+count-1: inputs from a per-index generator,
    targets from a fixed random teacher."""
    xs = []
    for i in range(start, start + count):
        g = torch.Generator().manual_seed(seed * 1_000_003 + i)
        xs.append(torch.randn(FEATURES, generator=g))
    x = torch.stack(xs)
    teacher = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, 1, generator=teacher) / FEATURES ** 0.5
    return x, torch.sin(x @ w) + 0.1 * x[:, :1]


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--total-samples", type=int,
                   default=int(os.environ.get("RESCALE_TOTAL_SAMPLES", 0)) or 200_000,
                   help="default: $RESCALE_TOTAL_SAMPLES (rescale-launch --total-samples)")
    p.add_argument("--batch-size", type=int, default=64, help="default local batch")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--summary", default="", help="rank 0 writes a JSON summary here at the end")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    stop = {"requested": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))

    plan = rescale_torch.recommended_batch(args.batch_size)
    batch = plan.local_batch_size
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=rescale_torch.scale_learning_rate(
        args.lr, batch * world, args.batch_size, "sqrt"), momentum=0.9)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    state = {"step": 0, "samples": 0, "sizes": []}
    if os.path.exists(path):
        saved = torch.load(path)
        net.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
    state["sizes"].append(world)

    reporter = rescale.Reporter(batch_size=batch)
    reporter.set_step(state["step"])
    noise = rescale_torch.GradientNoise(net, local_batch_size=batch)

    def save():
        if rank != 0:
            return
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torch.save({"model": net.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "state": state}, path + ".tmp")
        os.replace(path + ".tmp", path)

    flag = torch.zeros(1)
    while state["samples"] < args.total_samples:
        step_samples = min(batch * world, args.total_samples - state["samples"])
        local = max(1, step_samples // world)
        x, y = samples(state["samples"] + rank * local, local)
        with reporter.step(batch_size=local) as timed:
            optimizer.zero_grad()
            loss = F.mse_loss(net(x), y)
            loss.backward()
            stats = noise.measure()
            if stats is not None:
                timed.gradients(stats.sqr, stats.var, stats.batch)
            optimizer.step()
        state["step"] += 1
        state["samples"] += local * world
        flag.fill_(1.0 if stop["requested"] else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            save()
            print(f"rank {rank}: stopping at step {state['step']} "
                  f"({state['samples']} samples) for a resize", flush=True)
            reporter.close(timeout=5)
            leave_group()
            return 0
        if state["step"] % args.checkpoint_every == 0:
            save()
            if rank == 0:
                sent = reporter.stats()
                print(f"step {state['step']} world {world} batch {batch} loss {loss.item():.4f} "
                      f"samples {state['samples']}/{args.total_samples} reporter: pending "
                      f"{sent.pending} failed_rpcs {sent.failed_rpcs} dropped {sent.dropped}",
                      flush=True)
    save()
    if rank == 0 and args.summary:
        with open(args.summary, "w") as f:
            json.dump({"samples": state["samples"], "steps": state["step"],
                       "sizes": state["sizes"], "loss": loss.item(),
                       "reporter": dataclasses.asdict(reporter.stats())}, f)
    reporter.close(timeout=10)
    leave_group()
    return 0


def leave_group():
    """Tears the gloo group down once every rank is done with it: a rank that
    exits while a peer still holds the group can abort the peer ("terminate
    called without an active exception"), which the launcher would take for
    a crash."""
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
