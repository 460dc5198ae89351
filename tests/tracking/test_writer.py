"""The store writer (mcsa_bench.tracking.writer) under a signal: no metric point lost or sent twice."""

from __future__ import annotations

import collections
import os
import signal
import time

import pytest


def test_a_signal_while_metrics_are_sent_loses_none_and_sends_none_twice(tmp_path, store_in, monkeypatch):
    """SIGINT arriving while a batch of metrics is on its way to the store (issue 22: the batches
    already sent stayed queued and were all sent again at the end, 4.6 s per 1,000 points on MLflow's
    IntegrityError path, so a run outlived its supervisor's grace period): every point reaches the
    store exactly once, the run ends KILLED within the signal's drain bound."""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking import store as tracking
    from mcsa_bench.tracking.lifecycle import install_signal_handlers
    from mcsa_bench.tracking.writer import DRAIN_AFTER_SIGNAL_SECONDS

    uri = f"sqlite:///{store_in(tmp_path) / 'outputs' / 'mlflow.db'}"
    store, sent = MlflowClient(uri), collections.Counter()

    class SignalledClient:
        """The real client; its first batch of metrics brings a SIGINT while it is being written."""

        def __getattr__(self, name):
            return getattr(store, name)

        def log_batch(self, run_id, metrics=(), **kwargs):
            if metrics and not sent:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            store.log_batch(run_id, metrics=metrics, **kwargs)
            sent.update((m.key, m.step) for m in metrics)

    monkeypatch.setattr(tracking, "_client", lambda uri: SignalledClient())
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    logged = 0
    try:
        install_signal_handlers()
        tracker = tracking.JobTracker(uri, "0", "interrupted", {})
        tracker.log_params({"a": "1"})
        with pytest.raises(KeyboardInterrupt):
            for iteration in range(100_000):  # the evaluations of a run, 3 points each
                tracker(SimpleNamespace(iteration=iteration, metrics={"x": 1.0, "y": 2.0, "z": 3.0}))
                logged = iteration + 1
                time.sleep(0.0005)
        started = time.monotonic()
        tracker.finish("KILLED")
        ending = time.monotonic() - started
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert logged >= 334 and max(sent.values()) == 1  # a batch of 1,000 went out; none went twice
    run = store.get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.params == {"a": "1"} and tracker.lost is None
    assert len(store.get_metric_history(tracker.run_id, "x")) >= logged  # every point logged before the signal
    assert ending < DRAIN_AFTER_SIGNAL_SECONDS
