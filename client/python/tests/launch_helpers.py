"""Launch: rescale-launch running the example trainer, as the launcher tests
start it, its output collected line by line."""
import json
import os
import re
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "..", "..", "examples", "pytorch",
                                        "train.py"))
LOCAL_BATCH = 64
# Divisible by 64 x every world size 1..4, so every step is full.
UNIT = LOCAL_BATCH * 12


class Launch:
    """rescale-launch as a user runs it, its output collected line by line."""

    def __init__(self, server, job, tmp_path, *flags, total=UNIT * 100):
        self.summary = tmp_path / f"{job.replace('/', '-')}.json"
        argv = [sys.executable, "-u", "-m", "rescale.launch", "--server", server, "--job", job,
                "--total-samples", str(total), "--local-batch-size", str(LOCAL_BATCH),
                "--grace-period", "20", *flags, EXAMPLE, "--checkpoint-dir",
                str(tmp_path / f"ckpt-{job.replace('/', '-')}"), "--checkpoint-every", "20",
                "--summary", str(self.summary)]
        self.total = total
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append(None)
            self.changed.notify_all()

    def wait_for(self, pattern, after=0, timeout=240):
        """The first output line from index `after` matching `pattern`, and its index."""
        regex = re.compile(pattern)
        with self.changed:
            index = after
            while True:
                while index < len(self.lines):
                    line = self.lines[index]
                    assert line is not None, f"exited before {pattern!r}:\n" + self.output()
                    if regex.search(line):
                        return regex.search(line), index
                    index += 1
                assert self.changed.wait(timeout), f"no {pattern!r} in {timeout}s:\n" + \
                    self.output()

    def output(self):
        return "".join(line for line in self.lines if line)

    def finish(self, timeout=300):
        code = self.process.wait(timeout)
        with self.changed:
            while not self.lines or self.lines[-1] is not None:
                self.changed.wait(10)
        assert code == 0, self.output()
        return json.loads(self.summary.read_text())

    def final(self):
        out = self.output()
        processed = int(re.search(r"final: samples_processed=(\d+)", out).group(1))
        measured = {int(n): float(rate) for n, rate in re.findall(
            r"final: measured replicas=(\d+) samples_per_second=([\d.]+)", out)}
        return processed, measured
