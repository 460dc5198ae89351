"""`mcsa-bench sync DIR`: upload a run kept on local disk to a tracking store.

A job writes its results to its output directory as they come (:mod:`mcsa_bench.tracking.localrecord`).
When the store was unreachable (a tracking server that went away mid-run), ``sync`` completes
the run in the store later: it adds the metric values the store lacks, the artifacts, and the
final status. If the run does not exist in the target store (another store, or it was never
created), a new run is created from the directory, with the original's params and tags.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.localrecord import RUN_FILE, read_metrics_stream, read_run_info
from mcsa_bench.tracking.record import ERROR_TAG, flatten
from mcsa_bench.tracking.store import (
    PARAMS_PER_BATCH,
    _chunks,
    _client,
    check_reachable,
    check_tracking_uri,
    prepare_store,
    redacted,
)
from mcsa_bench.tracking.writer import METRICS_PER_BATCH


def sync_directory(directory: str | Path, uri: str | None = None) -> str:
    """Upload one run directory; returns a one-line account of what was done."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    directory = Path(directory)
    info = read_run_info(directory)
    if not info or "tracking_uri" not in info:
        raise ConfigurationError(f"{directory} holds no {RUN_FILE} naming a store: not the output directory of an "
                                 "mcsa-bench run")
    uri = uri or info["tracking_uri"]
    check_tracking_uri(uri)
    check_reachable(uri)
    experiment_id = prepare_store(uri, info["experiment"])
    client = _client(uri)
    run = None
    if info.get("run_id"):
        try:
            run = client.get_run(info["run_id"])
        except MlflowException:
            run = None
    if run is None:
        run = client.create_run(experiment_id, run_name=info.get("run_name"), tags=info.get("tags", {}))
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
    client.set_terminated(run_id, status)
    return (f"synced {directory} to run {run_id} in {redacted(uri)}: {len(missing)} metric values added, "
            f"status {status}")
