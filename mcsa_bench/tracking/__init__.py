"""Tracking and lifecycle: where a run's results go and how every run ends in a terminal state.

- :mod:`~mcsa_bench.tracking.record`: the run record, what a run leaves in the store (tag names, key
  settings, the config hash, the metric catalogue), for the jobs that write it and the report that reads it;
- :mod:`~mcsa_bench.tracking.store`: MLflow stores (checks, first-time creation, one run per job,
  stale runs); :mod:`~mcsa_bench.tracking.writer`: a run's writes, sent from a background thread
  through outages; :mod:`~mcsa_bench.tracking.localrecord`: the copy on local disk;
  :mod:`~mcsa_bench.tracking.sync`: that copy uploaded later.
- :mod:`~mcsa_bench.tracking.lifecycle`: signals, process identity, heartbeats;
  :mod:`~mcsa_bench.tracking.ui`: MLflow's UI for a local store.

Below the job layer (:mod:`mcsa_bench.jobs`): nothing here imports models, methods or Hydra (the run
record names methods and metrics as plain strings).
"""
