"""rescale.Reporter against a real rescaled: delivery, de-duplicated resends,
a server that is down and comes back, the bounded buffer, the environment
contract, the GPU type on every batch, tokens, and the backoff schedule on
an injected clock."""
import time

import grpc
import pytest

import rescale
from rescale import _connection
from rescale.reporter import GrpcTransport, pod_name
from rescale.v1 import rescale_pb2


def test_steps_reach_rescaled_and_count_as_progress(rescaled):
    rescaled.register("team-a/mlp", max_replicas=4, local_batch_size=32)
    ticks = iter(range(0, 10_000, 3))  # every step() block lasts 3 ms
    seen = []

    class Capture(GrpcTransport):
        def send(self, batch):
            seen.extend((s.step, round(s.step_seconds, 9), s.world_size) for s in batch.samples)
            return super().send(batch)

    reporter = rescale.Reporter("team-a/mlp", pod="mlp-0", world_size=2, batch_size=32,
                                transport=Capture(rescale.Connection(servers=[rescaled.address])),
                                timer=lambda: next(ticks) / 1000)
    for _ in range(40):
        with reporter.step():
            pass
    assert reporter.flush(timeout=30)
    stats = reporter.stats()
    assert (stats.queued, stats.accepted, stats.dropped, stats.pending) == (40, 40, 0, 0)
    assert seen == [(step, 0.003, 2) for step in range(40)]
    status = rescaled.status("team-a/mlp")
    assert status.samples_accepted == 40
    # steps 0..39 at world size 2, 32 per worker
    assert status.samples_processed == 40 * 2 * 32
    reporter.close()


def test_gradient_statistics_are_sent(rescaled):
    rescaled.register("team-a/grads", local_batch_size=16)
    reporter = rescale.Reporter("team-a/grads", server=rescaled.address, pod="p", world_size=1)
    for _ in range(30):
        with reporter.step(batch_size=16) as s:
            s.gradients(sqr=4.0, var=8.0, batch=16)
    assert reporter.flush(timeout=30)
    # noise scale = per-sample variance / |G|^2 = 8 * 16 / 4
    assert rescaled.status("team-a/grads").gradient_noise_scale == pytest.approx(32.0, rel=1e-6)
    reporter.close()


class LosesAnswers:
    """Delivers each batch, then reports the answer lost the first `n` times."""

    def __init__(self, inner, n):
        self.inner, self.n = inner, n

    def send(self, batch):
        summary = self.inner.send(batch)
        if self.n > 0:
            self.n -= 1
            raise _connection_error(grpc.StatusCode.UNAVAILABLE)
        return summary


def _connection_error(code):
    class Error(grpc.RpcError):
        def code(self):
            return code

        def trailing_metadata(self):
            return ()

    return Error()


def test_a_batch_whose_answer_was_lost_is_resent_and_counted_once(rescaled):
    rescaled.register("team-a/resend", local_batch_size=8)
    transport = LosesAnswers(GrpcTransport(rescale.Connection(servers=[rescaled.address])), 1)
    reporter = rescale.Reporter("team-a/resend", pod="p", world_size=1, batch_size=8,
                                transport=transport, initial_backoff=0.01)
    for step in range(25):
        reporter.record(step, 0.01)
    assert reporter.flush(timeout=30)
    stats = reporter.stats()
    assert stats.failed_rpcs == 1
    assert stats.duplicates == 25 and stats.accepted == 0  # the resend found them stored
    assert rescaled.status("team-a/resend").samples_processed == 25 * 8
    reporter.close()


def test_rescaled_down_training_goes_on_and_delivery_resumes(start_rescaled, tmp_path):
    state = f"--state=sqlite:{tmp_path / 'state.db'}"
    first = start_rescaled(state)
    first.register("team-a/outage", local_batch_size=4)
    reporter = rescale.Reporter("team-a/outage", server=first.address, pod="p", world_size=1,
                                batch_size=4, initial_backoff=0.01, max_backoff=0.05,
                                flush_interval=0.01, rpc_timeout=2)
    for step in range(10):
        reporter.record(step, 0.01)
    assert reporter.flush(timeout=30)
    first.await_checkpoint_after(time.time())
    address = first.address
    first.kill()  # kill -9
    for step in range(10, 60):
        reporter.record(step, 0.01)  # returns at once: the sender retries in the background
    assert reporter.stats().queued == 60
    second = start_rescaled(state, listen=address)
    assert reporter.flush(timeout=60)
    stats = reporter.stats()
    assert stats.failed_rpcs >= 1 and stats.dropped == 0
    assert second.status("team-a/outage").samples_processed == 60 * 4
    reporter.close()


def test_a_full_buffer_drops_the_oldest_and_counts_them():
    class Down:
        calls = 0

        def send(self, batch):
            Down.calls += 1
            raise _connection_error(grpc.StatusCode.UNAVAILABLE)

    reporter = rescale.Reporter("team-a/full", pod="p", world_size=1, transport=Down(),
                                buffer_capacity=100, start=False)
    for step in range(250):
        reporter.record(step, 0.01)
    stats = reporter.stats()
    assert (stats.queued, stats.pending, stats.dropped) == (250, 100, 150)
    assert Down.calls == 0  # recording never touched the network


def test_backoff_doubles_with_jitter_on_the_injected_clock():
    now = [0.0]
    sent = []

    class Flaky:
        fail = 3

        def send(self, batch):
            sent.append(now[0])
            if Flaky.fail:
                Flaky.fail -= 1
                raise _connection_error(grpc.StatusCode.UNAVAILABLE)
            return rescale_pb2.IngestSummary(accepted=len(batch.samples))

    reporter = rescale.Reporter("team-a/backoff", pod="p", world_size=1, transport=Flaky(),
                                clock=lambda: now[0], uniform01=lambda: 1.0,
                                initial_backoff=1.0, max_backoff=3.0, flush_interval=0.5,
                                start=False)
    reporter.record(0, 0.1)
    assert not reporter.pump()  # not due before the flush interval
    for t in (0.5, 1.5, 3.5, 6.5):  # retries after 1 s, 2 s, then 3 s (the cap)
        now[0] = t - 0.01
        assert not reporter.pump()
        now[0] = t
        assert reporter.pump()
    assert sent == [0.5, 1.5, 3.5, 6.5]
    stats = reporter.stats()
    assert (stats.failed_rpcs, stats.accepted, stats.pending) == (3, 1, 0)


def test_a_permanent_error_abandons_the_batch():
    class Refuses:
        def send(self, batch):
            raise _connection_error(grpc.StatusCode.INVALID_ARGUMENT)

    reporter = rescale.Reporter("team-a/refused", pod="p", world_size=1, transport=Refuses(),
                                start=False, flush_interval=0)
    reporter.record(0, 0.1)
    assert reporter.pump()
    stats = reporter.stats()
    assert (stats.abandoned, stats.pending) == (1, 0)


def test_configuration_from_the_torchrun_environment():
    env = {"RESCALE_JOB": "team-a/env", "RESCALE_SERVER": "a:1,b:2", "WORLD_SIZE": "4",
           "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "POD_NAME": "host-x"}
    reporter = rescale.Reporter(env=env, start=False, transport=object())
    assert (reporter.job, reporter.world_size, reporter.rank) == ("team-a/env", 4, 3)
    assert reporter.pod == "host-x-rank3"  # two workers share the pod
    assert pod_name({"POD_NAME": "solo", "RANK": "0"}) == "solo"
    connection = _connection.Connection.from_env(env)
    assert list(connection.servers) == ["a:1", "b:2"] and not connection.uses_tls()
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        rescale.Reporter(env={"RESCALE_JOB": "a/b", "WORLD_SIZE": "x"}, start=False,
                         transport=object())
    with pytest.raises(ValueError, match="cert_file and key_file"):
        _connection.Connection.from_env({"RESCALE_CERT_FILE": "c.pem"})


def test_without_a_job_reporting_is_off_and_never_raises():
    reporter = rescale.Reporter(env={})
    assert not reporter.enabled
    with reporter.step(batch_size=3):
        pass
    reporter.record(5, 0.1)
    assert reporter.flush(timeout=0) and reporter.stats().queued == 0
    reporter.close()


def test_token_goes_with_every_call(start_rescaled, tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("reporter-token-0123456789,agent,reporter,team-a\n"
                      "admin-token-0123456789ab,admin,admin,*\n")
    server = start_rescaled("--state=memory", f"--auth_token_file={tokens}")
    admin = rescale.Connection(servers=[server.address], token="admin-token-0123456789ab")
    from rescale.v1 import rescale_pb2_grpc
    rescale_pb2_grpc.JobServiceStub(admin.dial(server.address)).RegisterJob(
        rescale_pb2.RegisterJobRequest(spec=rescale_pb2.JobSpec(
            job_id="team-a/auth", min_replicas=1, max_replicas=2, local_batch_size=1)))
    token_file = tmp_path / "token"
    token_file.write_text("reporter-token-0123456789\n")
    reporter = rescale.Reporter("team-a/auth", pod="p", world_size=1, batch_size=1,
                                env={"RESCALE_SERVER": server.address,
                                     "RESCALE_TOKEN_FILE": str(token_file)})
    for step in range(5):
        reporter.record(step, 0.01)
    assert reporter.flush(timeout=30)
    assert reporter.stats().accepted == 5
    reporter.close()
    # Without a token the server refuses; the samples stay for a retry (a
    # rotated token file may fix it).
    anonymous = rescale.Reporter("team-a/auth", server=server.address, pod="q", world_size=1,
                                 env={}, flush_interval=0, start=False)
    anonymous.record(0, 0.01)
    assert anonymous.pump()
    stats = anonymous.stats()
    assert (stats.accepted, stats.failed_rpcs, stats.pending) == (0, 1, 1)
    assert anonymous.last_error().code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_trainer_that_exits_without_close_still_delivers(rescaled):
    import subprocess
    import sys
    rescaled.register("team-a/exit", local_batch_size=2)
    script = ("import rescale\n"
              "r = rescale.Reporter(flush_interval=60)\n"  # nothing due before exit
              "for s in range(7): r.record(s, 0.02, 2)\n")
    env = {"PYTHONPATH": ":".join(sys.path), "RESCALE_JOB": "team-a/exit",
           "RESCALE_SERVER": rescaled.address, "POD_NAME": "p", "WORLD_SIZE": "1"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert rescaled.status("team-a/exit").samples_accepted == 7


def test_gpu_type_goes_with_every_batch_and_rescaled_keeps_its_curve(rescaled):
    rescaled.register("team-a/typed", local_batch_size=8)
    sent = []

    class Capture(GrpcTransport):
        def send(self, batch):
            sent.append(batch.gpu_type)
            return super().send(batch)

    connection = rescale.Connection(servers=[rescaled.address])
    # The argument wins over the environment.
    reporter = rescale.Reporter("team-a/typed", pod="p", world_size=1, batch_size=8,
                                gpu_type="Tesla-T4", env={"RESCALE_GPU_TYPE": "Other"},
                                transport=Capture(connection), max_batch=10)
    assert reporter.gpu_type == "Tesla-T4"
    for step in range(25):
        reporter.record(step, 0.01)
    assert reporter.flush(timeout=30)
    assert reporter.stats().accepted == 25
    assert sent and set(sent) == {"Tesla-T4"}
    reporter.close()
    job = rescaled.jobs.GetJob(rescale_pb2.GetJobRequest(job_id="team-a/typed"))
    assert [c.gpu_type for c in job.curves_by_type] == ["Tesla-T4"]
    assert sum(p.sample_count for p in job.curves_by_type[0].points if p.observed) == 25


def test_gpu_type_from_the_environment_and_checked():
    def make(**kwargs):
        return rescale.Reporter("team-a/env-type", pod="p", world_size=1, start=False,
                                transport=object(), **kwargs)

    assert make(env={"RESCALE_GPU_TYPE": "NVIDIA-A100-SXM4-40GB"}).gpu_type == \
        "NVIDIA-A100-SXM4-40GB"
    assert make(env={}).gpu_type == ""  # not said: the batches leave it empty
    assert make(env={"RESCALE_GPU_TYPE": "x"}, gpu_type="").gpu_type == ""
    with pytest.raises(ValueError, match="RESCALE_GPU_TYPE: 'A100 80GB' is not a GPU type name"):
        make(env={"RESCALE_GPU_TYPE": "A100 80GB"})
    with pytest.raises(ValueError, match="gpu_type: '-T4' is not a GPU type name"):
        make(env={}, gpu_type="-T4")
