"""A store's runs read in bulk: what a report, an export and a merge read, for any store.

Two readers with one interface (:class:`StoreReader`):

- :class:`SqlReader` reads MLflow's tables (``runs``, ``tags``, ``params``, ``latest_metrics``,
  ``metrics``) through SQLAlchemy, a few queries per experiment, for the stores MLflow keeps in a
  database (SQLite, PostgreSQL, ...). MLflow's run search costs per run (it loads each run's tags,
  params and metrics through the ORM and pages through results), and a metric history is one
  request per run and metric: a paper-size grid's report spent minutes there (docs/scaling.md §9).
- :class:`ClientReader` asks MLflow's client API, for a tracking server's ``http(s)://`` URI.

Both return what the client API returns (tests/tracking/test_tables.py checks this on a store):
active runs only, ordered by start time then run id, a run's latest value of each metric as
MLflow keeps it (NaN read back as NaN), and a metric history as (step, timestamp, value) rows.
:func:`metric_series` gives what a figure draws, each run's history as two arrays (steps and the
value last logged at each): for a database store in one query per metric, with no Python object
per point.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from mcsa_bench.api import ConfigurationError

#: MLflow's search page size (its maximum); runs per read of every metric's histories (an export's chunk)
PAGE_SIZE = 10_000
RUNS_PER_READ = 500
#: a metric history's order as MLflow's get_metric_history returns it (its SQL store's ORDER BY)
HISTORY_ORDER = "timestamp, step, value"
#: the temporary table of the runs whose histories a query reads (the connection's own, never in the store)
RUN_IDS_TABLE = "mcsa_bench_history_runs"


@dataclass(frozen=True)
class StoredRun:
    """One run as the store keeps it: identity, status, times, tags, params and latest metrics."""

    run_id: str
    experiment_id: str
    name: str
    status: str
    start_time: int
    end_time: int | None
    artifact_uri: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]


#: a metric history: (step, timestamp, value) rows in the store's order
History = list[tuple[int, int, float]]
#: a metric history as a figure reads it: the steps (ascending, as floats) and the value last logged at each
Series = tuple[np.ndarray, np.ndarray]


class StoreReader(Protocol):
    def experiments(self) -> dict[str, str]:
        """Active experiments: name -> id."""

    def runs(self, experiment_id: str, tag: tuple[str, str] | None = None, status: str | None = None
             ) -> list[StoredRun]:
        """The experiment's active runs (with tag key = value, with this status), by start time then id."""

    def run(self, run_id: str) -> StoredRun | None:
        """One run, deleted or not; None if the store has no such run."""

    def artifact_text(self, run: StoredRun, path: str) -> str | None:
        """The run's artifact at ``path`` as text, or None when it has none."""

    def histories(self, run_ids: Iterable[str], metric: str) -> dict[str, History]:
        """The metric's history of each run (runs without it left out)."""


def artifact_text(artifact_uri: str, path: str) -> str | None:
    """An artifact's text (UTF-8), or None (:func:`artifact_bytes`)."""
    data = artifact_bytes(artifact_uri, path)
    return None if data is None else data.decode("utf-8")


def artifact_bytes(artifact_uri: str, path: str) -> bytes | None:
    """An artifact's contents, or None: read from the file for a local artifact store, else through MLflow's
    artifact repository of ``artifact_uri``."""
    from urllib.parse import unquote, urlparse

    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    parsed = urlparse(artifact_uri)
    if parsed.scheme in ("", "file"):
        local = Path(unquote(parsed.path)) / path
        return local.read_bytes() if local.is_file() else None
    repository = get_artifact_repository(artifact_uri)
    parent = str(Path(path).parent).replace(".", "") or None
    if not any(a.path == path for a in repository.list_artifacts(parent)):
        return None
    with tempfile.TemporaryDirectory() as directory:
        return Path(repository.download_artifacts(path, directory)).read_bytes()


# ---------------------------------------------------------------------------- the client API


class ClientReader:
    """MLflow's client API: for any store, a tracking server's included."""

    def __init__(self, client):
        self.client = client

    def experiments(self) -> dict[str, str]:
        return {e.name: e.experiment_id for e in self.client.search_experiments()}

    def runs(self, experiment_id, tag=None, status=None):
        from mlflow.entities import ViewType

        filters = ([f"tags.`{tag[0]}` = '{tag[1]}'"] if tag else []) + (
            [f"attributes.status = '{status}'"] if status else [])
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=" and ".join(filters),
                                           run_view_type=ViewType.ACTIVE_ONLY, max_results=PAGE_SIZE,
                                           order_by=["attributes.start_time ASC"], page_token=token)
            runs.extend(map(stored_run, page))
            token = page.token
            if not token:
                return runs

    def run(self, run_id):
        from mlflow.exceptions import MlflowException

        try:
            return stored_run(self.client.get_run(run_id))
        except MlflowException:
            return None

    def artifact_text(self, run, path):
        return artifact_text(run.artifact_uri, path)

    def histories(self, run_ids, metric):
        found = {}
        for run_id in run_ids:
            history = [(m.step, m.timestamp, m.value) for m in self.client.get_metric_history(run_id, metric)]
            if history:
                found[run_id] = history
        return found


def stored_run(run) -> StoredRun:
    """An MLflow ``Run`` entity as a :class:`StoredRun`."""
    return StoredRun(run_id=run.info.run_id, experiment_id=run.info.experiment_id,
                     name=run.info.run_name or run.data.tags.get("mlflow.runName", ""), status=run.info.status,
                     start_time=int(run.info.start_time or 0), end_time=run.info.end_time,
                     artifact_uri=run.info.artifact_uri, tags=dict(run.data.tags), params=dict(run.data.params),
                     metrics=dict(run.data.metrics))


# ------------------------------------------------------------------------------ MLflow's tables


def _value(value, is_nan) -> float:
    return math.nan if is_nan else float(value)


def _point(step, timestamp, value, is_nan) -> tuple[int, int, float]:
    """A ``metrics`` row's point as a :data:`History` holds it."""
    return int(step), int(timestamp), _value(value, is_nan)


class SqlReader:
    """MLflow's tables, read with plain SQL: a run's tags, params and latest metrics in one query each
    for a whole experiment, a metric's histories of any number of runs in one query."""

    def __init__(self, uri: str):
        import sqlalchemy

        self.uri = uri
        self.engine = sqlalchemy.create_engine(uri)

    def _rows(self, sql: str, **bound) -> list[tuple]:
        """The query's rows as the database driver returns them (plain tuples: a paper-size store's
        histories are millions of rows, and SQLAlchemy's Row objects cost several times the fetch)."""
        import sqlalchemy

        with self.engine.connect() as connection:
            return connection.execute(sqlalchemy.text(sql), bound).cursor.fetchall()

    def experiments(self):
        rows = self._rows("SELECT name, experiment_id FROM experiments WHERE lifecycle_stage = 'active'")
        return {name: str(id_) for name, id_ in rows}

    def runs(self, experiment_id, tag=None, status=None):
        where = ["r.experiment_id = :experiment", "r.lifecycle_stage = 'active'"]
        bound = {"experiment": int(experiment_id)}
        if tag is not None:
            where.append("EXISTS (SELECT 1 FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = :tag "
                         "AND t.value = :tag_value)")
            bound.update(tag=tag[0], tag_value=tag[1])
        if status is not None:
            where.append("r.status = :status")
            bound["status"] = status
        return self._read(" AND ".join(where), bound)

    def run(self, run_id):
        found = self._read("r.run_uuid = :run", {"run": run_id})
        return found[0] if found else None

    def _read(self, where: str, bound: dict) -> list[StoredRun]:
        """The runs matching ``where`` (on ``runs r``) with their tags, params and latest metrics."""
        selected = f"SELECT r.run_uuid FROM runs r WHERE {where}"
        by_run = {}
        for table in ("tags", "params"):
            for run_id, key, value in self._rows(f"SELECT run_uuid, key, value FROM {table} "
                                                 f"WHERE run_uuid IN ({selected})", **bound):
                by_run.setdefault((table, run_id), {})[key] = value
        for run_id, key, value, is_nan in self._rows("SELECT run_uuid, key, value, is_nan FROM latest_metrics "
                                                     f"WHERE run_uuid IN ({selected})", **bound):
            by_run.setdefault(("metrics", run_id), {})[key] = _value(value, is_nan)
        rows = self._rows("SELECT r.run_uuid, r.experiment_id, r.name, r.status, r.start_time, r.end_time, "
                          f"r.artifact_uri FROM runs r WHERE {where} ORDER BY r.start_time, r.run_uuid", **bound)
        return [StoredRun(run_id=run_id, experiment_id=str(experiment), name=name or "", status=status,
                          start_time=int(start or 0), end_time=end, artifact_uri=artifact_uri,
                          tags=by_run.get(("tags", run_id), {}), params=by_run.get(("params", run_id), {}),
                          metrics=by_run.get(("metrics", run_id), {}))
                for run_id, experiment, name, status, start, end, artifact_uri in rows]

    def artifact_text(self, run, path):
        return artifact_text(run.artifact_uri, path)

    def histories(self, run_ids, metric):
        run_ids = list(dict.fromkeys(run_ids))
        found: dict[str, History] = {}
        for position, *point in self._history_rows(run_ids, metric, HISTORY_ORDER):
            found.setdefault(run_ids[position], []).append(_point(*point))
        return found

    def _history_rows(self, run_ids: list[str], metric: str | None, order: str) -> list[tuple]:
        """(position in ``run_ids``, step, timestamp, value, is_nan) of the metric's points of ``run_ids`` (no
        id twice), by position, then ``order``: in one query, the ids in a temporary table joined to MLflow's
        ``metrics``. Its primary key starts with ``key``, so the query reads the metric's points once, where
        an ``IN`` list per few hundred runs read every point of the metric once per list (docs/scaling.md §9).
        ``metric`` None: every metric's points, the key after the position; the join then goes through the
        index on ``run_uuid`` and reads only these runs' points (an export's chunk of runs).
        The table lives in the connection's temporary database (SQLite) or schema (PostgreSQL), never the store."""
        import sqlalchemy

        def run(sql: str, parameters=None):
            return connection.execute(sqlalchemy.text(sql), parameters)

        with self.engine.connect() as connection:
            run(f"DROP TABLE IF EXISTS {RUN_IDS_TABLE}")  # one a read interrupted on this pooled connection left
            run(f"CREATE TEMPORARY TABLE {RUN_IDS_TABLE} (run_uuid VARCHAR(32) PRIMARY KEY, position INTEGER)")
            if run_ids:
                run(f"INSERT INTO {RUN_IDS_TABLE} VALUES (:run, :position)",
                    [{"run": run_id, "position": i} for i, run_id in enumerate(run_ids)])
            ordered = ", ".join(f"m.{column.strip()}" for column in order.split(","))
            if metric is None:
                # every metric of a chunk of runs: through the index on run_uuid, run by run. Neither planner
                # knows the temporary table's size or that a run's points lie together, and both scanned all
                # of `metrics` per chunk: on 7.3 M points, per 500 runs SQLite 1.6 CPU-s against 0.49 this
                # way (its CROSS JOIN keeps the tables' order), PostgreSQL 1.9 s against 0.49 (docs/scaling.md
                # §9). SET LOCAL lasts until the commit below.
                if connection.dialect.name == "postgresql":
                    run("SET LOCAL enable_seqscan = off")
                selected, joined = "m.key, ", "CROSS JOIN metrics m WHERE m.run_uuid = w.run_uuid"
            else:
                selected, joined = "", "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key = :metric"
            rows = run(f"SELECT w.position, {selected}m.step, m.timestamp, m.value, m.is_nan FROM {RUN_IDS_TABLE} w "
                       f"{joined} ORDER BY w.position, {ordered}", {"metric": metric}).cursor.fetchall()
            run(f"DROP TABLE {RUN_IDS_TABLE}")
            connection.commit()  # of the temporary table alone: nothing else was written
        return rows


def run_histories(reader: StoreReader, runs: list[StoredRun]) -> dict[str, dict[str, History]]:
    """Every metric's history of each run (run id -> metric -> history; runs without any left out): for a
    database store in one query, which reads these runs' points alone; for any other reader, a metric at a
    time (the metrics each run has a latest value of)."""
    run_ids = list(dict.fromkeys(r.run_id for r in runs))
    if not isinstance(reader, SqlReader):
        found: dict[str, dict[str, History]] = {}
        for metric in sorted({k for r in runs for k in r.metrics}):
            for run_id, history in reader.histories(run_ids, metric).items():
                found.setdefault(run_id, {})[metric] = history
        return found
    found = {}
    for position, metric, *point in reader._history_rows(run_ids, None, HISTORY_ORDER):
        found.setdefault(run_ids[position], {}).setdefault(metric, []).append(_point(*point))
    return found


def metric_series(reader: StoreReader, run_ids: Iterable[str], metric: str) -> dict[str, Series]:
    """Each run's history of ``metric`` as a :data:`Series` (runs without it left out); a step logged more
    than once: its latest value (latest timestamp, then the largest value). A database store's points come
    sorted by the query; any other reader's, from its histories."""
    run_ids = list(dict.fromkeys(run_ids))
    if isinstance(reader, SqlReader):
        rows = reader._history_rows(run_ids, metric, "step, timestamp, value")
    else:
        position = {run_id: i for i, run_id in enumerate(run_ids)}
        rows = sorted((position[run_id], step, timestamp, value, False)
                      for run_id, history in reader.histories(run_ids, metric).items()
                      for step, timestamp, value in history)
    if not rows:
        return {}
    points = np.array(rows, dtype=float)  # position, step, timestamp, value, is_nan: one row per point
    positions, steps, values = points[:, 0].astype(np.int64), points[:, 1], points[:, 3]
    values[points[:, 4] != 0] = np.nan
    last = np.ones(len(points), dtype=bool)  # the last row of each (run, step): the value kept
    last[:-1] = (steps[1:] != steps[:-1]) | (positions[1:] != positions[:-1])
    positions, steps, values = positions[last], steps[last], values[last]
    starts = np.flatnonzero(np.diff(positions, prepend=-1))
    ends = [*starts[1:], len(positions)]
    return {run_ids[positions[start]]: (steps[start:end], values[start:end]) for start, end in zip(starts, ends)}


# ----------------------------------------------------------------------------------- opening


def open_reader(uri: str) -> StoreReader:
    """The bulk reader for a database store (SQLite, PostgreSQL, ...), the client API for a server; an
    SQLite file that does not exist is an error, not created."""
    from mcsa_bench.tracking.store import DATABASE_SCHEMES, absolute_uri, check_integrity, sqlite_path

    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise ConfigurationError(
            f"no MLflow store at {uri}; run something first, or choose the store with tracking.uri=..."
        )
    check_integrity(uri)
    uri = absolute_uri(uri)
    if path is not None or uri.split(":", 1)[0].split("+")[0] in DATABASE_SCHEMES:
        return SqlReader(uri)
    from mlflow.tracking import MlflowClient

    return ClientReader(MlflowClient(tracking_uri=uri))
