"""rescale-launch when things happen to it, with the real example trainer
against a real rescaled: rescaled killed with -9 during training, and a
suspension for a higher-priority job and the resumption after it."""
import time

import pytest

from rescale.v1 import rescale_pb2
from launch_helpers import UNIT, Launch


def test_rescaled_killed_during_training(start_rescaled, tmp_path):
    state = f"--state=sqlite:{tmp_path / 'state.db'}"
    flags = (state, "--capacity_gpus=2", "--plan_interval=1s", "--cooldown=2s")
    first = start_rescaled(*flags)
    launch = Launch(first.address, "demo/crash", tmp_path, "--min", "2", "--max", "2",
                    total=UNIT * 300)
    _, at = launch.wait_for(r"^step \d+ world 2 ")
    first.await_checkpoint_after(time.time())
    address = first.address
    first.kill()  # kill -9
    # Training goes on at its size while rescaled is away, and the reporter
    # counts what it could not deliver...
    launch.wait_for(r"^step \d+ world 2 .* failed_rpcs [1-9]", after=at + 1)
    start_rescaled(*flags, listen=address)
    # ...and the launcher reconnects and tells the new server what runs.
    summary = launch.finish()
    processed, _ = launch.final()
    assert summary["sizes"] == [2] and summary["samples"] == launch.total
    assert summary["reporter"]["failed_rpcs"] >= 1 and summary["reporter"]["dropped"] == 0
    # rescaled loses at most one plan interval of statistics to kill -9.
    assert processed == pytest.approx(launch.total, rel=0.03)


def test_suspended_for_a_higher_priority_job_and_resumed(start_rescaled, tmp_path):
    server = start_rescaled("--state=memory", "--capacity_gpus=2", "--plan_interval=1s",
                            "--cooldown=0s")
    launch = Launch(server.address, "demo/low", tmp_path, "--min", "2", "--max", "2",
                    "--priority", "0", total=UNIT * 200)
    _, at = launch.wait_for(r"^step \d+ world 2 ")
    server.register("demo/urgent", min_replicas=2, max_replicas=2, priority=10,
                    local_batch_size=8)
    _, at = launch.wait_for(r"suspending \(generation", after=at)
    _, at = launch.wait_for(r"applied: replicas=0 suspended=True", after=at)
    status = server.status("demo/low")
    assert status.suspended and status.current_replicas == 0
    server.jobs.DeregisterJob(rescale_pb2.DeregisterJobRequest(job_id="demo/urgent"))
    launch.wait_for(r"started 2 workers", after=at)
    summary = launch.finish()
    assert summary["sizes"] == [2, 2] and summary["samples"] == launch.total
