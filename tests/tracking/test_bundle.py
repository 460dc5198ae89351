"""Results that travel (mcsa_bench.tracking.bundle): `mcsa-bench export` -> `merge` into an empty store ->
the same report, merging twice adds nothing, a report straight from the bundle; bad bundles are one line."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest

from mcsa_bench.tracking.record import MERGING_TAG, ORIGIN_TAG
from tests.support import cli_in_process

SWEEP = ["run", "-m", "experiment=logistic_pima", "size=tiny", "estimator=msc,pmcsa"]


def tables_of(directory: Path, origin=lambda run_id: run_id) -> tuple[bytes, str, list]:
    """What two reports of the same runs share: tables.tex, tables.md without its provenance (it names the
    store read), and summary.json's tables with each cell's runs named by ``origin`` (a copy's original id)."""
    markdown = (directory / "tables.md").read_text(encoding="utf-8").split("\n## Provenance\n")[0]
    tables = json.loads((directory / "summary.json").read_text(encoding="utf-8"))["tables"]
    for cell in (cell for table in tables for cell in table["cells"]):
        cell["run_ids"] = {seed: origin(run_id) for seed, run_id in cell["run_ids"].items()}
    return (directory / "tables.tex").read_bytes(), markdown, tables


def counts(uri: str) -> dict[str, int]:
    import sqlite3

    database = sqlite3.connect(uri.removeprefix("sqlite:///"))
    try:
        return {table: database.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("runs", "tags", "params", "metrics", "latest_metrics")}
    finally:
        database.close()


@pytest.mark.slow  # two real sweeps, five reports, three merges in this process: about 40 s
def test_export_merge_into_an_empty_store_gives_the_same_report_and_merging_twice_adds_nothing(
        tmp_path, store_in, monkeypatch):
    """A resume=true sweep (one job's run deleted, so the report lists it missing; the reused runs of the
    first sweep) exported, merged into an empty store: its report's tables are byte for byte those of
    the original's; a second merge, and a merge back into the source store, copy nothing."""
    from mlflow.tracking import MlflowClient

    def cli(*args):
        result = cli_in_process(*args, cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0, result.stderr
        return result.stdout

    store_in(tmp_path)
    source = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    cli(*SWEEP, "seed=0,1")
    cli(*SWEEP, "seed=0,1,2", "resume=true")
    client = MlflowClient(source)
    experiment = client.get_experiment_by_name("mcsa-bench").experiment_id
    (parent,) = client.search_runs([experiment], "tags.`mcsa_bench.role` = 'sweep'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
    children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    client.delete_run(next(r for r in children if r.data.tags["method"] == "msc").info.run_id)

    assert "runs" in cli("export", "--sweep", "latest", "--out", "sweep.zip")
    empty = tmp_path / "elsewhere"
    store_in(empty, "merged.db")
    merged = f"sqlite:///{empty}/merged.db"
    # the parent, its one job's run left, and the 4 runs of the first sweep that it reused
    assert "6 runs copied, 0 already" in cli("merge", "sweep.zip", f"tracking.uri={merged}")
    before = counts(merged)
    assert "0 runs copied, 6 already" in cli("merge", "sweep.zip", f"tracking.uri={merged}")
    assert counts(merged) == before
    source_counts = counts(source)
    assert "0 runs copied, 6 already" in cli("merge", "sweep.zip", f"tracking.uri={source}")
    assert counts(source) == source_counts

    report = ["report", "--sweep", "latest", "--no-figures", "--name", "same", "--out"]
    cli(*report, "original", f"tracking.uri={source}")
    cli(*report, "copy", f"tracking.uri={merged}")
    cli(*report, "bundled", "--bundle", "sweep.zip")
    copies = MlflowClient(merged)
    original = tables_of(tmp_path / "original")
    assert tables_of(tmp_path / "bundled") == original
    assert tables_of(tmp_path / "copy", lambda run_id: copies.get_run(run_id).data.tags[ORIGIN_TAG]) == original
    summary = json.loads((tmp_path / "copy" / "summary.json").read_text())
    assert summary["missing_jobs"] == ["experiment=logistic_pima size=tiny estimator=msc seed=2 resume=True"]
    assert len(summary["reused"]) == 4  # the first sweep's runs, which the bundle carries

    # every point of every history travelled, and each copy names its origin
    for run in copies.search_runs([copies.get_experiment_by_name("mcsa-bench").experiment_id]):
        origin = run.data.tags[ORIGIN_TAG]
        assert MERGING_TAG not in run.data.tags and run.info.status == client.get_run(origin).info.status
        for metric in run.data.metrics:
            history = [(m.step, m.value) for m in copies.get_metric_history(run.info.run_id, metric)]
            assert history == [(m.step, m.value) for m in client.get_metric_history(origin, metric)]


@pytest.fixture
def bundle(tmp_path, store_in):
    """A bundle of a two-run experiment (one run FAILED, one with a NaN and an infinite metric)."""
    import math

    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.bundle import export
    from mcsa_bench.tracking.tables import open_reader

    store_in(tmp_path)
    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("travel", artifact_location=(tmp_path / "artifacts").as_uri())
    for i, status in enumerate(("FINISHED", "FAILED")):
        run_id = client.create_run(experiment, run_name=f"run {i}", tags={"seed": str(i)}).info.run_id
        client.log_batch(run_id, params=[Param("seed", str(i))], metrics=[
            Metric("test_lpd", -1.0 - step / 10, 1000 + step, step) for step in range(3)] + [
            Metric("odd", math.nan if i else math.inf, 5, 0)])
        client.set_terminated(run_id, status)
    export(open_reader(uri), "travel", None, tmp_path / "travel.zip", uri)
    return tmp_path / "travel.zip"


def test_a_merge_through_the_client_interrupted_mid_run_is_completed_by_the_next_one(bundle, tmp_path, store_in,
                                                                                      monkeypatch):
    """A run left marked as being merged (the merge was killed) is replaced, not counted as present (the
    client's path: a server's store, a sweep parent's job list)."""
    from mlflow.tracking import MlflowClient

    import mcsa_bench.tracking.bundle as travel
    import mcsa_bench.tracking.store as store

    target = tmp_path / "target"
    store_in(target)
    uri = f"sqlite:///{target}/outputs/mlflow.db"
    monkeypatch.setattr(store, "is_database_store", lambda uri: False)
    copy = travel._copy

    def killed_after_first_run(client, reader, run, points, experiment_id, new_ids):
        if new_ids:
            raise KeyboardInterrupt
        run_id = copy(client, reader, run, points, experiment_id, new_ids)
        client.set_tag(run_id, MERGING_TAG, "true")  # as if killed before its mark was removed
        return run_id

    monkeypatch.setattr(travel, "_copy", killed_after_first_run)
    with pytest.raises(KeyboardInterrupt):
        travel.merge(travel.BundleReader(bundle), uri)
    monkeypatch.setattr(travel, "_copy", copy)
    assert travel.merge(travel.BundleReader(bundle), uri) == (2, 0)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("travel").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["run 0", "run 1"]
    assert {r.info.status for r in runs} == {"FINISHED", "FAILED"} and not any(MERGING_TAG in r.data.tags for r in runs)
    assert travel.merge(travel.BundleReader(bundle), uri) == (0, 2)


def rows_by_origin(uri: str) -> dict[str, list[tuple]]:
    """Every row of MLflow's run tables, a run's id replaced by its origin and the store's directory by
    STORE (so that copies in two stores compare)."""
    import sqlite3

    path = Path(uri.removeprefix("sqlite:///"))
    database = sqlite3.connect(path)
    try:
        origin = dict(database.execute("SELECT run_uuid, value FROM tags WHERE key = ?", (ORIGIN_TAG,)).fetchall())
        tables = {}
        for table in ("runs", "tags", "params", "metrics", "latest_metrics"):
            cursor = database.execute(f"SELECT * FROM {table}")
            names = [column[0] for column in cursor.description]
            tables[table] = sorted(
                tuple(None if value is None else str(value).replace(row[names.index("run_uuid")], origin[
                    row[names.index("run_uuid")]]).replace(str(path.parent), "STORE") for value in row)
                for row in cursor.fetchall())
        return tables
    finally:
        database.close()


def test_a_merge_into_a_database_writes_the_rows_mlflows_client_writes(bundle, tmp_path, store_in, monkeypatch):
    """The bulk path (tracking.tablewriter) against MLflow's own store: the same rows in every run table
    (NaN and infinite values, a FAILED run, the latest values included), run ids aside."""
    import mcsa_bench.tracking.bundle as travel
    import mcsa_bench.tracking.store as store

    stores = {}
    for path in ("bulk", "client"):
        store_in(tmp_path / path)
        stores[path] = f"sqlite:///{tmp_path / path}/outputs/mlflow.db"
    assert travel.merge(travel.BundleReader(bundle), stores["bulk"]) == (2, 0)
    with monkeypatch.context() as patch:
        patch.setattr(store, "is_database_store", lambda uri: False)
        assert travel.merge(travel.BundleReader(bundle), stores["client"]) == (2, 0)
    bulk, client = rows_by_origin(stores["bulk"]), rows_by_origin(stores["client"])
    assert len(bulk["metrics"]) == 8 and len(bulk["latest_metrics"]) == 4
    assert bulk == client
    assert travel.merge(travel.BundleReader(bundle), stores["bulk"]) == (0, 2)


def test_a_merge_killed_mid_transaction_leaves_none_of_its_runs(bundle, tmp_path, store_in, monkeypatch):
    """The bulk path inserts a batch of runs in one transaction: killed after the runs' rows went in but
    before their points did, the store holds none of them, and the next merge copies them all."""
    from mlflow.store.tracking.dbmodels.models import SqlMetric

    import mcsa_bench.tracking.bundle as travel

    store_in(tmp_path / "target")
    uri = f"sqlite:///{tmp_path}/target/outputs/mlflow.db"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(SqlMetric.__table__, "insert", killed)
        with pytest.raises(KeyboardInterrupt):
            travel.merge(travel.BundleReader(bundle), uri)
    assert counts(uri) == {"runs": 0, "tags": 0, "params": 0, "metrics": 0, "latest_metrics": 0}
    assert travel.merge(travel.BundleReader(bundle), uri) == (2, 0)
    assert counts(uri) == {"runs": 2, "tags": counts(uri)["tags"], "params": 2, "metrics": 8, "latest_metrics": 4}


def test_the_bundle_is_csv_with_the_documented_columns_and_exact_values(bundle):
    """Every file is the documented CSV (docs/scaling.md §9); values round-trip exactly (nan, inf)."""
    from mcsa_bench.tracking.bundle import COLUMNS

    with zipfile.ZipFile(bundle) as files:
        manifest = json.loads(files.read("manifest.json"))
        tables = {name: list(csv.reader(io.StringIO(files.read(name).decode()))) for name in COLUMNS}
    assert manifest["format"] == "mcsa-bench-bundle" and manifest["runs"] == 2 and manifest["points"] == 8
    assert {name: tuple(rows[0]) for name, rows in tables.items()} == COLUMNS
    # exactly what the store holds: MLflow keeps +inf as the largest float
    assert sorted(row[2] for row in tables["latest_metrics.csv"][1:]) == ["-1.2", "-1.2", "1.7976931348623157e+308",
                                                                          "nan"]
    docs = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text()
    for name, columns in COLUMNS.items():
        assert f"`{name}`: {', '.join(f'`{c}`' for c in columns)}" in docs, name


def test_bad_bundles_and_arguments_are_one_line_and_exit_2(bundle, tmp_path, capsys):
    from mcsa_bench.cli import main

    (tmp_path / "not.zip").write_text("hello")
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(bundle) as good, zipfile.ZipFile(broken, "w") as files:  # runs.csv replaced, as a bundle
        for info in good.infolist():                                               # written before sizes were
            data = good.read(info)
            if info.filename == "manifest.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "sizes"}).encode()
            files.writestr(info, b"id,name\n" if info.filename == "runs.csv" else data)
    cases = {
        ("merge", str(tmp_path / "not.zip")): "is not an mcsa-bench bundle",
        ("merge", str(broken)): "runs.csv has columns ['id', 'name']",
        ("merge",): "merge takes bundle files",
        ("export", "--sweeep", "latest"): "export: unrecognized arguments",
        ("export", f"tracking.uri=sqlite:///{tmp_path}/absent.db"): "no MLflow store at",
        ("report", "--bundle", str(bundle), "tracking.uri=sqlite:///x.db"): "not both",
    }
    for arguments, message in cases.items():
        assert main(list(arguments)) == 2, arguments
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (arguments, err)
