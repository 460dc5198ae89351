"""`mcsa-bench sync` (mcsa_bench.tracking.sync): a job directory uploaded into another store, once."""

from __future__ import annotations

import json

from tests.support import cli_in_process


def test_sync_into_another_store_twice_makes_one_copy_with_the_run_level_metrics(tmp_path, store_in, monkeypatch):
    """Issue 39: a second `sync DIR tracking.uri=<another store>` made a second full copy, and the
    copies lacked the run-level `diverged` metric, which the local record did not hold."""
    from mlflow.tracking import MlflowClient

    store_in(tmp_path)
    assert cli_in_process("run", "model.dim=2", "n_iters=100", "eval_every=50", cwd=tmp_path,
                          monkeypatch=monkeypatch).returncode == 0
    directory = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl")).parent
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["iteration"] == 100 and rows[-1]["diverged"] == 0.0  # the run-level metrics, at the end
    other = f"sqlite:///{store_in(tmp_path, 'other/mlflow.db') / 'other' / 'mlflow.db'}"
    first = cli_in_process("sync", str(directory), f"tracking.uri={other}", cwd=tmp_path, monkeypatch=monkeypatch)
    second = cli_in_process("sync", str(directory), f"tracking.uri={other}", cwd=tmp_path, monkeypatch=monkeypatch)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "0 metric values added" in second.stdout
    client = MlflowClient(other)
    copy, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    assert copy.info.status == "FINISHED" and copy.data.metrics["diverged"] == 0.0
    original, = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}").search_runs(["1"])
    assert copy.data.tags["mcsa_bench.synced_from"] == original.info.run_id
    assert len(client.get_metric_history(copy.info.run_id, "kl_inclusive")) == 3
