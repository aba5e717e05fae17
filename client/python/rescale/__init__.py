"""Rescale's trainer SDK.

  import rescale
  reporter = rescale.Reporter()          # reads RESCALE_JOB, RESCALE_SERVER, ...
  for batch in loader:
      with reporter.step(batch_size=len(batch)):
          train_step(batch)

rescale.torch adds gradient noise statistics for DistributedDataParallel and
the recommended batch; rescale.launch runs a job without Kubernetes.
"""
from rescale._connection import Connection
from rescale.reporter import Reporter, ReporterStats

__all__ = ["Connection", "Reporter", "ReporterStats"]
__version__ = "0.1.0"
