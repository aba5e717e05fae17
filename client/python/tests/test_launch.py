"""rescale-launch with the real example trainer (examples/pytorch/train.py:
DDP on gloo, checkpoints) against a real rescaled: the worker environment,
and a job that explores sizes, settles and counts its samples once across
restarts (recoveries: test_launch_recovery.py)."""
import pytest

from rescale.launch import parse_args, worker_env

from launch_helpers import UNIT, Launch


def test_worker_environment_is_torchruns():
    env = worker_env({"RESCALE_JOB": "a/b", "PATH": "/bin"}, rank=2, world=4,
                     master_addr="127.0.0.1", master_port=29400, restarts=3)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
                                "TORCHELASTIC_RESTART_COUNT")} == {
        "RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "GROUP_RANK": "0",
        "TORCHELASTIC_RESTART_COUNT": "3"}
    assert env["PATH"] == "/bin"
    with pytest.raises(SystemExit):
        parse_args(["--job", "a/b", "--min", "3", "--max", "2", "train.py"])
    args = parse_args(["--job", "a/b", "--max", "2", "--no-python", "./run.sh", "--lr", "1"])
    assert (args.command, args.command_args, args.no_python) == ("./run.sh", ["--lr", "1"], True)


def test_measures_sizes_settles_and_counts_samples_once(start_rescaled, tmp_path):
    # kubedl's hill climb measures 1, 2, 4 (the planner starts a lone job at
    # its max on the default prior and has no reason to measure a second size).
    server = start_rescaled("--state=memory", "--capacity_gpus=4", "--plan_interval=1s",
                            "--cooldown=2s")
    launch = Launch(server.address, "demo/settle", tmp_path, "--min", "1", "--max", "4",
                    "--policy", "kubedl", "--restart-cost", "5", total=UNIT * 500)
    summary = launch.finish()
    processed, measured = launch.final()
    sizes = summary["sizes"]
    print(launch.output()[-3000:])
    print("measured samples/s by size:", measured, "sizes run:", sizes)
    assert len(measured) >= 2
    best = max(measured.values())
    # Settled on the best measured size, within the noise of a shared machine
    # (on two cores 4 workers measured 5% and 9% below 2 in the runs we made).
    assert measured[sizes[-1]] >= 0.90 * best, (sizes, measured)
    assert summary["samples"] == launch.total  # the trainer's own count: exactly once
    assert processed == pytest.approx(launch.total, rel=0.02)


def test_a_signal_stops_a_launcher_waiting_for_rescaled(tmp_path):
    import signal
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{s.getsockname()[1]}"
    launch = Launch(down, "demo/nobody", tmp_path, "--min", "1", "--max", "1",
                    "--deregister-timeout", "1")
    launch.wait_for(r"RegisterJob: UNAVAILABLE")
    launch.process.send_signal(signal.SIGTERM)
    assert launch.process.wait(timeout=60) == 128 + signal.SIGTERM, launch.output()


def test_workers_get_the_connection_and_their_own_token():
    import rescale
    from rescale.launch import Launcher
    from rescale.v1 import rescale_pb2
    args = parse_args(["--job", "team-a/mlp", "--max", "4", "--local-batch-size", "32",
                       "--total-samples", "1000", "--worker-token-file", "/run/reporter-token",
                       "train.py"])
    connection = rescale.Connection(servers=["a:1", "b:2"], token="controller-token-0123456789",
                                    ca_file="/etc/ca.crt")
    launcher = Launcher(args, ["python3", "train.py"], connection)
    rec = rescale_pb2.Recommendation(job_id="team-a/mlp", replicas=2, generation=7,
                                     local_batch_size=48, accumulation_steps=1)
    env = launcher.worker_base_env(rec)
    assert env["RESCALE_SERVER"] == "a:1,b:2" and env["RESCALE_CA_FILE"] == "/etc/ca.crt"
    assert env["RESCALE_TOKEN_FILE"] == "/run/reporter-token" and "RESCALE_TOKEN" not in env
    assert (env["RESCALE_JOB"], env["RESCALE_GENERATION"], env["RESCALE_TOTAL_SAMPLES"]) == (
        "team-a/mlp", "7", "1000")
    assert (env["RESCALE_LOCAL_BATCH_SIZE"], env["RESCALE_ACCUMULATION_STEPS"]) == ("48", "1")
    # Without a batch in the recommendation: the job's own local batch.
    rec.ClearField("local_batch_size")
    env = launcher.worker_base_env(rec)
    assert (env["RESCALE_LOCAL_BATCH_SIZE"], env["RESCALE_ACCUMULATION_STEPS"]) == ("32", "0")
    launcher.servers.close()


def test_no_python_command_and_its_exit_code(rescaled, tmp_path):
    import subprocess
    import sys
    import grpc
    # A failing program: the launcher exits with its code and deregisters the job.
    result = subprocess.run(
        [sys.executable, "-m", "rescale.launch", "--server", rescaled.address, "--job",
         "demo/shell", "--max", "1", "--no-python", "/bin/sh", "-c",
         'test "$WORLD_SIZE" = 1 && test "$RESCALE_JOB" = demo/shell && exit 3'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    with pytest.raises(grpc.RpcError) as gone:
        rescaled.status("demo/shell")
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
