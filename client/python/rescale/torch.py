"""rescale.torch: what a PyTorch trainer reports beyond step times, and the
batch Rescale recommends.

GradientNoise measures the gradient statistics Pollux/AdaptDL plan with
(../docs/python.md, "Gradient statistics"; AdaptDL's
adaptdl/torch/gradient_noise_scale.py): per step, from the K replicas' local
gradients g_i (each averaged over its local batch m) and their average g,

    grad_sqr = (K |g|^2 - mean_i |g_i|^2) / (K - 1)     estimates |G|^2
    grad_var = (mean_i |g_i|^2 - |g|^2) / (K - 1)       the variance of g,

so grad_var is the variance of a gradient averaged over K x m samples, which
is what StepSample.grad_var with grad_batch = K x m means (AdaptDL keeps the
same quantity scaled to its initial batch). Unbiased: E|g_i|^2 = |G|^2 +
s^2/m and E|g|^2 = |G|^2 + s^2/(K m). The local norms are read in a DDP
communication hook, from each bucket before its all-reduce; mean_i |g_i|^2
then costs one extra all-reduce of one float per step. With one replica, two
consecutive steps stand in for two replicas (AdaptDL does the same), which
keeps a copy of the previous gradient. rescaled smooths the statistics;
nothing is averaged here.

Not measured here: Adam's preconditioning (AdaptDL rescales the gradients
by Adam's second moments first; these are the raw gradients, exact for
SGD) and mixed-precision loss scaling (unscale before measure()).
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping, Optional

import torch
import torch.distributed as dist


@dataclasses.dataclass
class GradientStats:
    sqr: float    # estimate of |G|^2
    var: float    # variance of the gradient averaged over `batch` samples
    batch: int    # total samples that gradient averaged (K x local batch x accumulation)


class GradientNoise:
    """Attach to a DistributedDataParallel model (or a plain module for one
    process); call measure() after each synchronising backward pass."""

    def __init__(self, model: torch.nn.Module, local_batch_size: int,
                 accumulation_steps: int = 1, process_group=None):
        self._model = model
        self._local_batch = int(local_batch_size)
        self._accumulation = max(1, int(accumulation_steps))
        self._group = process_group
        self._distributed = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        self._replicas = dist.get_world_size(process_group) if self._distributed else 1
        self._local_sqr = None   # sum of squares of this replica's gradient, this step
        self._previous = None    # the last step's gradient (one replica only)
        if self._distributed:
            model.register_comm_hook(self, _allreduce_recording_local_norm)

    def set_batch(self, local_batch_size: int, accumulation_steps: int = 1) -> None:
        self._local_batch = int(local_batch_size)
        self._accumulation = max(1, int(accumulation_steps))

    def _parameters(self):
        return [p for p in self._model.parameters() if p.grad is not None]

    @torch.no_grad()
    def measure(self) -> Optional[GradientStats]:
        """The statistics of the step whose gradients were just synchronised
        (after loss.backward(), before optimizer.step()); None when they
        cannot be estimated (one replica's first step, or a degenerate one)."""
        grads = [p.grad for p in self._parameters()]
        if not grads:
            return None
        total_sqr = float(sum(g.double().pow(2).sum() for g in grads))
        per_replica = self._local_batch * self._accumulation
        if self._replicas > 1:
            if self._local_sqr is None:
                return None  # the hook did not run: not a synchronising pass
            local = torch.tensor([self._local_sqr], dtype=torch.float64)
            self._local_sqr = None
            dist.all_reduce(local, group=self._group)
            k = self._replicas
            mean_local = float(local) / k
            sqr = (k * total_sqr - mean_local) / (k - 1)
            var = (mean_local - total_sqr) / (k - 1)
            return _stats(sqr, var, k * per_replica)
        # One replica: the previous step's gradient is the second "replica".
        flat = torch.cat([g.detach().reshape(-1).double() for g in grads])
        previous, self._previous = self._previous, flat.clone()
        if previous is None or previous.numel() != flat.numel():
            return None
        mean_local = 0.5 * (float(flat.pow(2).sum()) + float(previous.pow(2).sum()))
        both = float((0.5 * (flat + previous)).pow(2).sum())
        return _stats(2 * both - mean_local, mean_local - both, 2 * per_replica)


def _stats(sqr: float, var: float, batch: int) -> Optional[GradientStats]:
    # rescaled refuses negative statistics; a noisy step can estimate a
    # negative |G|^2 (AdaptDL clips the same way before smoothing).
    if not (math.isfinite(sqr) and math.isfinite(var)):
        return None
    return GradientStats(max(sqr, 0.0), max(var, 0.0), int(batch))


def _allreduce_recording_local_norm(state: GradientNoise, bucket):
    """DDP's default all-reduce (average), after adding this replica's
    local squared norm of the bucket to the step's sum."""
    buffer = bucket.buffer()
    local = float(buffer.double().pow(2).sum())
    state._local_sqr = (state._local_sqr or 0.0) + local
    world = dist.get_world_size(state._group)
    buffer.div_(world)
    work = dist.all_reduce(buffer, group=state._group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


# ---- the batch Rescale recommends -------------------------------------------

@dataclasses.dataclass
class BatchPlan:
    local_batch_size: int
    accumulation_steps: int = 0   # extra micro-steps before each synchronisation
    from_rescale: bool = False


def recommended_batch(default_local_batch: int, env: Optional[Mapping[str, str]] = None,
                      connection=None, job: Optional[str] = None) -> BatchPlan:
    """The local batch and accumulation steps this worker should start with:
    RESCALE_LOCAL_BATCH_SIZE / RESCALE_ACCUMULATION_STEPS when rescale-launch
    set them, else the job's recommendation from rescaled (Kubernetes
    workers read their own at start; a resize restarts them anyway), else
    `default_local_batch`. Never raises: a server that does not answer means
    the default."""
    env = os.environ if env is None else env
    local = env.get("RESCALE_LOCAL_BATCH_SIZE", "")
    if local.strip():
        return BatchPlan(int(local), int(env.get("RESCALE_ACCUMULATION_STEPS") or 0), True)
    job = job if job is not None else env.get("RESCALE_JOB", "")
    if not job:
        return BatchPlan(default_local_batch)
    try:
        from rescale import _connection
        from rescale.v1 import rescale_pb2, rescale_pb2_grpc
        connection = connection or _connection.Connection.from_env(env)
        channel = connection.dial(connection.servers[0])
        with channel:
            rec = rescale_pb2_grpc.RecommendationServiceStub(channel).GetRecommendation(
                rescale_pb2.GetRecommendationRequest(job_id=job), timeout=5)
    except Exception:  # grpc.RpcError, a bad address: start with the default
        return BatchPlan(default_local_batch)
    if rec.HasField("local_batch_size"):
        return BatchPlan(rec.local_batch_size, rec.accumulation_steps, True)
    return BatchPlan(default_local_batch)


def scale_learning_rate(base_lr: float, total_batch: int, base_batch: int,
                        rule: str = "sqrt") -> float:
    """The learning rate for `total_batch` when `base_lr` was tuned at
    `base_batch`: "sqrt" (square-root scaling, Krizhevsky 2014; AdaptDL's
    default for Adam) or "linear" (Goyal et al. 2017, for SGD)."""
    if base_batch <= 0 or total_batch <= 0:
        raise ValueError("total_batch and base_batch: must be positive")
    ratio = total_batch / base_batch
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "linear":
        return base_lr * ratio
    raise ValueError(f"rule: {rule!r} is not 'sqrt' or 'linear'")
