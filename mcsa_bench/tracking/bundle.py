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
from mcsa_bench.tracking.bundleformat import (
    COLUMNS,
    FORMAT,
    MANIFEST,
    VERSION,
    BundleContents,
    RunRow,
    read_bundle,
    table_rows,
)
from mcsa_bench.tracking.record import (
    CONFIG_HASH_TAG,
    HEARTBEAT_TAG,
    MERGING_TAG,
    ORIGIN_TAG,
    PARENT_TAG,
    ROLE_SWEEP,
    ROLE_TAG,
    STALE_TAG,
    SWEEP_JOBS_ARTIFACT,
    decode_sweep_jobs,
    origin_of,
)
from mcsa_bench.tracking.tables import RUNS_PER_READ, History, StoredRun, StoreReader, open_reader, run_histories
from mcsa_bench.tracking.writer import Retrying
from mcsa_bench.version import __version__

#: the start of the stale tag of a run that was RUNNING when exported (BundleReader)
EXPORTED_RUNNING = "RUNNING when exported"
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
                    "files": {name: list(c) for name, c in COLUMNS.items()},
                    "sizes": {info.filename: info.file_size for info in bundle.infolist()}}
        bundle.writestr(MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
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
    is the report of the store it came from. It is checked whole when opened
    (:func:`~mcsa_bench.tracking.bundleformat.read_bundle`), for `merge` and `report --bundle` alike.

    A run that was RUNNING when it was exported is read KILLED, tagged :data:`STALE_TAG` as the stale
    check tags a run whose process is gone: no process writes to what is read from a file, nor to its
    copy (:attr:`unfinished` lists them)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        contents = read_bundle(self.path)
        self._zip, self.manifest, self._job_lists = contents.zip, contents.manifest, contents.job_lists
        self.unfinished: list[StoredRun] = []
        self._runs = [self._stored(row, contents) for row in contents.runs]
        self._histories: dict[str, dict[str, History]] = {}

    def _stored(self, row: RunRow, contents: BundleContents) -> StoredRun:
        tags, status, end = contents.tags.get(row.run_id, {}), row.status, row.end_time
        if status == "RUNNING":
            tags = {**tags, STALE_TAG: f"{EXPORTED_RUNNING} ({self.path.name}, {self.manifest.get('created')}): "
                                       "no process writes to a copy"}
            status, end = "KILLED", max(row.start_time, _heartbeat_ms(tags))
        run = StoredRun(run_id=row.run_id, experiment_id=row.experiment, name=row.name, status=status,
                        start_time=row.start_time, end_time=end, artifact_uri=f"bundle:{row.run_id}", tags=tags,
                        params=contents.params.get(row.run_id, {}), metrics=contents.latest.get(row.run_id, {}))
        if row.status == "RUNNING":
            self.unfinished.append(run)
        return run

    def unfinished_note(self) -> str | None:
        """The line that says which runs were read KILLED, or None."""
        if not self.unfinished:
            return None
        names = ", ".join(repr(run.name or run.run_id) for run in self.unfinished[:3])
        more = f" and {len(self.unfinished) - 3} more" if len(self.unfinished) > 3 else ""
        return (f"mcsa-bench: {self.path}: {len(self.unfinished)} run(s) were RUNNING when exported, read as "
                f"KILLED (tag {STALE_TAG}), as the stale check marks a run whose process is gone: {names}{more}")

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
        return self._job_lists.get(run.run_id) if path == SWEEP_JOBS_ARTIFACT else None

    def histories(self, run_ids, metric):
        """One pass over metrics.csv per metric asked for (only that metric's points are kept)."""
        if metric not in self._histories:
            found: dict[str, History] = {}
            for run_id, key, step, timestamp, value in table_rows(self._zip, "metrics.csv"):
                if key == metric:
                    found.setdefault(run_id, []).append((int(step), int(timestamp), float(value)))
            self._histories[metric] = found
        wanted = self._histories[metric]
        return {run_id: wanted[run_id] for run_id in run_ids if run_id in wanted}

    def points(self, runs: Iterable[StoredRun]) -> Iterator[tuple[StoredRun, list[tuple[str, int, int, float]]]]:
        """Each of ``runs`` (in the bundle's order) with its points (metric, step, timestamp, value), in one
        pass over metrics.csv, which holds them run by run in that order (the check made sure)."""
        grouped = itertools.groupby(table_rows(self._zip, "metrics.csv"), key=lambda row: row[0])
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


def _heartbeat_ms(tags: dict[str, str]) -> int:
    """A run's last heartbeat (its tag, in seconds) in milliseconds; 0 if it has none."""
    try:
        return int(float(tags.get(HEARTBEAT_TAG, "0")) * 1000)
    except (ValueError, OverflowError):
        return 0


# -------------------------------------------------------------------------------------- merge


def merge(bundle: BundleReader, uri: str) -> tuple[int, int]:
    """Check, then copy the bundle's runs into the store at ``uri`` (:func:`check_merge`, :func:`copy_runs`);
    returns (copied, already there)."""
    check_merge(bundle, uri)
    return copy_runs(bundle, uri)


def check_merge(bundle: BundleReader, uri: str, earlier: dict[str, StoredRun] | None = None) -> None:
    """Refuse, before anything is written, a bundle run whose origin the store holds as another run (or a
    bundle merged before it in the same command, ``earlier``: origin -> run, which this call extends): a
    forged origin tag would have merge skip the run as already there. The same run is the same name and
    config hash (a copy that `sync` made has its original's)."""
    from mcsa_bench.tracking.store import sqlite_path
    from mcsa_bench.tracking.tables import open_reader

    held = dict(earlier or {})
    path = sqlite_path(uri)
    if path is None or path.is_file():  # a store merge would create holds nothing yet
        reader = open_reader(uri)
        ids = reader.experiments()
        for experiment in dict.fromkeys(r.experiment_id for r in bundle.all_runs):
            if experiment in ids:
                held.update((origin_of(r.run_id, r.tags), r) for r in reader.runs(ids[experiment])
                            if MERGING_TAG not in r.tags)
    for run in bundle.all_runs:
        origin = origin_of(run.run_id, run.tags)
        other = held.get(origin)
        if other is not None and (other.name, other.tags.get(CONFIG_HASH_TAG)) != (run.name,
                                                                                   run.tags.get(CONFIG_HASH_TAG)):
            raise ConfigurationError(
                f"{bundle.path}: run {run.run_id} ({run.name!r}) claims origin {origin[:60]!r}, which the store holds "
                f"as run {other.run_id} ({other.name!r}), another run: nothing merged (a forged "
                f"{ORIGIN_TAG} tag would have it skipped as already there)")
    if earlier is not None:
        earlier.update((origin_of(r.run_id, r.tags), r) for r in bundle.all_runs)


def copy_runs(bundle: BundleReader, uri: str) -> tuple[int, int]:
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
