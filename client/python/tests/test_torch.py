"""rescale.torch with real PyTorch: GradientNoise in a real two-rank DDP run
(gloo) against the same estimator computed offline from the ranks' local
gradients; the one-replica estimator; the batch and learning-rate helpers."""
import os
import subprocess
import sys

import pytest
import torch

import rescale.torch as rescale_torch
from rescale.launch import free_port, worker_env

HERE = os.path.dirname(os.path.abspath(__file__))


def test_ddp_statistics_match_the_offline_estimator(tmp_path):
    world, port = 2, free_port()
    base = dict(os.environ)
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, "ddp_gradients.py"),
                                 str(tmp_path)],
                                env=worker_env(base, rank=r, world=world, master_addr="127.0.0.1",
                                               master_port=port, restarts=0))
               for r in range(world)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for step in range(5):
        local = [ranks[r]["local"][step].double() for r in range(world)]
        mean_local = sum(float(g.pow(2).sum()) for g in local) / world
        total = float((sum(local) / world).pow(2).sum())
        sqr = (world * total - mean_local) / (world - 1)
        var = (mean_local - total) / (world - 1)
        for r in range(world):  # every rank measures the same statistics
            m_sqr, m_var, m_batch = ranks[r]["measured"][step]
            assert m_batch == world * 16
            assert m_sqr == pytest.approx(sqr, rel=0.01), (step, r)
            assert m_var == pytest.approx(var, rel=0.01), (step, r)
        assert var > 0 and sqr > 0


def test_one_replica_compares_consecutive_steps():
    net = torch.nn.Linear(3, 1, bias=False)
    noise = rescale_torch.GradientNoise(net, local_batch_size=4)
    grads = [torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]])]
    net.weight.grad = grads[0].clone()
    assert noise.measure() is None  # one gradient says nothing yet
    net.weight.grad = grads[1].clone()
    stats = noise.measure()
    a, b = grads[0].double(), grads[1].double()
    mean_local = 0.5 * (a.pow(2).sum() + b.pow(2).sum())
    total = ((a + b) / 2).pow(2).sum()
    assert stats.batch == 8
    assert stats.sqr == pytest.approx(float(2 * total - mean_local))
    assert stats.var == pytest.approx(float(mean_local - total))


def test_recommended_batch_and_learning_rate():
    plan = rescale_torch.recommended_batch(32, env={"RESCALE_LOCAL_BATCH_SIZE": "48",
                                                     "RESCALE_ACCUMULATION_STEPS": "2"})
    assert (plan.local_batch_size, plan.accumulation_steps, plan.from_rescale) == (48, 2, True)
    # No launcher variables and no job: the trainer's default.
    assert rescale_torch.recommended_batch(32, env={}).local_batch_size == 32
    # A job but no server answering: the default, without raising.
    down = rescale_torch.recommended_batch(
        32, env={"RESCALE_JOB": "a/b", "RESCALE_SERVER": f"127.0.0.1:{free_port()}"})
    assert (down.local_batch_size, down.from_rescale) == (32, False)
    assert rescale_torch.scale_learning_rate(0.1, 256, 64, "sqrt") == pytest.approx(0.2)
    assert rescale_torch.scale_learning_rate(0.1, 256, 64, "linear") == pytest.approx(0.4)
    with pytest.raises(ValueError, match="rule"):
        rescale_torch.scale_learning_rate(0.1, 2, 1, "adascale")


def test_recommended_batch_from_rescaled(rescaled):
    import rescale
    from rescale.v1 import rescale_pb2
    job = "team-a/batch"
    # Two replicas: AdaptDL's rule keeps one replica without accumulation at M0.
    rescaled.register(job, min_replicas=2, max_replicas=2, local_batch_size=16,
                      batch_scaling=rescale_pb2.BatchScaling(
                          initial_batch_size=32, max_batch_size=512, min_local_batch_size=8,
                          max_local_batch_size=512, gradient_accumulation=False))
    env = {"RESCALE_JOB": job, "RESCALE_SERVER": rescaled.address}
    assert rescale_torch.recommended_batch(32, env=env).from_rescale is False  # nothing yet
    # A very noisy gradient (noise scale 32 x 100 = 3,200 samples): larger
    # batches lose little efficiency, and rescaled recommends one.
    watch = rescaled.recs.WatchRecommendations(rescale_pb2.WatchRecommendationsRequest(),
                                               timeout=60)
    reporter = rescale.Reporter(job, server=rescaled.address, pod="p", world_size=2)
    for step in range(40):
        reporter.record(step, 0.05, 16, grad_sqr=1.0, grad_var=100.0, grad_batch=32)
    assert reporter.flush(timeout=30)
    reporter.close()
    for event in watch:
        rec = event.recommendation
        if rec.job_id == job and rec.HasField("local_batch_size") and rec.local_batch_size > 16:
            break
    watch.cancel()
    plan = rescale_torch.recommended_batch(32, env=env)
    assert plan.from_rescale and plan.local_batch_size == rec.local_batch_size
    assert plan.accumulation_steps == rec.accumulation_steps == 0
