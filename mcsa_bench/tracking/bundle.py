"""Results that travel: a sweep's (or an experiment's) runs as one self-contained file, merged into
any store, or reported from directly.

A bundle is a ZIP file of CSV tables and JSON (docs/scaling.md §9 documents the schema): every run
with its tags, params, latest metrics and full metric histories, a sweep parent's job list
(``sweep_jobs.json``), and a manifest with its provenance. ``merge`` copies bundles into a store
through MLflow's client (any store, a server's included); it is idempotent: a run carries the id it
was made with (:data:`~mcsa_bench.tracking.record.ORIGIN_TAG`, its own id where it was made), and a
run whose origin the store already holds is not copied again. A run whose merge was interrupted
(still marked :data:`~mcsa_bench.tracking.record.MERGING_TAG`) is deleted and copied again.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import socket
import time
import zipfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.record import (
    CONFIG_HASH_TAG,
    MERGING_TAG,
    ORIGIN_TAG,
    PARENT_TAG,
    ROLE_SWEEP,
    ROLE_TAG,
    SWEEP_JOBS_ARTIFACT,
    decode_sweep_jobs,
    origin_of,
)
from mcsa_bench.tracking.tables import RUNS_PER_READ, History, StoredRun, StoreReader, open_reader, run_histories
from mcsa_bench.tracking.writer import Retrying
from mcsa_bench.version import __version__

FORMAT, VERSION = "mcsa-bench-bundle", 1
#: the bundle's tables: file -> columns (docs/scaling.md §9)
COLUMNS = {
    "runs.csv": ("run_id", "origin_run_id", "experiment", "name", "status", "start_time", "end_time"),
    "tags.csv": ("run_id", "key", "value"),
    "params.csv": ("run_id", "key", "value"),
    "latest_metrics.csv": ("run_id", "key", "value"),
    "metrics.csv": ("run_id", "key", "step", "timestamp", "value"),
}
#: what one MLflow log_batch call takes (MLflow's limits: 1,000 metrics, 100 params, 100 tags)
METRICS_PER_BATCH, PARAMS_PER_BATCH = 1000, 100


# ------------------------------------------------------------------------------------- export


def runs_to_export(reader: StoreReader, experiment: str, sweep: str | None) -> tuple[list[StoredRun], str]:
    """The runs of an experiment, or of a sweep (``sweep``: its parent's id, or ``latest``): the parent,
    its children, and for a ``resume=true`` sweep the earlier FINISHED runs of the jobs it skipped (by
    config hash, as its report finds them); and a description of the selection."""
    experiments = reader.experiments()
    if experiment not in experiments:
        raise ConfigurationError(f"no experiment {experiment!r} in the store; experiments: "
                                 f"{', '.join(sorted(experiments)) or 'none'}")
    experiment_id = experiments[experiment]
    if sweep is None:
        return reader.runs(experiment_id), f"experiment {experiment!r}"
    if sweep == "latest":
        parents = reader.runs(experiment_id, tag=(ROLE_TAG, ROLE_SWEEP))
        if not parents:
            raise ConfigurationError(f"no sweep in experiment {experiment!r}; export takes --sweep RUN_ID|latest")
        parent = parents[-1]
    else:
        parent = reader.run(sweep)
        if parent is None or parent.tags.get(ROLE_TAG) != ROLE_SWEEP:
            raise ConfigurationError(f"no sweep parent run {sweep!r} in the store; --sweep takes a sweep's "
                                     "parent run id or 'latest'")
    runs = [parent, *reader.runs(parent.experiment_id, tag=(PARENT_TAG, parent.run_id))]
    text = reader.artifact_text(parent, SWEEP_JOBS_ARTIFACT)
    jobs = decode_sweep_jobs(text) if text is not None else None
    if jobs is not None and jobs.resume:
        hashes = set(jobs.config_hashes)
        runs += [r for r in reader.runs(parent.experiment_id, status="FINISHED")
                 if r.tags.get(CONFIG_HASH_TAG) in hashes and r.tags.get(PARENT_TAG) != parent.run_id]
    return runs, f"sweep {parent.run_id} ({parent.name})"


def _csv_bytes(rows: Iterable[Iterable]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue().encode("utf-8")


def _number(value: float) -> str:
    return repr(float(value))  # round-trips exactly: nan, inf and -inf included


def export(reader: StoreReader, experiment: str, sweep: str | None, path: Path, source: str) -> dict:
    """Write the bundle of the selected runs to ``path`` (through a temporary file beside it); returns
    its manifest."""
    runs, selection = runs_to_export(reader, experiment, sweep)
    names = {v: k for k, v in reader.experiments().items()}
    tables = {
        "runs.csv": [(r.run_id, origin_of(r.run_id, r.tags), names.get(r.experiment_id, experiment), r.name, r.status,
                      r.start_time, "" if r.end_time is None else r.end_time) for r in runs],
        "tags.csv": [(r.run_id, k, v) for r in runs for k, v in sorted(r.tags.items())],
        "params.csv": [(r.run_id, k, v) for r in runs for k, v in sorted(r.params.items())],
        "latest_metrics.csv": [(r.run_id, k, _number(v)) for r in runs for k, v in sorted(r.metrics.items())],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name, rows in tables.items():
            bundle.writestr(name, _csv_bytes([COLUMNS[name], *rows]))
        with bundle.open("metrics.csv", "w") as handle, io.TextIOWrapper(handle, encoding="utf-8", newline="") as text:
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(COLUMNS["metrics.csv"])
            points = 0
            for row in _points(reader, runs):
                writer.writerow(row)
                points += 1
        for run in runs:
            if run.tags.get(ROLE_TAG) == ROLE_SWEEP:
                text = reader.artifact_text(run, SWEEP_JOBS_ARTIFACT)
                if text is not None:
                    bundle.writestr(f"artifacts/{run.run_id}/{SWEEP_JOBS_ARTIFACT}", text)
        manifest = {"format": FORMAT, "version": VERSION, "created": datetime.now(UTC).isoformat(),
                    "mcsa_bench": __version__, "host": socket.gethostname(), "source": source,
                    "experiment": experiment, "selection": selection, "runs": len(runs), "points": points,
                    "files": {name: list(c) for name, c in COLUMNS.items()}}
        bundle.writestr("manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    partial.replace(path)
    return manifest


def _points(reader: StoreReader, runs: list[StoredRun]) -> Iterator[tuple]:
    """Every metric point, run by run in the order of runs.csv, metric by metric in name order, read
    RUNS_PER_READ runs at a time (a paper-size store's 7 M points never in memory at once)."""
    for start in range(0, len(runs), RUNS_PER_READ):
        chunk = runs[start:start + RUNS_PER_READ]
        histories = run_histories(reader, chunk)
        for run in chunk:
            for metric, history in sorted(histories.get(run.run_id, {}).items()):
                for step, timestamp, value in history:
                    yield run.run_id, metric, step, timestamp, _number(value)


# ------------------------------------------------------------------------------ reading a bundle


class BundleReader:
    """A bundle read as a store (:class:`~mcsa_bench.tracking.tables.StoreReader`): a report made from it
    is the report of the store it came from."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
            self.manifest = json.loads(self._zip.read("manifest.json"))
        except (OSError, zipfile.BadZipFile, KeyError, ValueError) as error:
            raise ConfigurationError(f"{path} is not an mcsa-bench bundle ({error}); make one with "
                                     "mcsa-bench export") from None
        if self.manifest.get("format") != FORMAT or self.manifest.get("version") != VERSION:
            found = f"format {self.manifest.get('format')!r}, version {self.manifest.get('version')!r}"
            raise ConfigurationError(f"{path} is not an mcsa-bench bundle of version {VERSION} ({found})")
        by_run: dict[tuple[str, str], dict] = {}
        for table in ("tags", "params"):
            for run_id, key, value in self._table(f"{table}.csv"):
                by_run.setdefault((table, run_id), {})[key] = value
        for run_id, key, value in self._table("latest_metrics.csv"):
            by_run.setdefault(("metrics", run_id), {})[key] = float(value)
        self._runs = [StoredRun(run_id=run_id, experiment_id=experiment, name=name, status=status,
                                start_time=int(start), end_time=int(end) if end else None,
                                artifact_uri=f"bundle:{run_id}", tags=by_run.get(("tags", run_id), {}),
                                params=by_run.get(("params", run_id), {}), metrics=by_run.get(("metrics", run_id), {}))
                      for run_id, _, experiment, name, status, start, end in self._table("runs.csv")]
        self._histories: dict[str, dict[str, History]] = {}

    def _table(self, name: str) -> Iterator[list[str]]:
        with self._zip.open(name) as handle:
            rows = csv.reader(io.TextIOWrapper(handle, encoding="utf-8", newline=""))
            header = next(rows)
            if tuple(header) != COLUMNS[name]:
                raise ConfigurationError(f"{self.path}: {name} has columns {header}, expected {list(COLUMNS[name])}")
            yield from rows

    @property
    def all_runs(self) -> list[StoredRun]:
        return list(self._runs)

    def experiments(self):
        return {run.experiment_id: run.experiment_id for run in self._runs}  # a bundle's ids are the names

    def runs(self, experiment_id, tag=None, status=None):
        return sorted((r for r in self._runs if r.experiment_id == experiment_id
                       and (tag is None or r.tags.get(tag[0]) == tag[1]) and (status is None or r.status == status)),
                      key=lambda r: (r.start_time, r.run_id))

    def run(self, run_id):
        return next((r for r in self._runs if r.run_id == run_id), None)

    def artifact_text(self, run, path):
        try:
            return self._zip.read(f"artifacts/{run.run_id}/{path}").decode("utf-8")
        except KeyError:
            return None

    def histories(self, run_ids, metric):
        """One pass over metrics.csv per metric asked for (only that metric's points are kept)."""
        if metric not in self._histories:
            found: dict[str, History] = {}
            for run_id, key, step, timestamp, value in self._table("metrics.csv"):
                if key == metric:
                    found.setdefault(run_id, []).append((int(step), int(timestamp), float(value)))
            self._histories[metric] = found
        wanted = self._histories[metric]
        return {run_id: wanted[run_id] for run_id in run_ids if run_id in wanted}

    def points(self, runs: Iterable[StoredRun]) -> Iterator[tuple[StoredRun, list[tuple[str, int, int, float]]]]:
        """Each of ``runs`` (in the bundle's order) with its points (metric, step, timestamp, value), in one
        pass over metrics.csv, which holds them run by run in that order."""
        grouped = itertools.groupby(self._table("metrics.csv"), key=lambda row: row[0])
        current = next(grouped, None)
        order = {run.run_id: i for i, run in enumerate(self._runs)}
        for run in sorted(runs, key=lambda r: order[r.run_id]):
            while current is not None and order.get(current[0], -1) < order[run.run_id]:
                current = next(grouped, None)
            points = []
            if current is not None and current[0] == run.run_id:
                points = [(key, int(step), int(timestamp), float(value))
                          for _, key, step, timestamp, value in current[1]]
                current = next(grouped, None)
            yield run, points


# -------------------------------------------------------------------------------------- merge


def merge(bundle: BundleReader, uri: str) -> tuple[int, int]:
    """Copy the bundle's runs into the store at ``uri`` (its experiments created as needed), sweep
    parents first so that their children point to the copies; returns (copied, already there).

    Into a database store, runs without artifacts go straight into MLflow's tables, many to a
    transaction (tracking.tablewriter); a sweep parent's job list, and every run into a server, go
    through MLflow's client, one run at a time."""
    from mcsa_bench.tracking.store import DEFAULT_OUTAGE_SECONDS, _client, is_database_store, prepare_store
    from mcsa_bench.tracking.tablewriter import TableWriter

    client = Retrying(_client(uri), DEFAULT_OUTAGE_SECONDS)
    tables = TableWriter(_client(uri), DEFAULT_OUTAGE_SECONDS) if is_database_store(uri) else None
    existing: dict[str, str] = {}  # origin -> the run's id in the store
    experiments = {}
    for experiment in dict.fromkeys(r.experiment_id for r in bundle.all_runs):
        experiments[experiment] = client.get_experiment(prepare_store(uri, experiment))
        existing.update(_merged_runs(client, uri, experiments[experiment].experiment_id))
    copied = present = 0
    parents = [r for r in bundle.all_runs if r.tags.get(ROLE_TAG) == ROLE_SWEEP]
    others = [r for r in bundle.all_runs if r.tags.get(ROLE_TAG) != ROLE_SWEEP]
    for runs in (parents, others):
        for run, points in bundle.points(runs):
            origin = origin_of(run.run_id, run.tags)
            if origin in existing:
                present += 1
                continue
            experiment = experiments[run.experiment_id]
            if tables is None or bundle.artifact_text(run, SWEEP_JOBS_ARTIFACT) is not None:
                existing[origin] = _copy(client, bundle, run, points, experiment.experiment_id, existing)
            else:
                existing[origin] = tables.add(run, experiment.experiment_id, experiment.artifact_location,
                                              _copy_tags(run, existing), points)
            copied += 1
        if tables is not None:
            tables.flush()  # the parents, before children name them
    return copied, present


def _merged_runs(client, uri: str, experiment_id: str) -> dict[str, str]:
    """The experiment's runs by origin; a run left half-merged by an interrupted merge is deleted."""
    found = {}
    for run in open_reader(uri).runs(experiment_id):
        if MERGING_TAG in run.tags:
            client.delete_run(run.run_id)
        else:
            found[origin_of(run.run_id, run.tags)] = run.run_id
    return found


def _copy(client, bundle: BundleReader, run: StoredRun, points: list, experiment_id: str,
          new_ids: dict[str, str]) -> str:
    """One run copied: tags (its origin and the merge mark added, its parent pointed at the parent's copy),
    params, every point, a sweep's job list, then the mark removed and the run ended as it ended."""
    from mlflow.entities import Metric, Param

    run_id = client.create_run(experiment_id, run_name=run.name or None, start_time=run.start_time,
                               tags={**_copy_tags(run, new_ids), MERGING_TAG: "true"}).info.run_id
    params = [Param(k, v) for k, v in run.params.items()]
    for start in range(0, len(params), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[start:start + PARAMS_PER_BATCH])
    metrics = [Metric(key, value, timestamp, step) for key, step, timestamp, value in points]
    for start in range(0, len(metrics), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[start:start + METRICS_PER_BATCH])
    text = bundle.artifact_text(run, SWEEP_JOBS_ARTIFACT)
    if text is not None:
        client.log_text(run_id, text, SWEEP_JOBS_ARTIFACT)
    client.delete_tag(run_id, MERGING_TAG)
    if run.status != "RUNNING":
        client.set_terminated(run_id, run.status, end_time=run.end_time or int(time.time() * 1000))
    return run_id


def _copy_tags(run: StoredRun, new_ids: dict[str, str]) -> dict[str, str]:
    """A copy's tags: the run's, with its origin, and its parent pointed at the parent's copy (a parent
    outside the bundle and the store keeps its old id)."""
    tags = {**run.tags, ORIGIN_TAG: origin_of(run.run_id, run.tags)}
    if PARENT_TAG in tags:
        tags[PARENT_TAG] = new_ids.get(tags[PARENT_TAG], tags[PARENT_TAG])
    return tags
