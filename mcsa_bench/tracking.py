"""MLflow tracking: one run per job, nested under one parent run per sweep.

The embedded default is MLflow's SQLite store (``sqlite:///outputs/mlflow.db``, artifacts in
``outputs/mlartifacts``); any tracking-server URI works the same way. ``mlflow`` is imported
lazily: it takes about a second, which ``mcsa-bench plugins`` and ``--help`` must not pay.

The database and the experiment are created in the parent process before any job starts
(:func:`prepare_store`): concurrent first-time schema creation corrupts an SQLite file.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mcsa_bench import __version__
from mcsa_bench.engine import Snapshot

DEFAULT_TRACKING_URI = "sqlite:///outputs/mlflow.db"
SWEEP_TAG = "mcsa_bench.sweep.id"
ROLE_TAG = "mcsa_bench.role"
ERROR_TAG_LIMIT = 5000
FLUSH_SECONDS = 2.0
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100

#: parent runs of sweeps started in this process and not yet ended (for Ctrl-C)
_OPEN_SWEEPS: dict[str, str] = {}


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def prepare_store(uri: str, experiment: str) -> str:
    """Create the store (schema) and the experiment if needed; returns the experiment id."""
    from mlflow.exceptions import MlflowException

    database = _sqlite_path(uri)
    artifact_location = None
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
        artifact_location = (database.resolve().parent / "mlartifacts").as_uri()
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(experiment, artifact_location=artifact_location)
    except MlflowException:  # created meanwhile by another process
        return client.get_experiment_by_name(experiment).experiment_id


@functools.cache
def source_tags() -> dict[str, str]:
    """Package version and, when the package runs from a git checkout, its commit."""
    tags = {"mcsa_bench.version": __version__}
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode == 0:
            tags["mlflow.source.git.commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10)
            tags["mcsa_bench.git.dirty"] = str(bool(dirty.stdout.strip())).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"model": {"dim": 10}} -> {"model.dim": "10"}."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def find_sweep_run(uri: str, experiment_id: str, sweep_id: str) -> str | None:
    """The parent run of the sweep ``sweep_id`` (its Hydra sweep directory), if any."""
    runs = _client(uri).search_runs(
        [experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = '{sweep_id}' and tags.`{ROLE_TAG}` = 'sweep'",
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


class JobTracker:
    """One MLflow run; as an engine callback it buffers metrics and sends them with log_batch.

    In a sweep (``sweep_id`` given) the run is nested under the sweep's parent run, found by tag.
    """

    def __init__(self, uri: str, experiment: str, run_name: str, tags: Mapping[str, str], sweep_id: str | None = None):
        self.client = _client(uri)
        self.experiment_id = prepare_store(uri, experiment)
        tags = {**source_tags(), **tags}
        if sweep_id is not None:
            tags[SWEEP_TAG] = sweep_id
            parent = find_sweep_run(uri, self.experiment_id, sweep_id)
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        self._pending: list = []
        self._last_flush = time.monotonic()

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        for chunk in _chunks([Param(k, v) for k, v in params.items()], PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=chunk)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        for chunk in _chunks([RunTag(k, v) for k, v in tags.items()], PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=chunk)

    def __call__(self, snapshot: Snapshot) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), timestamp, snapshot.iteration) for k, v in snapshot.metrics.items())
        if time.monotonic() - self._last_flush > FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        for chunk in _chunks(self._pending, METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=chunk)
        self._pending = []
        self._last_flush = time.monotonic()

    def log_artifacts(self, directory: Path) -> None:
        self.client.log_artifacts(self.run_id, str(directory))

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """Flush metrics and end the run as FINISHED, FAILED (with the error as tags) or KILLED."""
        try:
            self.flush()
        finally:
            if error is not None:
                self.set_tags({"error": f"{type(error).__name__}: {error}"[:ERROR_TAG_LIMIT],
                               "error.type": type(error).__name__})
            self.client.set_terminated(self.run_id, status)


def end_open_sweeps(status: str) -> None:
    """End the parent runs of sweeps interrupted in this process (Ctrl-C)."""
    for run_id, uri in list(_OPEN_SWEEPS.items()):
        _client(uri).set_terminated(run_id, status)
        _OPEN_SWEEPS.pop(run_id, None)


#: metrics every run logs; results tables show the model's own metrics instead
ENGINE_METRICS = ("grad_norm", "acceptance_rate", "wall_time")


def result_columns(metric_names: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` model metrics (sorted), then wall_time: the columns of a results table."""
    model_metrics = sorted(set(metric_names) - {*ENGINE_METRICS, "iteration"})[:limit]
    return [*model_metrics, "wall_time"]


def format_metrics(metrics: Mapping[str, float], columns: Iterable[str]) -> str:
    return "  ".join(f"{name}={metrics[name]:.4g}" for name in columns if name in metrics)


def print_where_to_look(uri: str) -> None:
    ui = "mcsa-bench ui" if uri == DEFAULT_TRACKING_URI else f"mcsa-bench ui tracking.uri={uri}"
    print(f"Results are in {uri}. Browse them with: {ui}")



class SweepCallback(Callback):
    """Hydra callback: a parent MLflow run around a multirun, and a summary of its jobs.

    Runs in the launching process; jobs (possibly in other processes or machines) find their
    parent by the sweep id tag, the sweep directory.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        uri, experiment = config.tracking.uri, config.tracking.experiment
        experiment_id = prepare_store(uri, experiment)
        sweep_id = str(config.hydra.sweep.dir)
        run = _client(uri).create_run(experiment_id, run_name=f"sweep {sweep_id}", tags={
            **source_tags(),
            SWEEP_TAG: sweep_id,
            ROLE_TAG: "sweep",
            "hydra.overrides": " ".join(config.hydra.overrides.task),
        })
        _OPEN_SWEEPS[run.info.run_id] = uri
        self._sweep = (uri, experiment_id, run.info.run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        uri, experiment_id, run_id = self._sweep
        client = _client(uri)
        children = client.search_runs([experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{run_id}'",
                                      max_results=50_000, order_by=["attributes.start_time ASC"])
        failures = [c for c in children if c.info.status != "FINISHED"]
        client.set_terminated(run_id, "FAILED" if failures else "FINISHED")
        _OPEN_SWEEPS.pop(run_id, None)
        print(f"Sweep finished: {len(children)} jobs, {len(children) - len(failures)} FINISHED, {len(failures)} not.")
        columns = result_columns(name for c in children for name in c.data.metrics)
        for child in sorted(children, key=lambda c: int(c.data.tags.get("hydra.job.num", -1))):
            tags = child.data.tags
            print(f"  #{tags.get('hydra.job.num', '?'):<3} {child.info.status:<8} {tags.get('hydra.overrides', ''):<40} "
                  f"{format_metrics(child.data.metrics, columns)}")
        for child in failures:
            tags = child.data.tags
            print(f"  {child.info.status} job {tags.get('hydra.job.num', '?')} ({tags.get('hydra.overrides', '')}): "
                  f"{tags.get('error', 'no error recorded')}", file=sys.stderr)
        print_where_to_look(uri)
        if failures:
            raise SystemExit(1)
