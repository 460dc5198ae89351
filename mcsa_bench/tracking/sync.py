"""`mcsa-bench sync DIR`: upload a run kept on local disk to a tracking store.

A job writes its results to its output directory as they come (:mod:`mcsa_bench.tracking.localrecord`).
When the store was unreachable (a tracking server that went away mid-run), ``sync`` completes
the run in the store later: it adds the metric values the store lacks, the artifacts, and the
final status. If the run does not exist in the target store (another store, or it was never
created), a new run is created from the directory, with the original's params and tags and the tag naming the
original that `merge` keys on too (:data:`~mcsa_bench.tracking.record.ORIGIN_TAG`: its run id, else the local
record's id), by which a second sync of the directory into that store completes the same copy instead of
making another (a copy made before, tagged :data:`~mcsa_bench.tracking.record.SYNCED_FROM_TAG`, included).
Syncs of one directory run one at a time, so each says what it added.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.localrecord import RUN_FILE, read_metrics_stream, read_run_info
from mcsa_bench.tracking.record import ERROR_TAG, ERROR_TYPE_TAG, ORIGIN_TAG, SYNCED_FROM_TAG, flatten
from mcsa_bench.tracking.store import (
    DEFAULT_OUTAGE_SECONDS,
    PARAMS_PER_BATCH,
    _chunks,
    _client,
    check_reachable,
    check_tracking_uri,
    file_lock,
    prepare_store,
    redacted,
)
from mcsa_bench.tracking.writer import METRICS_PER_BATCH, Retrying


def sync_directory(directory: str | Path, uri: str | None = None) -> str:
    """Upload one run directory; returns a one-line account of what was done."""
    directory = Path(directory)
    info = read_run_info(directory)
    if not info or "tracking_uri" not in info:
        raise ConfigurationError(f"{directory} holds no {RUN_FILE} naming a store: not the output directory of an "
                                 "mcsa-bench run")
    uri = uri or info["tracking_uri"]
    check_tracking_uri(uri)
    check_reachable(uri)
    if info.get("status") == "SKIPPED":
        raise ConfigurationError(f"{directory}: the job computed nothing (run {info.get('computed_by')} computed its "
                                 "configuration); nothing to sync")
    experiment_id = prepare_store(uri, info["experiment"])
    with _one_sync_at_a_time(directory):
        return _sync(directory, info, uri, experiment_id)


def _one_sync_at_a_time(directory: Path):
    """Syncs of one directory, one after another (a lock file in the temporary directory, by the directory's
    path; in the directory it would be uploaded with it): concurrent ones each read what the store lacked,
    each sent all of it and each said so (3 syncs of one job: 'all 35,026 values added', three times). One at
    a time, each adds, and says, what the ones before it had not."""
    key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    return file_lock(Path(tempfile.gettempdir()) / f"mcsa-bench-sync-{key}.lock")


def _sync(directory: Path, info: dict, uri: str, experiment_id: str) -> str:
    from mlflow.entities import Metric, Param, RunTag

    client = Retrying(_client(uri), DEFAULT_OUTAGE_SECONDS)
    origin = info.get("run_id") or info.get("record_id") or str(directory.resolve())
    run = _run_in_store(client, experiment_id, info.get("run_id"), origin)
    if run is None:
        run = client.create_run(experiment_id, run_name=info.get("run_name"),
                                tags={**info.get("tags", {}), ORIGIN_TAG: origin})
        config = OmegaConf.to_container(OmegaConf.load(directory / "config.yaml"))
        params = [Param(k, redacted(v)) for k, v in flatten(config).items()]
        for chunk in _chunks(params, PARAMS_PER_BATCH):
            client.log_batch(run.info.run_id, params=chunk)
    run_id = run.info.run_id
    present = {(key, m.step) for key in run.data.metrics for m in client.get_metric_history(run_id, key)}
    missing = [Metric(key, value, 0, int(row["iteration"])) for row in read_metrics_stream(directory)
               for key, value in row.items() if key != "iteration" and (key, int(row["iteration"])) not in present]
    for chunk in _chunks(missing, METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=chunk)
    client.log_artifacts(run_id, str(directory))
    status = info.get("status", "FAILED")
    if status == "RUNNING":  # the job's process ended without recording how
        status = "KILLED"
    if info.get("error"):
        client.log_batch(run_id, tags=[RunTag(ERROR_TAG, info["error"][:5000])])
    else:  # the error tag a writer whose write the store refused left (tracking.writer): the record has none
        for tag in (ERROR_TAG, ERROR_TYPE_TAG):
            if tag in run.data.tags:
                client.delete_tag(run_id, tag)
    client.set_terminated(run_id, status)
    return (f"synced {directory} to run {run_id} in {redacted(uri)}: {len(missing)} metric values added, "
            f"status {status}")


def _run_in_store(client, experiment_id: str, run_id: str | None, origin: str):
    """The run a directory's record goes to in this store: the original run, or the copy an earlier
    sync or merge made (tagged with the original's identity), or None."""
    from mlflow.exceptions import MlflowException

    if run_id:
        try:
            return client.get_run(run_id)
        except MlflowException:
            pass
    for tag in (ORIGIN_TAG, SYNCED_FROM_TAG):
        copies = client.search_runs([experiment_id], max_results=1, filter_string=f"tags.`{tag}` = '{origin}'")
        if copies:
            return copies[0]
    return None
