"""Runs written straight into MLflow's tables, many runs to a transaction: how `merge` copies a bundle
into a store MLflow keeps in a database (SQLite, PostgreSQL, ...), where copying through MLflow's
client costs a transaction per run, per 100 params and per 1,000 points (docs/scaling.md §9).

The rows are the ones MLflow's own SQL store writes, into its models' tables (``runs``, ``tags``,
``params``, ``metrics``, ``latest_metrics``), in its encodings: NaN as value 0 with ``is_nan``, ±inf as
±the largest float, a run's latest value of a metric the point with the largest (step, timestamp,
value), its artifacts under its experiment's artifact location. A batch is one transaction, retried
through an outage like every other write (tracking.writer.retried): a merge killed mid-batch leaves
none of the batch's runs behind.
"""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Iterable, Mapping

from mcsa_bench.tracking.tables import StoredRun
from mcsa_bench.tracking.writer import retried

#: points per transaction (a paper-size job has about 600)
POINTS_PER_BATCH = 200_000
RUN_NAME_TAG, USER_TAG = "mlflow.runName", "mlflow.user"


def stored_value(value: float) -> tuple[float, bool]:
    """A metric value as MLflow's SQL store keeps it: (value, is_nan)."""
    if math.isnan(value):
        return 0.0, True
    return max(-sys.float_info.max, min(sys.float_info.max, value)), False


class TableWriter:
    """Collects copies of runs as table rows; :meth:`flush` (at the latest every :data:`POINTS_PER_BATCH`
    points) inserts them in one transaction."""

    def __init__(self, uri: str, outage_seconds: float):
        import sqlalchemy
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag

        self.engine = sqlalchemy.create_engine(uri)
        self.outage_seconds = outage_seconds
        self._tables = [model.__table__ for model in (SqlRun, SqlTag, SqlParam, SqlMetric, SqlLatestMetric)]
        self._rows: dict[str, list[dict]] = {table.name: [] for table in self._tables}

    def add(self, run: StoredRun, experiment_id: str, artifact_location: str, tags: Mapping[str, str],
            points: Iterable[tuple[str, int, int, float]]) -> str:
        """Queue a copy of ``run`` (with ``tags`` instead of its own, and its points as (metric, step,
        timestamp, value)) into the experiment; returns the copy's new run id."""
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
        latest: dict[str, dict] = {}
        for key, step, timestamp, value in points:
            value, is_nan = stored_value(value)
            row = {"run_uuid": run_id, "key": key, "step": step, "timestamp": timestamp, "value": value,
                   "is_nan": is_nan}
            self._rows["metrics"].append(row)
            last = latest.get(key)
            if last is None or (step, timestamp, value) > (last["step"], last["timestamp"], last["value"]):
                latest[key] = row
        self._rows["latest_metrics"] += latest.values()
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
