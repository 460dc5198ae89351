"""The store (tracking/store.py): a new SQLite store is a copy of an empty store MLflow made once per
release, and MLflow's telemetry is off unless the user turns it on."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys

import pytest

from mcsa_bench.tracking import store


def schema(database) -> tuple[list, list]:
    """(MLflow's tables and indexes, each as its SQL's lines in order, its schema version) of an
    SQLite store. The order of a table's constraints differs between two stores MLflow creates."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        rows = connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        tables = [(kind, name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                  for kind, name, sql in rows]
        return tables, connection.execute("SELECT * FROM alembic_version").fetchall()


def experiments(uri: str) -> list[tuple]:
    return sorted((e.experiment_id, e.name, e.artifact_location) for e in store._client(uri).search_experiments())


def test_a_store_from_the_cached_empty_store_equals_one_mlflow_creates(tmp_path, monkeypatch):
    """Same tables, indexes and schema version; the same experiments, MLflow's Default one included
    with the artifact location MLflow gives it in the current directory, and the copy takes runs."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    by_mlflow, copied = tmp_path / "mlflow" / "mlflow.db", tmp_path / "copy" / "mlflow.db"
    by_mlflow.parent.mkdir()
    MlflowClient(f"sqlite:///{by_mlflow}").create_experiment("mcsa-bench",
                                                            artifact_location=(copied.parent / "mlartifacts").as_uri())
    store.prepare_store(f"sqlite:///{copied}", "mcsa-bench")
    assert (tmp_path / "cache" / "mcsa-bench").is_dir() and copied.exists()
    assert schema(copied) == schema(by_mlflow)
    assert experiments(f"sqlite:///{copied}") == experiments(f"sqlite:///{by_mlflow}")
    client = store._client(f"sqlite:///{copied}")
    run = client.create_run("1")
    client.log_metric(run.info.run_id, "x", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"x": 1.0}


def test_without_a_usable_cache_mlflow_creates_the_store(tmp_path, monkeypatch):
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-directory"))
    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    assert store.prepare_store(uri, "mcsa-bench") == "1"
    assert [name for _, name, _ in experiments(uri)] == ["Default", "mcsa-bench"]
    assert not list((tmp_path / "outputs").glob("*.partial"))


@pytest.mark.parametrize("setting,disabled", [(None, "True"), ("false", "False")])
def test_mlflow_telemetry_is_off_unless_the_user_turns_it_on(setting, disabled, monkeypatch):
    """A fresh process that imports mcsa-bench's tracking has the variable set (unless the user set
    it); MLflow's own reading of the value is then checked here (importing MLflow costs seconds)."""
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY

    probe = ("import mcsa_bench.tracking.store, os, sys; assert 'mlflow' not in sys.modules; "
             "print(os.environ['MLFLOW_DISABLE_TELEMETRY'])")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    if setting is not None:
        env["MLFLOW_DISABLE_TELEMETRY"] = setting
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", result.stdout.strip())
    assert str(MLFLOW_DISABLE_TELEMETRY.get()) == disabled


# A writer's transaction that spills to the file, then waits to be killed (kill -9 mid-write).
_KILLED_MID_WRITE = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA cache_size = 1")  # pages go to the file before the commit
connection.execute("BEGIN IMMEDIATE")
connection.executemany("INSERT INTO experiment_tags VALUES (?, ?, ?)", ((f"k{i}", "x" * 500, "0") for i in range(5000)))
print("written", flush=True)
time.sleep(600)
"""


def test_a_store_whose_writer_was_killed_mid_transaction_is_rolled_back_and_opens(tmp_path):
    """A writer killed mid-transaction (kill -9, OOM) leaves a hot journal, which a read-only open refuses
    ("attempt to write a readonly database"); the integrity check read the store read-only and refused the
    whole store as unusable. It now opens it as SQLite recovers it: the half-written transaction rolled
    back, the committed runs intact."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = store._client(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    client.set_terminated(run_id, "FINISHED")
    writer = subprocess.Popen([sys.executable, "-c", _KILLED_MID_WRITE, str(tmp_path / "mlflow.db")],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "written\n"
    writer.kill()
    writer.wait()
    assert (tmp_path / "mlflow.db-journal").stat().st_size > 0
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # what the read-only check met
        with contextlib.closing(sqlite3.connect(f"file:{tmp_path / 'mlflow.db'}?mode=ro", uri=True)) as connection:
            connection.execute("SELECT count(*) FROM runs").fetchall()

    store.check_integrity(uri)
    assert not (tmp_path / "mlflow.db-journal").exists()
    assert client.get_run(run_id).info.status == "FINISHED"
    with contextlib.closing(sqlite3.connect(tmp_path / "mlflow.db")) as connection:
        assert connection.execute("SELECT count(*) FROM experiment_tags").fetchone() == (0,)
