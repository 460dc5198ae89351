"""The bulk reader of MLflow's tables (mcsa_bench.tracking.tables) returns exactly what the client API
returns, on a small SQLite store that holds every case: tags, params, latest metrics with NaN, ±inf and
a re-logged step, deleted and unfinished runs, runs of another experiment, a sweep's job list."""

from __future__ import annotations

import math
import shutil

import pytest

from mcsa_bench.tracking.tables import ClientReader, SqlReader, metric_series, open_reader, run_histories


@pytest.fixture(scope="module")
def store(tmp_path_factory, migrated_store):
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("tables")
    shutil.copy(migrated_store, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiments = [client.create_experiment(name, artifact_location=(root / name).as_uri())
                   for name in ("grid", "other")]
    parent = client.create_run(experiments[0], run_name="sweep", tags={"mcsa_bench.role": "sweep"}).info.run_id
    client.log_text(parent, '{"resume":false,"jobs":["seed=0"],"config_hashes":[]}', "sweep_jobs.json")
    for i in range(12):
        run = client.create_run(experiments[i % 2], run_name=f"job-{i}", start_time=1000 + i // 3,
                                tags={"mcsa_bench.role": "job", "mlflow.parentRunId": parent, "seed": str(i)})
        run_id = run.info.run_id
        metrics = [Metric("test_lpd", -1.0 / (s + 1) + i, 10 * s, s) for s in range(5)]
        metrics += [Metric("grad_norm", math.nan if i == 2 else float(i), 7, 4), Metric("test_lpd", 9.0, 1, 4),
                    Metric("odd", math.inf if i % 3 else -math.inf, 5, 2)]
        client.log_batch(run_id, metrics=metrics, params=[Param("seed", str(i)), Param("model.dim", "2")],
                         tags=[RunTag("extra", "x" * i)])
        if i == 5:
            client.delete_run(run_id)
        elif i != 7:
            client.set_terminated(run_id, "FINISHED" if i % 4 else "FAILED")
    return uri, client, experiments, parent


def same(a, b) -> bool:
    """Equal, with NaN equal to NaN (a run's NaN metric must read back as NaN from both)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_the_bulk_reader_returns_what_the_client_api_returns(store):
    uri, client, experiments, parent = store
    bulk, api = open_reader(uri), ClientReader(client)
    assert isinstance(bulk, SqlReader)
    assert bulk.experiments() == api.experiments()
    for experiment in experiments:
        for selection in ({}, {"tag": ("mlflow.parentRunId", parent)}, {"tag": ("seed", "4")},
                          {"status": "FINISHED"}, {"tag": ("mcsa_bench.role", "job"), "status": "FAILED"}):
            read = bulk.runs(experiment, **selection)
            assert same([vars(r) for r in read], [vars(r) for r in api.runs(experiment, **selection)]), selection
        run_ids = [r.run_id for r in api.runs(experiment)]
        assert run_ids, "every experiment holds runs to compare"
        for metric in ("test_lpd", "grad_norm", "odd", "never_logged"):
            assert same(bulk.histories(run_ids, metric), api.histories(run_ids, metric)), metric
    everything = api.runs(experiments[0])
    assert {r.status for r in everything} == {"FINISHED", "FAILED", "RUNNING"}
    assert any(math.isnan(r.metrics.get("grad_norm", 0.0)) for r in everything)  # the NaN case is compared
    assert len({r.start_time for r in everything}) < len(everything)  # ties in start time are ordered alike
    deleted = next(r for r in client.search_runs([experiments[1]], run_view_type=3) if r.info.run_name == "job-5")
    assert vars(bulk.run(deleted.info.run_id)) == vars(api.run(deleted.info.run_id))
    assert bulk.run("0" * 32) is None and api.run("0" * 32) is None
    parent_run = bulk.run(parent)
    assert bulk.artifact_text(parent_run, "sweep_jobs.json") == api.artifact_text(parent_run, "sweep_jobs.json")
    assert bulk.artifact_text(parent_run, "sweep_jobs.json").startswith('{"resume"')
    assert bulk.artifact_text(parent_run, "nothing.json") is None


def test_histories_are_read_again_alike_and_leave_the_store_as_it_was(store):
    """The run ids go into a temporary table of the reading connection: a second read (on the pooled
    connection) finds none left over, an id given twice is read once, and the store gains no table."""
    import sqlite3

    uri, client, experiments, _ = store
    run_ids = [r.run_id for r in ClientReader(client).runs(experiments[0])]
    path = uri.removeprefix("sqlite:///")
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    reader = open_reader(uri)
    whole = reader.histories(run_ids, "test_lpd")
    assert reader.histories(run_ids + run_ids[:2], "test_lpd") == whole and len(whole) == len(run_ids) - 1  # the parent
    assert reader.histories([], "test_lpd") == {} and metric_series(reader, [], "test_lpd") == {}
    assert sqlite3.connect(path).execute("SELECT name FROM sqlite_master ORDER BY name").fetchall() == tables


def test_every_metrics_histories_of_runs_read_at_once_are_each_metrics_histories(store):
    """What an export reads, a chunk of runs' every metric in one query: the histories the client API gives
    metric by metric (NaN, ±inf and a re-logged step included), from either reader; no run asked twice."""
    uri, client, experiments, _ = store
    api = ClientReader(client)
    runs = api.runs(experiments[0])
    metrics = {k for r in runs for k in r.metrics}
    assert metrics == {"test_lpd", "grad_norm", "odd"}
    expected = {}
    for metric in metrics:
        for run_id, history in api.histories([r.run_id for r in runs], metric).items():
            expected.setdefault(run_id, {})[metric] = history
    for reader in (open_reader(uri), api):
        assert same(run_histories(reader, runs + runs[:2]), expected)
    assert run_histories(open_reader(uri), []) == {}


def test_metric_series_are_each_steps_latest_value_alike_from_either_reader(store):
    """What a figure draws: a run's steps in order and the value logged last at each (a re-logged step: the
    latest timestamp's), NaN kept, ±inf as MLflow keeps them; the same from MLflow's tables in bulk and from
    the client API's histories, and equal to the histories taken step by step."""
    uri, client, experiments, _ = store
    api = ClientReader(client)
    run_ids = [r.run_id for r in api.runs(experiments[0])]
    for metric in ("test_lpd", "grad_norm", "odd", "never_logged"):
        expected = {}
        for run_id, history in api.histories(run_ids, metric).items():
            latest = {}
            for step, _, value in sorted(history, key=lambda point: point[:2]):  # by step, then timestamp
                latest[step] = value
            expected[run_id] = (sorted(latest), [latest[step] for step in sorted(latest)])
        for series in (metric_series(open_reader(uri), run_ids, metric), metric_series(api, run_ids, metric)):
            assert series.keys() == expected.keys(), metric
            for run_id, (steps, values) in series.items():
                assert steps.dtype == values.dtype == float and steps.tolist() == expected[run_id][0]
                assert same(values.tolist(), expected[run_id][1]), metric
    relogged = metric_series(open_reader(uri), run_ids, "test_lpd")
    assert all(steps.tolist() == [0, 1, 2, 3, 4] and values[4] != 9.0 for steps, values in relogged.values())
    assert any(math.isnan(values[0]) for _, values in metric_series(open_reader(uri), run_ids, "grad_norm").values())


def test_a_server_uri_is_read_through_the_client_api_and_a_missing_file_is_an_error(tmp_path):
    from mcsa_bench.api import ConfigurationError

    assert isinstance(open_reader("http://127.0.0.1:9"), ClientReader)  # nothing is sent until asked
    with pytest.raises(ConfigurationError, match="no MLflow store at"):
        open_reader(f"sqlite:///{tmp_path / 'absent.db'}")
