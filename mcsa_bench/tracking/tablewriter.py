"""Rows written straight into MLflow's tables, for a store MLflow keeps in a database (SQLite,
PostgreSQL, ...), where MLflow's client builds an ORM object per point and re-reads the run per call
(docs/scaling.md §9):

- :class:`TableWriter`: how `merge` copies a bundle's runs, many runs to a transaction;
- :class:`DirectMetrics`: a client whose metrics-only ``log_batch`` (a run's evaluations, as the
  store writer sends them) inserts the points and updates the latest values in one transaction.

The rows are the ones MLflow's own SQL store writes, into its models' tables (``runs``, ``tags``,
``params``, ``metrics``, ``latest_metrics``), in its encodings: NaN as value 0 with ``is_nan``, ±inf as
±the largest float, a run's latest value of a metric the point with the largest (step, timestamp,
value), its artifacts under its experiment's artifact location. A batch is one transaction: a merge
killed mid-batch leaves none of the batch's runs behind.
"""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Iterable, Mapping

from mcsa_bench.tracking.writer import retried

#: points per transaction (a paper-size job has about 600)
POINTS_PER_BATCH = 200_000
RUN_NAME_TAG, USER_TAG = "mlflow.runName", "mlflow.user"


def store_engine(client):
    """The SQLAlchemy engine of an MLflow client's database store (its pool and settings, shared)."""
    return client._tracking_client.store.engine


def stored_value(value: float) -> tuple[float, bool]:
    """A metric value as MLflow's SQL store keeps it: (value, is_nan)."""
    if math.isnan(value):
        return 0.0, True
    return max(-sys.float_info.max, min(sys.float_info.max, value)), False


class TableWriter:
    """Collects copies of runs as table rows; :meth:`flush` (at the latest every :data:`POINTS_PER_BATCH`
    points) inserts them in one transaction."""

    def __init__(self, client, outage_seconds: float):
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag

        self.engine = store_engine(client)
        self.outage_seconds = outage_seconds
        self._tables = [model.__table__ for model in (SqlRun, SqlTag, SqlParam, SqlMetric, SqlLatestMetric)]
        self._rows: dict[str, list[dict]] = {table.name: [] for table in self._tables}

    def add(self, run, experiment_id: str, artifact_location: str, tags: Mapping[str, str],
            points: Iterable[tuple[str, int, int, float]]) -> str:
        """Queue a copy of ``run`` (a tracking.tables.StoredRun), with ``tags`` instead of its own and its
        points as (metric, step, timestamp, value), into the experiment; returns the copy's new run id."""
        from mlflow.utils.uri import append_to_uri_path

        run_id = uuid.uuid4().hex
        tags = {**tags, RUN_NAME_TAG: tags.get(RUN_NAME_TAG, run.name)} if run.name else dict(tags)
        self._rows["runs"].append({
            "run_uuid": run_id, "name": run.name, "experiment_id": int(experiment_id),
            "artifact_uri": append_to_uri_path(artifact_location, run_id, "artifacts"),
            "source_type": "UNKNOWN", "source_name": "", "entry_point_name": "", "source_version": "",
            "user_id": tags.get(USER_TAG, "unknown"), "status": run.status, "start_time": run.start_time,
            "end_time": run.end_time, "deleted_time": None, "lifecycle_stage": "active"})
        self._rows["tags"] += [{"run_uuid": run_id, "key": k, "value": v} for k, v in tags.items()]
        self._rows["params"] += [{"run_uuid": run_id, "key": k, "value": v} for k, v in run.params.items()]
        rows = [{"run_uuid": run_id, "key": key, "step": step, "timestamp": timestamp,
                 **dict(zip(("value", "is_nan"), stored_value(value)))} for key, step, timestamp, value in points]
        self._rows["metrics"] += rows
        self._rows["latest_metrics"] += latest_points(rows).values()
        if len(self._rows["metrics"]) >= POINTS_PER_BATCH:
            self.flush()
        return run_id

    def flush(self) -> None:
        """Insert what is queued, in one transaction."""
        if self._rows["runs"]:
            retried(self._insert, outage_seconds=self.outage_seconds)
        for rows in self._rows.values():
            rows.clear()

    def _insert(self) -> None:
        with self.engine.begin() as connection:
            for table in self._tables:  # runs first: the other tables refer to them
                if self._rows[table.name]:
                    connection.execute(table.insert(), self._rows[table.name])


def latest_points(rows: Iterable[dict]) -> dict[str, dict]:
    """Each metric's latest point among ``rows`` as MLflow's store picks it: the first with the largest
    (step, timestamp, stored value)."""
    latest: dict[str, dict] = {}
    def order(row):
        return row["step"], row["timestamp"], row["value"]

    for row in rows:
        if row["key"] not in latest or order(row) > order(latest[row["key"]]):
            latest[row["key"]] = row
    return latest


class DirectMetrics:
    """MLflow's client for a database store, but a ``log_batch`` of metrics alone goes straight into the
    tables: the points and the run's latest values in one transaction, as MLflow's store writes them
    (tests/tracking/test_tablewriter.py compares the rows). A batch the store holds already (a retry
    after a commit whose answer was lost) goes to MLflow's client, which skips the points it holds."""

    def __init__(self, client):
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun

        self._client, self.engine = client, store_engine(client)
        self._runs, self._metrics, self._latest = SqlRun.__table__, SqlMetric.__table__, SqlLatestMetric.__table__

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        import sqlalchemy

        if params or tags or not metrics:
            return self._client.log_batch(run_id, metrics=list(metrics), params=list(params), tags=list(tags))
        try:
            self._insert(run_id, metrics)
        except sqlalchemy.exc.IntegrityError:
            self._client.log_batch(run_id, metrics=list(metrics))

    def _insert(self, run_id: str, metrics) -> None:
        import sqlalchemy
        from mlflow.exceptions import MlflowException
        from mlflow.utils.validation import _validate_metric

        rows = []
        for metric in metrics:
            _validate_metric(metric.key, metric.value, metric.timestamp, metric.step)
            value, is_nan = stored_value(metric.value)
            rows.append({"run_uuid": run_id, "key": metric.key, "value": value, "timestamp": metric.timestamp,
                         "step": metric.step, "is_nan": is_nan})
        latest = latest_points(rows)
        runs, table = self._runs, self._latest
        with self.engine.begin() as connection:
            stage = connection.execute(sqlalchemy.select(runs.c.lifecycle_stage).where(
                runs.c.run_uuid == run_id)).scalar()
            if stage != "active":
                raise MlflowException(f"run {run_id} is {stage or 'not in the store'}: metrics go to active runs only")
            connection.execute(self._metrics.insert(), rows)
            held = {row.key: row for row in connection.execute(sqlalchemy.select(table).where(
                table.c.run_uuid == run_id, table.c.key.in_(list(latest))))}
            new = [row for key, row in latest.items() if key not in held]
            newer = [{f"new_{name}": value for name, value in row.items()} for key, row in latest.items()
                     if key in held and (row["step"], row["timestamp"], row["value"]) > (
                         held[key].step, held[key].timestamp, held[key].value)]
            if new:
                connection.execute(table.insert(), new)
            if newer:
                bound = sqlalchemy.bindparam
                connection.execute(table.update().where(table.c.run_uuid == bound("new_run_uuid"),
                                                        table.c.key == bound("new_key")).values(
                    value=bound("new_value"), timestamp=bound("new_timestamp"), step=bound("new_step"),
                    is_nan=bound("new_is_nan")), newer)
