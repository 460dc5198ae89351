"""Rows written straight into MLflow's tables (mcsa_bench.tracking.tablewriter) against the rows MLflow's
own client writes for the same calls. (TableWriter, merge's path, is compared in test_bundle.py.)"""

from __future__ import annotations

import math

import pytest


def metric_rows(uri: str, run_id: str) -> dict[str, list[tuple]]:
    import sqlite3

    database = sqlite3.connect(uri.removeprefix("sqlite:///"))
    try:
        return {table: sorted(database.execute(f"SELECT key, value, timestamp, step, is_nan FROM {table} "
                                               "WHERE run_uuid = ?", (run_id,)).fetchall())
                for table in ("metrics", "latest_metrics")}
    finally:
        database.close()


def test_direct_metrics_write_the_rows_mlflows_client_writes(tmp_path, store_in):
    """Batches that add a metric, make a later point the latest, leave an earlier one behind, tie on step
    and timestamp (the larger value wins), carry NaN and ±inf, and one retried after the store took it."""
    from mlflow.entities import Metric

    from mcsa_bench.tracking.store import _client, prepare_store
    from mcsa_bench.tracking.tablewriter import DirectMetrics

    store_in(tmp_path)
    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    experiment = prepare_store(uri, "direct")
    client = _client(uri)
    batches = [
        [Metric("kl", 2.0, 10, 0), Metric("lpd", math.nan, 10, 0)],
        [Metric("kl", 1.0, 20, 100), Metric("lpd", -1.5, 20, 100), Metric("ess", math.inf, 20, 100)],
        [Metric("kl", 5.0, 5, 50), Metric("ess", -math.inf, 30, 100), Metric("ess", 3.0, 30, 100)],
        [Metric("lpd", -2.0, 20, 100), Metric("lpd", -1.0, 20, 100)],
    ]
    runs = {}
    for name, writes in (("client", client), ("direct", DirectMetrics(client))):
        runs[name] = client.create_run(experiment, run_name=name).info.run_id
        for batch in [*batches, batches[1]]:  # the last: a retry of a batch the store holds
            writes.log_batch(runs[name], metrics=batch)
    direct, mlflow = metric_rows(uri, runs["direct"]), metric_rows(uri, runs["client"])
    assert len(direct["metrics"]) == 10 and len(direct["latest_metrics"]) == 3
    assert direct == mlflow
    assert client.get_run(runs["direct"]).data.metrics == client.get_run(runs["client"]).data.metrics


def test_direct_metrics_refuse_a_deleted_run(tmp_path, store_in):
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from mcsa_bench.tracking.store import _client, prepare_store
    from mcsa_bench.tracking.tablewriter import DirectMetrics

    store_in(tmp_path)
    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    client = _client(uri)
    run_id = client.create_run(prepare_store(uri, "direct")).info.run_id
    client.delete_run(run_id)
    with pytest.raises(MlflowException, match="is deleted"):
        DirectMetrics(client).log_batch(run_id, metrics=[Metric("kl", 1.0, 0, 0)])
    assert metric_rows(uri, run_id) == {"metrics": [], "latest_metrics": []}
