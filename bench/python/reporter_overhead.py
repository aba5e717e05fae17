"""Overhead of rescale.Reporter on a training loop (issue: <= 2% at 10 ms
steps, <= 20 us per recorded step), against a real rescaled of this build.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/reporter_overhead.py

Two figures, measured in one run:
  * loop overhead: a loop of 10 ms steps (time.sleep, which releases the GIL
    as PyTorch's kernels do) timed without and with `with reporter.step()`,
    in alternating rounds so drift on a shared machine hits both alike;
    the median over rounds of (with - without) / without.
  * cost per recorded step: record() called back to back, the sender thread
    delivering to rescaled at the same time (faster than any trainer records,
    so the buffer fills and drops: that is the contract); and the cost of
    the step() context manager around an empty block.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import grpc

import rescale
from rescale.v1 import rescale_pb2, rescale_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))


def start_rescaled(binary):
    process = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--metrics_listen=",
                                "--state=memory", "--capacity_gpus=8"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if "serving on " in line:
            return process, line.split("serving on ", 1)[1].split()[0]
    raise SystemExit("rescaled did not start")


def loop(steps, seconds, reporter=None):
    started = time.perf_counter()
    for _ in range(steps):
        if reporter is None:
            time.sleep(seconds)
        else:
            with reporter.step(batch_size=32):
                time.sleep(seconds)
    return time.perf_counter() - started


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rescaled", default=os.path.join(HERE, "..", "..", "build", "rescaled"))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=100, help="steps per round")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--records", type=int, default=200_000)
    args = p.parse_args()

    process, address = start_rescaled(args.rescaled)
    try:
        channel = grpc.insecure_channel(address)
        rescale_pb2_grpc.JobServiceStub(channel).RegisterJob(rescale_pb2.RegisterJobRequest(
            spec=rescale_pb2.JobSpec(job_id="bench/reporter", min_replicas=1, max_replicas=8,
                                     local_batch_size=32)))
        reporter = rescale.Reporter("bench/reporter", server=address, pod="bench-0",
                                    world_size=1, batch_size=32, flush_interval=0.5)
        seconds = args.step_ms / 1000
        loop(10, seconds, reporter)  # warm up: the channel connects
        ratios = []
        for _ in range(args.rounds):
            without = loop(args.steps, seconds)
            with_reporter = loop(args.steps, seconds, reporter)
            ratios.append((with_reporter - without) / without)
        print(f"loop of {args.step_ms:g} ms steps, {args.rounds} rounds of {args.steps}: "
              f"overhead median {100 * statistics.median(ratios):+.2f}% "
              f"(min {100 * min(ratios):+.2f}%, max {100 * max(ratios):+.2f}%)")

        step = 10**9
        started = time.perf_counter()
        for i in range(args.records):
            reporter.record(step + i, 0.01)
        per_record = (time.perf_counter() - started) / args.records
        assert reporter.flush(timeout=120), "not delivered"
        # step() itself, on a reporter that only buffers (an empty block is
        # below rescaled's plausible step time, so these are not sent).
        local = rescale.Reporter("bench/reporter", pod="bench-1", world_size=1, batch_size=32,
                                 transport=object(), start=False,
                                 buffer_capacity=args.records)
        started = time.perf_counter()
        for _ in range(args.records // 4):
            with local.step():
                pass
        per_step = (time.perf_counter() - started) / (args.records // 4)
        stats = reporter.stats()
        print(f"record(): {1e6 * per_record:.2f} us per call; step() around an empty block: "
              f"{1e6 * per_step:.2f} us; delivered {stats.accepted + stats.rejected} of "
              f"{stats.queued} (dropped {stats.dropped}, failed RPCs {stats.failed_rpcs})")
        reporter.close()
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    sys.exit(main())
