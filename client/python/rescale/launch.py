"""rescale-launch: runs one training job on one host under Rescale, without
Kubernetes (a bare-metal node, a cloud VM, a one-node Slurm allocation).

    rescale-launch --job team-a/mnist --min 1 --max 4 --total-samples 600000 \\
        train.py --epochs 3
    rescale-launch --job team-a/cmd --min 1 --max 2 --no-python ./train.sh

It registers the job, watches its recommendation, and keeps the workers at
the recommended size: it starts them with torchrun's environment contract
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
GROUP_RANK, ROLE_RANK, TORCHELASTIC_RESTART_COUNT), plus what rescale.Reporter()
and rescale.torch.recommended_batch() read (RESCALE_JOB, RESCALE_SERVER and
the credentials, POD_NAME, RESCALE_LOCAL_BATCH_SIZE,
RESCALE_ACCUMULATION_STEPS, RESCALE_GENERATION, RESCALE_TOTAL_SAMPLES), so a
torchrun-ready script
runs unchanged. On a new size it stops the workers gracefully (SIGTERM: the
trainer checkpoints and exits; SIGKILL after --grace-period), restarts them at
the new size and reports ReportApplied; a suspension stops them and waits,
a resumption restarts them. A change of the recommended batch alone does not
restart anything: the next start uses it. When the workers finish, it
deregisters the job and exits with their exit code. If rescaled goes away
the workers keep running at their size; the launcher reconnects with backoff
and reports what runs when it is back.

The workers are spawned directly, as torchrun would: Debian 12's torchrun
(PyTorch 1.13) fails on Python 3.11.

Time is injected where it decides (the backoff's clock); the event loop
blocks on one queue fed by the watch thread, one thread per worker, and
signals, so it never polls.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import List, Optional, Sequence

import grpc

from rescale import _connection
from rescale.v1 import rescale_pb2, rescale_pb2_grpc

log = logging.getLogger("rescale.launch")


@dataclasses.dataclass
class Event:
    kind: str                 # "rec", "exit", "signal", "watch_error"
    rec: Optional[object] = None
    worker: int = -1
    code: int = 0
    generation: int = 0       # the worker set an exit belongs to


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def worker_env(base: dict, *, rank: int, world: int, master_addr: str, master_port: int,
               restarts: int) -> dict:
    """torchrun's environment contract for worker `rank` of `world` on one host."""
    env = dict(base)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        "ROLE_NAME": "default", "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
        "ROLE_WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": "1",
        "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restarts), "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": base.get("RESCALE_JOB", "none").replace("/", "-"),
        "OMP_NUM_THREADS": base.get("OMP_NUM_THREADS", "1"),
    })
    return env


class Interrupted(Exception):
    """The launcher was signalled while it waited for rescaled."""


class Workers:
    """One generation of worker processes and the threads that report their exits."""

    def __init__(self, command: Sequence[str], world: int, env: dict, events: "queue.Queue",
                 generation: int, master_addr: str, restarts: int):
        self.world = world
        self.generation = generation
        self.codes = {}
        self.stopping = False
        port = free_port(master_addr)
        self.processes = []
        for rank in range(world):
            process = subprocess.Popen(list(command), env=worker_env(
                env, rank=rank, world=world, master_addr=master_addr, master_port=port,
                restarts=restarts), start_new_session=True)
            self.processes.append(process)
            threading.Thread(target=self._wait, args=(rank, process, events), daemon=True).start()

    def _wait(self, rank, process, events):
        code = process.wait()
        events.put(Event("exit", worker=rank, code=code, generation=self.generation))

    def stop(self, grace: float) -> None:
        """SIGTERM every worker (its process group), SIGKILL whoever is left
        after `grace` seconds; returns when all have exited."""
        self.stopping = True
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop within %.0f s: SIGKILL", process.pid, grace)
                _signal_group(process, signal.SIGKILL)
                process.wait()


def _signal_group(process, sig):
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


class Launcher:
    def __init__(self, args, command: List[str], connection: _connection.Connection,
                 clock=time.monotonic):
        self.args = args
        self.command = command
        self.connection = connection
        self.servers = _connection.ServerList(connection)
        self.clock = clock
        self.events: "queue.Queue[Event]" = queue.Queue()
        self.workers: Optional[Workers] = None
        self.generation_started = 0   # workers' generation counter (ours)
        self.restarts = 0
        self.applied = None           # (replicas, suspended, generation) last reported
        self.target = None            # the newest recommendation
        self.stop_watch = threading.Event()
        self.interrupted = threading.Event()  # SIGINT or SIGTERM to the launcher
        self.signalled = 0
        self.sizes = []               # sizes the workers ran at, in order (for the log)

    # ---- rescaled calls, retried until they land ----

    def _call(self, method: str, stub_class, request, what: str, permanent=(),
              give_up_after: Optional[float] = None):
        """The call, retried with backoff until it lands; raises on a
        `permanent` code, or after `give_up_after` seconds of failures. A
        signal to the launcher ends the retrying of a call without a limit
        (Interrupted), and shortens a limited one to a last try."""
        backoff = _connection.Backoff(0.2, 10.0)
        started = self.clock()
        while True:
            address, channel = self.servers.current()
            try:
                return getattr(stub_class(channel), method)(request, timeout=10)
            except grpc.RpcError as error:
                if error.code() in permanent or (
                        give_up_after is not None and self.clock() - started > give_up_after):
                    raise
                if self.interrupted.is_set():
                    if give_up_after is None:
                        raise Interrupted() from error
                    raise
                self.servers.after_failure(address, error)
                delay = backoff.next_delay()
                log.warning("%s: %s: %s (retrying in %.1f s)", what, error.code().name,
                            error.details(), delay)
                self.interrupted.wait(delay)  # the backoff; a signal cuts it short

    def spec(self):
        a = self.args
        spec = rescale_pb2.JobSpec(job_id=a.job, min_replicas=a.min, max_replicas=a.max,
                                   priority=a.priority, local_batch_size=a.local_batch_size,
                                   policy=a.policy or "")
        if a.total_samples:
            spec.total_samples = a.total_samples
        if a.gpus_per_replica is not None:
            spec.gpus_per_replica = a.gpus_per_replica
        if a.restart_cost is not None:
            spec.restart_cost_seconds = a.restart_cost
        if a.preemptible is not None:
            spec.preemptible = a.preemptible
        if a.initial_batch_size:
            spec.batch_scaling.initial_batch_size = a.initial_batch_size
            spec.batch_scaling.max_batch_size = a.max_batch_size or a.initial_batch_size
            spec.batch_scaling.min_local_batch_size = a.min_local_batch_size or 1
            spec.batch_scaling.max_local_batch_size = (a.max_local_batch_size or
                                                       a.local_batch_size or 1)
            spec.batch_scaling.gradient_accumulation = a.gradient_accumulation
        return spec

    def register(self):
        request = rescale_pb2.RegisterJobRequest(spec=self.spec())
        try:
            self._call("RegisterJob", rescale_pb2_grpc.JobServiceStub, request, "RegisterJob",
                       permanent=(grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT))
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
            self._call("UpdateJob", rescale_pb2_grpc.JobServiceStub,
                       rescale_pb2.UpdateJobRequest(spec=self.spec()), "UpdateJob",
                       permanent=(grpc.StatusCode.INVALID_ARGUMENT,))

    def final_report(self):
        """What rescaled saw of the job, logged before it is deregistered:
        its progress and the sizes it measured (one line each, parseable)."""
        try:
            job = self._call("GetJob", rescale_pb2_grpc.JobServiceStub,
                             rescale_pb2.GetJobRequest(job_id=self.args.job), "GetJob",
                             permanent=(grpc.StatusCode.NOT_FOUND,), give_up_after=10)
        except grpc.RpcError as error:
            log.warning("final report: %s", error.details())
            return
        log.info("final: samples_processed=%d sizes_run=%s restarts=%d",
                 job.status.samples_processed, ",".join(map(str, self.sizes)), self.restarts)
        for point in job.curve.points:
            if point.observed:
                log.info("final: measured replicas=%d samples_per_second=%.1f samples=%d",
                         point.replicas, point.observed_samples_per_second, point.sample_count)

    def deregister(self):
        try:
            self._call("DeregisterJob", rescale_pb2_grpc.JobServiceStub,
                       rescale_pb2.DeregisterJobRequest(job_id=self.args.job), "DeregisterJob",
                       permanent=(grpc.StatusCode.NOT_FOUND,),
                       give_up_after=self.args.deregister_timeout)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                log.error("could not deregister %s: %s (rescalectl delete job does it)",
                          self.args.job, error.details())

    def report_applied(self, replicas: int, suspended: bool, generation: int):
        self._call("ReportApplied", rescale_pb2_grpc.RecommendationServiceStub,
                   rescale_pb2.ReportAppliedRequest(job_id=self.args.job, replicas=replicas,
                                                    suspended=suspended, generation=generation),
                   "ReportApplied")
        self.applied = (replicas, suspended, generation)
        log.info("applied: replicas=%d suspended=%s generation=%d", replicas, suspended,
                 generation)

    # ---- the watch: a thread that feeds the event queue, reconnecting ----

    def _watch(self):
        namespace = self.args.job.split("/", 1)[0] if "/" in self.args.job else ""
        backoff = _connection.Backoff(0.2, 10.0)
        while not self.stop_watch.is_set():
            address, channel = self.servers.current()
            try:
                stream = rescale_pb2_grpc.RecommendationServiceStub(channel).WatchRecommendations(
                    rescale_pb2.WatchRecommendationsRequest(namespace=namespace))
                self._stream = stream
                for event in stream:
                    backoff.reset()
                    if event.recommendation.job_id == self.args.job and event.type in (
                            rescale_pb2.RecommendationEvent.ADDED,
                            rescale_pb2.RecommendationEvent.MODIFIED):
                        self.events.put(Event("rec", rec=event.recommendation))
            except grpc.RpcError as error:
                if self.stop_watch.is_set():
                    return
                self.servers.after_failure(address, error)
                self.events.put(Event("watch_error"))
                log.warning("watch: %s: %s (reconnecting)", error.code().name, error.details())
            if self.stop_watch.wait(backoff.next_delay()):
                return

    # ---- the loop ----

    def worker_base_env(self, rec) -> dict:
        env = dict(os.environ)
        env.update(self.connection.environ())
        if self.args.worker_token_file:
            # The workers' reporters need only the reporter role.
            env.pop("RESCALE_TOKEN", None)
            env["RESCALE_TOKEN_FILE"] = self.args.worker_token_file
        env["RESCALE_JOB"] = self.args.job
        env["POD_NAME"] = f"{socket.gethostname()}-{self.args.job.replace('/', '-')}"
        env["RESCALE_GENERATION"] = str(rec.generation)
        if self.args.total_samples:
            env["RESCALE_TOTAL_SAMPLES"] = str(self.args.total_samples)
        batch = rec.local_batch_size if rec.HasField("local_batch_size") else 0
        if batch:
            env["RESCALE_LOCAL_BATCH_SIZE"] = str(batch)
            env["RESCALE_ACCUMULATION_STEPS"] = str(rec.accumulation_steps)
        elif self.args.local_batch_size:
            env["RESCALE_LOCAL_BATCH_SIZE"] = str(self.args.local_batch_size)
            env["RESCALE_ACCUMULATION_STEPS"] = "0"
        return env

    def start(self, rec):
        self.generation_started += 1
        if self.sizes:
            self.restarts += 1
        self.workers = Workers(self.command, rec.replicas, self.worker_base_env(rec), self.events,
                               self.generation_started, self.args.master_addr, self.restarts)
        self.sizes.append(rec.replicas)
        log.info("started %d workers (generation %d): %s", rec.replicas, rec.generation,
                 rec.reason)

    def stop_workers(self):
        if self.workers is not None:
            self.workers.stop(self.args.grace_period)
            self.workers = None

    def converge(self):
        """Brings the workers to the newest recommendation, and says so."""
        rec = self.target
        if rec is None:
            return
        running = self.workers.world if self.workers else 0
        if rec.suspend or rec.replicas == 0:
            if self.workers is not None:
                log.info("suspending (generation %d): %s", rec.generation, rec.reason)
                self.stop_workers()
            if self.applied != (0, True, rec.generation):
                self.report_applied(0, True, rec.generation)
            return
        if running != rec.replicas:
            if self.workers is not None:
                log.info("resizing %d -> %d (generation %d): %s", running, rec.replicas,
                         rec.generation, rec.reason)
                self.stop_workers()
            self.start(rec)
        if self.applied != (rec.replicas, False, rec.generation):
            self.report_applied(rec.replicas, False, rec.generation)

    def run(self) -> int:
        try:
            self.register()
            threading.Thread(target=self._watch, name="rescale-watch", daemon=True).start()
            return self._loop()
        except Interrupted:
            signalled = self.signalled
            log.info("signal %d while waiting for rescaled: stopping", signalled)
            return 128 + signalled
        finally:
            self.stop_watch.set()
            stream = getattr(self, "_stream", None)
            if stream is not None:
                stream.cancel()
            self.stop_workers()
            self.final_report()
            self.deregister()
            self.servers.close()

    def signal(self, number: int) -> None:
        """SIGINT/SIGTERM: stop the workers, deregister, exit 128 + number."""
        self.signalled = number
        self.interrupted.set()
        self.events.put(Event("signal", code=number))

    def _loop(self) -> int:
        while True:
            event = self.events.get()
            if event.kind == "signal":
                log.info("signal %d: stopping the workers and deregistering", event.code)
                return 128 + event.code
            if event.kind == "rec":
                if self.target is None or event.rec.generation >= self.target.generation:
                    self.target = event.rec
                self.converge()
            elif event.kind == "watch_error":
                # The server may have restarted without our state: say what runs
                # again when the watch is back (the next "rec" converges).
                self.applied = None
            elif event.kind == "exit":
                workers = self.workers
                if workers is None or event.generation != workers.generation or workers.stopping:
                    continue  # a worker we stopped
                workers.codes[event.worker] = event.code
                if event.code != 0:
                    log.error("worker %d exited with %d: stopping the others", event.worker,
                              event.code)
                    self.stop_workers()
                    return event.code
                if len(workers.codes) == workers.world:
                    log.info("training finished at %d workers (sizes run: %s)", workers.world,
                             " -> ".join(map(str, self.sizes)))
                    self.workers = None
                    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="rescale-launch",
        description="Run one training job on this host at the size Rescale recommends.")
    p.add_argument("--server", default=None,
                   help="rescaled host:port[,host:port...] (default $RESCALE_SERVER or "
                        "localhost:50051)")
    p.add_argument("--job", required=True, help="job id, namespace/name")
    p.add_argument("--min", type=int, default=1, help="fewest workers (gang minimum)")
    p.add_argument("--max", type=int, required=True, help="most workers")
    p.add_argument("--total-samples", type=int, default=0,
                   help="samples the training processes in all (epochs x dataset)")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--preemptible", type=lambda v: v.lower() in ("1", "true", "yes"),
                   default=None, help="true/false: may be suspended for higher priorities")
    p.add_argument("--restart-cost", type=float, default=None,
                   help="seconds a restart costs (default: the server's)")
    p.add_argument("--gpus-per-replica", type=int, default=None)
    p.add_argument("--policy", default="")
    p.add_argument("--local-batch-size", type=int, default=0, help="samples per worker per step")
    p.add_argument("--initial-batch-size", type=int, default=0,
                   help="batch scaling: the total batch the training was tuned at (M0)")
    p.add_argument("--max-batch-size", type=int, default=0)
    p.add_argument("--min-local-batch-size", type=int, default=0)
    p.add_argument("--max-local-batch-size", type=int, default=0)
    p.add_argument("--gradient-accumulation", action="store_true")
    p.add_argument("--grace-period", type=float, default=30.0,
                   help="seconds between SIGTERM and SIGKILL when workers are stopped")
    p.add_argument("--deregister-timeout", type=float, default=60.0,
                   help="seconds to keep trying to deregister the job when training ended")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--no-python", action="store_true",
                   help="run COMMAND itself, not python3 COMMAND")
    p.add_argument("--tls", action="store_true", default=None)
    p.add_argument("--ca-file", default=None)
    p.add_argument("--cert-file", default=None)
    p.add_argument("--key-file", default=None)
    p.add_argument("--tls-server-name", default=None)
    p.add_argument("--token-file", default=None,
                   help="the launcher's token (role controller); default $RESCALE_TOKEN_FILE")
    p.add_argument("--worker-token-file", default=None,
                   help="the workers' token (role reporter); default: the launcher's")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("command", help="training script (or, with --no-python, program)")
    p.add_argument("command_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.min < 1 or args.max < args.min:
        p.error(f"--min {args.min} and --max {args.max}: need 1 <= min <= max")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="rescale-launch %(asctime)s %(levelname)s %(message)s")
    connection = _connection.Connection.from_env(
        server=args.server, tls=args.tls, ca_file=args.ca_file, cert_file=args.cert_file,
        key_file=args.key_file, tls_server_name=args.tls_server_name,
        token_file=args.token_file)
    command = ([args.command] if args.no_python else [sys.executable, "-u", args.command])
    launcher = Launcher(args, command + list(args.command_args), connection)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda number, frame: launcher.signal(number))
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())
