"""rescale.Reporter: times a trainer's steps and delivers them to rescaled.

The contract is rescale-agent's (client/agent/sender.h), in Python:
  * record() and step() only append to a bounded in-memory buffer under a
    short lock: training never waits on the network. A background thread
    sends batches (MetricsService.ReportSamples, one RPC per batch, whose
    answer acknowledges exactly that batch).
  * A failed send leaves its samples in place; they are resent after an
    exponential backoff with equal jitter. Every sample carries its step
    number, and rescaled stores at most one sample per pod and step, so a
    batch whose answer was lost may be resent safely: nothing accepted is
    lost while the buffer has room, nothing is counted twice.
  * With the buffer full the oldest sample not in flight is dropped and
    counted (stats().dropped). With rescaled down training runs at full
    speed and the loss is counted; when it is back delivery resumes.
  * Nothing raises into the training loop: a missing configuration turns
    the reporter off (logged once), errors are counted and logged.

Configuration comes from arguments, else from the environment rescale-launch
(or a Kubernetes pod spec) sets, so `Reporter()` needs no arguments:
  RESCALE_JOB      job id, namespace/name (no job: reporting is off)
  POD_NAME         this worker's pod (default: the host name); with several
                   workers per pod (LOCAL_WORLD_SIZE > 1) "-rank<RANK>" is
                   appended, so each process is its own reporter
  WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE  torchrun's contract
  RESCALE_GPU_TYPE the GPU type this worker runs on, the node's
                   nvidia.com/gpu.product label (default: not said); sent
                   as SampleBatch.gpu_type, so rescaled keeps a curve per type
  RESCALE_SERVER and the TLS/token variables of rescale._connection
Step numbers should be the trainer's global step, restored from its
checkpoint (`reporter.set_step(n)` or `record(step, ...)`): rescaled credits
each job step once across pods, restarts and resizes.

Time and randomness are injected (clock, timer, wall_ns, uniform01, transport) so
tests drive the send loop deterministically with pump().
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import logging
import os
import random
import re
import socket
import threading
import time
import weakref
from typing import Callable, Mapping, Optional

import grpc

from rescale import _connection
from rescale.v1 import rescale_pb2, rescale_pb2_grpc

log = logging.getLogger("rescale.reporter")

# A GPU type name: a Kubernetes label value, as rescale/names.h's IsGpuTypeName.
_GPU_TYPE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")

# RPC codes after which resending the same batch cannot succeed.
_PERMANENT = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED)


@dataclasses.dataclass
class ReporterStats:
    queued: int = 0       # samples recorded
    sent: int = 0         # samples put on the wire, resends included
    acked: int = 0        # samples in batches the server answered
    accepted: int = 0     # ... and stored
    duplicates: int = 0   # ... and already stored (resends)
    rejected: int = 0     # ... and refused as invalid (logged)
    dropped: int = 0      # removed unsent because the buffer was full
    abandoned: int = 0    # refused for good by the server (permanent RPC error)
    failed_rpcs: int = 0  # failed attempts, each retried or abandoned
    pending: int = 0      # still unacknowledged


@dataclasses.dataclass
class _Sample:
    step: int
    seconds: float
    batch_size: int
    wall_ns: int
    grad_sqr: Optional[float] = None
    grad_var: Optional[float] = None
    grad_batch: int = 0


class GrpcTransport:
    """ReportSamples on the current server, following the leader (HA)."""

    def __init__(self, connection: _connection.Connection, timeout: float = 5.0):
        self._servers = _connection.ServerList(connection)
        self._timeout = timeout

    def send(self, batch: "rescale_pb2.SampleBatch") -> "rescale_pb2.IngestSummary":
        address, channel = self._servers.current()
        try:
            return rescale_pb2_grpc.MetricsServiceStub(channel).ReportSamples(
                batch, timeout=self._timeout)
        except grpc.RpcError as error:
            self._servers.after_failure(address, error)
            raise

    def close(self) -> None:
        self._servers.close()


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.RpcError) and hasattr(error, "details"):
        return f"{error.code().name}: {error.details()}"
    return repr(error)


def _int_env(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not an integer") from None


def _gpu_type(argument: Optional[str], env: Mapping[str, str]) -> str:
    """The GPU type the batches name: the argument, else RESCALE_GPU_TYPE,
    else "" (not said). Checked here, like world_size: rescaled would refuse
    every sample of a bad name one by one while training went on unmeasured."""
    source, value = "gpu_type", argument
    if value is None:
        source, value = "RESCALE_GPU_TYPE", env.get("RESCALE_GPU_TYPE", "")
    if value and not _GPU_TYPE_NAME.fullmatch(value):
        raise ValueError(
            f"{source}: {value!r} is not a GPU type name: 1-63 characters of A-Z, a-z, 0-9, "
            "'-', '_' and '.', starting and ending with a letter or digit "
            "(a node label value, e.g. NVIDIA-A100-SXM4-40GB)")
    return value


def pod_name(env: Mapping[str, str]) -> str:
    """This process's reporter identity (see the module comment)."""
    base = env.get("POD_NAME") or socket.gethostname()
    local_world = _int_env(env, "LOCAL_WORLD_SIZE") or 1
    rank = env.get("RANK")
    if local_world > 1 and rank is not None:
        return f"{base}-rank{rank}"
    return base


class _StepTimer:
    """What `with reporter.step(...) as s:` yields: attach gradient
    statistics of the step before the block ends."""

    __slots__ = ("grad_sqr", "grad_var", "grad_batch", "batch_size")

    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.grad_sqr = None
        self.grad_var = None
        self.grad_batch = 0

    def gradients(self, sqr: float, var: float, batch: int = 0) -> None:
        self.grad_sqr, self.grad_var, self.grad_batch = float(sqr), float(var), int(batch)


def _close_at_exit(ref, timeout):
    reporter = ref()
    if reporter is not None:
        reporter.close(timeout)


class Reporter:
    def __init__(self, job: Optional[str] = None, *, server: Optional[str] = None,
                 pod: Optional[str] = None, world_size: Optional[int] = None,
                 gpu_type: Optional[str] = None,
                 batch_size: int = 0, connection: Optional[_connection.Connection] = None,
                 env: Optional[Mapping[str, str]] = None, max_batch: int = 500,
                 flush_interval: float = 2.0, buffer_capacity: int = 100_000,
                 initial_backoff: float = 0.2, max_backoff: float = 30.0,
                 rpc_timeout: float = 5.0, transport=None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns,
                 timer: Callable[[], float] = time.perf_counter,
                 uniform01: Optional[Callable[[], float]] = None,
                 start: bool = True, exit_timeout: float = 2.0):
        env = os.environ if env is None else env
        if max_batch < 1 or buffer_capacity < 1:
            raise ValueError("max_batch and buffer_capacity: must be at least 1")
        self.job = job if job is not None else env.get("RESCALE_JOB", "")
        self.pod = pod if pod is not None else pod_name(env)
        self.world_size = world_size if world_size is not None else (
            _int_env(env, "WORLD_SIZE") or 1)
        if self.world_size < 1:
            raise ValueError(f"world_size: {self.world_size} is below 1")
        self.rank = _int_env(env, "RANK") or 0
        self.gpu_type = _gpu_type(gpu_type, env)
        self.batch_size = batch_size
        self.enabled = bool(self.job)
        self._max_batch = max_batch
        self._flush_interval = flush_interval
        self._capacity = buffer_capacity
        self._clock = clock
        self._wall_ns = wall_ns
        self._timer = timer
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._buffer = collections.deque()  # guarded by _lock; oldest first
        self._oldest_at = None              # guarded by _lock: clock() of buffer[0]
        self._in_flight = 0                 # guarded by _lock: first n are being sent
        self._closed = False                # guarded by _lock
        # guarded by _lock; its failures are the consecutive failed sends
        self._backoff = _connection.Backoff(
            initial_backoff, max_backoff,
            uniform01 or random.Random(hash((self.job, self.pod))).random)
        self._retry_at = float("-inf")      # guarded by _lock
        self._stats = ReporterStats()       # guarded by _lock
        self._last_error = None             # guarded by _lock
        self._next_step = 0                 # guarded by _lock
        self._rejections_logged = 0         # only the sender thread
        self._thread = None
        self._transport = transport
        if not self.enabled:
            log.warning("rescale: no job id (RESCALE_JOB or Reporter(job=...)): reporting is off")
            return
        if self._transport is None:
            if connection is None:
                connection = _connection.Connection.from_env(env, server=server)
            self._transport = GrpcTransport(connection, rpc_timeout)
        if start:
            self._thread = threading.Thread(target=self._run, name="rescale-reporter",
                                            daemon=True)
            self._thread.start()
            # A trainer that exits without close() still delivers its last
            # samples, for at most exit_timeout seconds (rescaled down: lost,
            # and the exit is not held longer).
            atexit.register(_close_at_exit, weakref.ref(self), exit_timeout)

    # ---- the training side: never blocks on the network, never raises ----

    def set_step(self, step: int) -> None:
        """The global step the next step() reports (after loading a checkpoint)."""
        with self._lock:
            self._next_step = int(step)

    @contextlib.contextmanager
    def step(self, batch_size: Optional[int] = None):
        """Times the block as one training step of `batch_size` samples on
        this worker (default: the reporter's batch_size, else the job's). A
        block that raises is not recorded."""
        timer = _StepTimer(batch_size)
        started = self._timer()
        yield timer
        seconds = self._timer() - started
        with self._lock:
            step = self._next_step
        self.record(step, seconds, timer.batch_size, grad_sqr=timer.grad_sqr,
                    grad_var=timer.grad_var, grad_batch=timer.grad_batch)

    def record(self, step: int, seconds: float, batch_size: Optional[int] = None, *,
               grad_sqr: Optional[float] = None, grad_var: Optional[float] = None,
               grad_batch: int = 0) -> None:
        """Records one measured step; the next step() reports step + 1."""
        if not self.enabled:
            return
        sample = _Sample(int(step), float(seconds),
                         int(batch_size if batch_size is not None else self.batch_size),
                         self._wall_ns(), grad_sqr, grad_var, int(grad_batch or 0))
        with self._lock:
            self._next_step = max(self._next_step, sample.step + 1)
            if self._closed:
                return
            self._stats.queued += 1
            if len(self._buffer) >= self._capacity:
                if self._in_flight < len(self._buffer):
                    del self._buffer[self._in_flight]
                    self._stats.dropped += 1
                else:  # everything is in flight: the new sample is the one dropped
                    self._stats.dropped += 1
                    return
            if not self._buffer:
                self._oldest_at = self._clock()
            self._buffer.append(sample)
            if len(self._buffer) == 1 or len(self._buffer) - self._in_flight >= self._max_batch:
                self._wake.notify_all()

    def stats(self) -> ReporterStats:
        with self._lock:
            out = dataclasses.replace(self._stats)
            out.pending = len(self._buffer)
            return out

    def last_error(self) -> Optional[BaseException]:
        with self._lock:
            return self._last_error

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits (real time) until every recorded sample is acknowledged;
        False when `timeout` passed first."""
        if not self.enabled:
            return True
        deadline = time.monotonic() + timeout
        with self._lock:
            self._retry_at = min(self._retry_at, self._clock())  # try now
            self._oldest_at = float("-inf") if self._buffer else None  # due now
            self._wake.notify_all()
            while self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(min(left, 0.1))
                if self._buffer:
                    self._oldest_at = float("-inf")
            return True

    def close(self, timeout: float = 5.0) -> None:
        """Delivers what it can within `timeout`, then stops the sender."""
        if not self.enabled:
            return
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if hasattr(self._transport, "close") and (
                self._thread is None or not self._thread.is_alive()):
            self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the sender side ----

    def _due_locked(self, now: float) -> bool:
        if not self._buffer or now < self._retry_at:
            return False
        return (self._closed or len(self._buffer) >= self._max_batch or
                now - self._oldest_at >= self._flush_interval)

    def _next_attempt_locked(self) -> float:
        if not self._buffer:
            return float("inf")
        if self._closed or len(self._buffer) >= self._max_batch:
            return self._retry_at
        return max(self._retry_at, self._oldest_at + self._flush_interval)

    def pump(self) -> bool:
        """Sends one batch if one is due at clock() and no backoff is pending;
        whether it sent. The background thread calls it; tests may too."""
        with self._lock:
            if not self._due_locked(self._clock()):
                return False
            batch = list(self._buffer)[:self._max_batch]
            self._in_flight = len(batch)
            self._stats.sent += len(batch)
        request = rescale_pb2.SampleBatch(job_id=self.job, pod=self.pod, gpu_type=self.gpu_type)
        for s in batch:
            sample = request.samples.add(world_size=self.world_size, step_seconds=s.seconds,
                                         batch_size=s.batch_size,
                                         timestamp_unix_nanos=s.wall_ns, step=s.step)
            if s.grad_sqr is not None and s.grad_var is not None:
                sample.grad_sqr, sample.grad_var = s.grad_sqr, s.grad_var
                sample.grad_batch = s.grad_batch
        try:
            summary = self._transport.send(request)
            error = None
        except Exception as e:  # grpc.RpcError, or anything a transport raises
            summary, error = None, e
        permanent = isinstance(error, grpc.RpcError) and error.code() in _PERMANENT
        with self._lock:
            self._in_flight = 0
            if error is None or permanent:
                for _ in batch:
                    self._buffer.popleft()
                self._oldest_at = self._clock() if self._buffer else None
            recovered = self._backoff.failures if error is None else 0
            if error is None:
                self._backoff.reset()
                self._retry_at = float("-inf")
                self._last_error = None
                self._stats.acked += len(batch)
                self._stats.accepted += summary.accepted
                self._stats.rejected += summary.rejected
                self._stats.duplicates += summary.duplicates
            else:
                self._stats.failed_rpcs += 1
                self._last_error = error
                if permanent:
                    self._stats.abandoned += len(batch)
                else:
                    self._retry_at = self._clock() + self._backoff.next_delay()
            failures = self._backoff.failures
            self._wake.notify_all()
        if error is not None and (permanent or failures == 1):
            # Once per outage, not once per retry.
            log.warning("rescale: sending %d samples failed%s: %s", len(batch),
                        " for good" if permanent else ", retrying until rescaled answers",
                        _describe(error))
        elif error is None and recovered:
            log.warning("rescale: rescaled answers again after %d failed attempts", recovered)
        elif error is None and summary.rejected and self._rejections_logged < 10:
            self._rejections_logged += 1
            reason = summary.rejections[0].reason if summary.rejections else ""
            log.warning("rescale: rescaled refused %d samples: %s", summary.rejected, reason)
        return True

    def _run(self) -> None:
        while True:
            try:
                if self.pump():
                    continue
            except Exception:  # never let the sender die: log, back off, go on
                log.exception("rescale: reporter send loop")
            with self._lock:
                if self._closed and not self._buffer:
                    return
                wait = self._next_attempt_locked() - self._clock()
                if self._closed and wait > 0 and self._retry_at == float("-inf"):
                    wait = 0
                if wait > 0:
                    self._wake.wait(min(wait, 1.0))
