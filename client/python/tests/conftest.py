"""Fixtures of the Python package's tests: a real rescaled of this build
(RESCALED, set by CTest; default build/rescaled) on a free loopback port, its
address read from its "rescaled serving on ADDR" log line."""
import os
import queue
import signal
import subprocess
import threading
import time

import grpc
import pytest

from rescale.v1 import rescale_pb2, rescale_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
RESCALED = os.environ.get("RESCALED", os.path.join(HERE, "..", "..", "..", "build", "rescaled"))


class Rescaled:
    """One rescaled process and stubs on its address."""

    def __init__(self, flags, listen="127.0.0.1:0"):
        argv = [RESCALED, f"--listen={listen}", "--metrics_listen=", "--capacity_gpus=8",
                "--plan_interval=200ms", "--cooldown=0s", "--shutdown_grace=0s"] + list(flags)
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines = []
        found = queue.Queue()

        def read():
            for line in self.process.stdout:
                self.lines.append(line)
                if "rescaled serving on " in line:
                    found.put(line)
            found.put(None)

        threading.Thread(target=read, daemon=True).start()
        line = found.get(timeout=30)
        assert line is not None, "rescaled exited:\n" + "".join(self.lines)
        self.address = line.split("serving on ", 1)[1].split()[0]
        self.channel = grpc.insecure_channel(self.address)
        self.jobs = rescale_pb2_grpc.JobServiceStub(self.channel)
        self.recs = rescale_pb2_grpc.RecommendationServiceStub(self.channel)
        self.cluster = rescale_pb2_grpc.ClusterServiceStub(self.channel)

    @property
    def port(self):
        return int(self.address.rsplit(":", 1)[1])

    def register(self, job_id, min_replicas=1, max_replicas=4, local_batch_size=32, **fields):
        spec = rescale_pb2.JobSpec(job_id=job_id, min_replicas=min_replicas,
                                   max_replicas=max_replicas, local_batch_size=local_batch_size,
                                   **fields)
        return self.jobs.RegisterJob(rescale_pb2.RegisterJobRequest(spec=spec))

    def status(self, job_id):
        return self.jobs.GetJob(rescale_pb2.GetJobRequest(job_id=job_id)).status

    def await_checkpoint_after(self, unix_seconds, timeout=30):
        """Waits until rescaled checkpointed its measurements after
        `unix_seconds` (a crash loses at most one plan interval of them).
        rescaled has no stream of its checkpoints: GetCluster is asked again
        every 20 ms until it says so."""
        deadline = time.monotonic() + timeout
        while True:
            cluster = self.cluster.GetCluster(rescale_pb2.GetClusterRequest())
            checkpoint = cluster.last_checkpoint_at
            if cluster.HasField("last_checkpoint_at") and (
                    checkpoint.seconds + checkpoint.nanos / 1e9 > unix_seconds):
                return
            assert time.monotonic() < deadline, "no checkpoint in %ss" % timeout
            time.sleep(0.02)

    def kill(self, sig=signal.SIGKILL):
        self.channel.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait(timeout=30)


@pytest.fixture
def start_rescaled():
    started = []

    def start(*flags, listen="127.0.0.1:0"):
        server = Rescaled(flags, listen)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill(signal.SIGTERM)


@pytest.fixture
def rescaled(start_rescaled):
    return start_rescaled("--state=memory")
