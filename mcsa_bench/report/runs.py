"""Reading runs from the MLflow store: an experiment's job runs, or the children of a sweep.

Everything comes from the store, as the run record defines it (:mod:`mcsa_bench.tracking.record`): a
run's key settings and method from its tags (the flattened config params as the fallback for runs
logged before those tags existed); a sweep's jobs from the job list its parent run stored at launch,
so jobs that never produced a run are reported as missing (for a ``resume=true`` sweep, after looking
for the earlier FINISHED runs of the jobs it skipped, by config hash).

A store written before runs recorded everything a report needs (docs/report.md, "Stores written by
older versions") is read with a :class:`Reconstruction` from today's configs and plugins, which the
command line passes in; this package imports neither the jobs, nor Hydra, nor the plugin registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.record import (
    CONFIG_HASH_TAG,
    ERROR_TAG,
    HEALTH_DIVERGED,
    HEALTH_TAG,
    KEY_SETTINGS,
    METHOD_TAG,
    OVERRIDES_TAG,
    PARENT_TAG,
    ROLE_SWEEP,
    ROLE_TAG,
    SWEEP_JOBS_ARTIFACT,
    MetricSpec,
    SweepJobs,
    declared_metric_specs,
    decode_sweep_jobs,
    method_name,
    metric_spec,
    override_key,
    split_overrides,
)
from mcsa_bench.tracking.tables import StoredRun, StoreReader, metric_series

#: params that describe where a run was stored, not what it computed
IGNORED_PARAM_PREFIXES = ("tracking.",)


class Reconstruction(Protocol):
    """What a report of a store written by an older mcsa-bench rebuilds from today's configs and
    plugins (mcsa_bench.jobs.reconstruction), for the runs that lack it; each may raise ConfigurationError."""

    def default_kernel(self, scheme: str) -> str | None:
        """The scheme's default kernel, for runs without a method tag."""

    def sweep_jobs(self, sweep_overrides: str) -> tuple[list[str], bool]:
        """A sweep's jobs (their overrides, joined) and whether it resumes, for a parent without a job list."""

    def config_hash(self, job_overrides: str) -> str | None:
        """A job's config hash, for a resume=true sweep without a job list."""

    def paper(self, experiment: str) -> dict | None:
        """An experiment's ``paper`` block, for runs without one stored."""


@dataclass(frozen=True)
class RunRecord:
    """What a report needs of one MLflow run: identity, status, settings and final metric values."""

    run_id: str
    name: str
    status: str
    start_time: int
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]  # the latest (last-step) value of every metric
    settings: dict[str, str] = field(default_factory=dict)  # key settings, ``method`` included

    @property
    def seed(self) -> str:
        return self.settings.get("seed", "")

    @property
    def error(self) -> str:
        return self.tags.get(ERROR_TAG, "")

    @property
    def overrides(self) -> str:
        return self.tags.get(OVERRIDES_TAG, "")

    def factors(self) -> dict[str, str]:
        """Every setting a table may group by: the key settings, then the other params."""
        shadowed = set(KEY_SETTINGS.values())
        extra = {k: v for k, v in self.params.items()
                 if k not in shadowed and not k.startswith(IGNORED_PARAM_PREFIXES)}
        return {**self.settings, **extra}

    def label(self) -> str:
        """Short description for listings: method, data set or model, N and seed."""
        s = self.settings
        where = s.get("dataset") or s.get("model", "")
        return f"{s.get('method', '?')} on {where} (N={s.get('N', '?')}, seed={s.get('seed', '?')})"


def key_settings(tags: dict[str, str], params: dict[str, str], reconstruction: Reconstruction | None = None
                 ) -> dict[str, str]:
    """The short settings of a run: its tags, else the params they stand for; ``method`` is the tag if
    present, else derived by the method-naming rule (the scheme's default kernel from ``reconstruction``:
    runs logged before the method tag existed)."""
    settings = {key: tags.get(key, params.get(param, "")) for key, param in KEY_SETTINGS.items()}
    method = tags.get(METHOD_TAG)
    if method is None:
        default = reconstruction.default_kernel(settings["scheme"]) if reconstruction is not None else None
        method = method_name(settings["scheme"], settings["kernel"], default)
    return {METHOD_TAG: method, **settings}


def record(run: StoredRun, reconstruction: Reconstruction | None = None) -> RunRecord:
    return RunRecord(
        run_id=run.run_id,
        name=run.name,
        status=run.status,
        start_time=run.start_time,
        tags=run.tags,
        params=run.params,
        metrics=run.metrics,
        settings=key_settings(run.tags, run.params, reconstruction),
    )


# ----------------------------------------------------------------------------------- store


def open_client(uri: str, check: bool = True):
    """An MlflowClient on an existing store (an SQLite file that does not exist is an error, not created);
    ``check=False`` skips SQLite's integrity check, for a store this process has checked already (a
    paper-size store's check reads all of its 2 GB)."""
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.store import absolute_uri, check_integrity

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise ConfigurationError(
            f"no MLflow store at {uri}; run something first, or choose the store with tracking.uri=..."
        )
    if check:
        check_integrity(uri)
    # MLflow keeps one store per URI string, so a relative SQLite path would reach the file of the
    # directory it was first opened in by this process (tests call several commands in one process)
    return MlflowClient(tracking_uri=absolute_uri(uri))


def open_reader(uri: str) -> StoreReader:
    """The store's reader: MLflow's tables read in bulk for a database store, the client API for a
    server (:mod:`mcsa_bench.tracking.tables`)."""
    from mcsa_bench.tracking.tables import open_reader as reader_of

    return reader_of(uri)


def experiment_id(reader: StoreReader, name: str) -> str:
    experiments = reader.experiments()
    if name not in experiments:
        names = ", ".join(sorted(experiments))
        raise ConfigurationError(f"no experiment {name!r} in the store; experiments: {names or 'none'}")
    return experiments[name]


@dataclass
class RunSet:
    """The runs a report covers, and what it knows about runs that should exist but do not."""

    source: str  # "experiment 'name'" or "sweep <run id> ..."
    runs: list[RunRecord]
    parent_run_id: str | None = None
    #: for a sweep: the override string of every expected job that has no run
    missing_jobs: list[str] = field(default_factory=list)
    #: for a sweep with resume=true: earlier FINISHED runs of the jobs it skipped (also in ``runs``)
    reused: list[RunRecord] = field(default_factory=list)
    #: how the expected jobs were found, or why they could not be
    grid_note: str = ""
    #: for a sweep: its command-line overrides (the parent run's ``hydra.overrides`` tag)
    sweep_overrides: str = ""
    #: sweeps' parent runs read with the job runs and left out of the tables (they compute nothing)
    parents: int = 0

    @cached_property
    def finished(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == "FINISHED"]

    @cached_property
    def not_finished(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status != "FINISHED"]

    @cached_property
    def diverged(self) -> list[RunRecord]:
        """Finished runs whose fit failed (mcsa_bench.jobs.health): in the tables, and listed."""
        return [r for r in self.finished if r.tags.get(HEALTH_TAG) == HEALTH_DIVERGED]

    @cached_property
    def declared_metrics(self) -> dict[str, MetricSpec]:
        """The producers' declarations of metrics the catalogue does not know, stored on the runs."""
        return declared_metric_specs(r.tags for r in self.runs)

    def metric_spec(self, name: str) -> MetricSpec:
        return metric_spec(name, self.declared_metrics)


def load_experiment(reader: StoreReader, name: str, reconstruction: Reconstruction | None = None) -> RunSet:
    """Every job run of an experiment (sweep parents left out)."""
    stored = reader.runs(experiment_id(reader, name))
    runs = [record(r, reconstruction) for r in stored if r.tags.get(ROLE_TAG) != ROLE_SWEEP]
    return RunSet(source=f"experiment {name!r}", runs=runs, parents=len(stored) - len(runs))


def _parent_run(reader: StoreReader, sweep: str, experiment: str) -> StoredRun:
    if sweep == "latest":
        parents = reader.runs(experiment_id(reader, experiment), tag=(ROLE_TAG, ROLE_SWEEP))
        if not parents:
            raise ConfigurationError(f"no sweep in experiment {experiment!r}; run one with mcsa-bench run -m ...")
        return parents[-1]
    parent = reader.run(sweep)
    if parent is None:
        raise ConfigurationError(f"no run {sweep!r} in the store; --sweep takes a sweep's parent run id or 'latest'")
    if parent.tags.get(ROLE_TAG) != ROLE_SWEEP:
        raise ConfigurationError(
            f"run {sweep} is not a sweep's parent run (tag {ROLE_TAG}={parent.tags.get(ROLE_TAG)!r})"
        )
    return parent


def stored_sweep_jobs(reader: StoreReader, parent: StoredRun) -> SweepJobs | None:
    """The job list a sweep's parent run stored at launch, or None (a sweep launched by an older mcsa-bench)."""
    text = reader.artifact_text(parent, SWEEP_JOBS_ARTIFACT)
    return None if text is None else decode_sweep_jobs(text)


def load_sweep(reader: StoreReader, sweep: str, experiment: str, reconstruction: Reconstruction | None = None
               ) -> RunSet:
    """The children of a sweep's parent run (``sweep`` is its run id, or ``latest`` in ``experiment``), and
    the jobs it launched that have no run."""
    parent = _parent_run(reader, sweep, experiment)
    parent_id = parent.run_id
    children = [record(r, reconstruction) for r in reader.runs(parent.experiment_id, tag=(PARENT_TAG, parent_id))]
    sweep_overrides = parent.tags.get(OVERRIDES_TAG, "")
    runs = RunSet(source=f"sweep {parent_id} ({parent.name})", runs=children, parent_run_id=parent_id,
                  sweep_overrides=sweep_overrides, parents=1)
    stored = stored_sweep_jobs(reader, parent)
    if stored is not None and stored.chosen_by:  # a search: its sweeper chose each job as it went
        runs.grid_note = (f"the jobs were chosen by hydra/sweeper={stored.chosen_by} as it searched: {len(children)} "
                          "trials, each its own run")
        return runs
    if stored is not None:
        expected, resumes = list(stored.overrides), stored.resume
        hash_of = dict(zip(stored.overrides, stored.config_hashes)).get
        how = f"the {len(expected)} combinations of the sweep's overrides {sweep_overrides!r}, as stored at launch"
    elif reconstruction is None:
        runs.grid_note = "the sweep stored no job list and no reconstruction from today's configs was given"
        return runs
    else:  # a sweep launched by an older mcsa-bench: its jobs re-derived from today's configs
        try:
            expected, resumes = reconstruction.sweep_jobs(sweep_overrides)
        except ConfigurationError as error:
            runs.grid_note = f"the sweep's jobs could not be re-derived from its overrides {sweep_overrides!r}: {error}"
            return runs
        hash_of = reconstruction.config_hash
        how = (f"the {len(expected)} combinations of the sweep's overrides {sweep_overrides!r}, re-derived from "
               "today's configs (the sweep stored no job list)")
    launched = {r.overrides for r in children}
    missing = [job for job in expected if job not in launched]
    if missing and resumes:
        runs.reused, missing = _finished_elsewhere(reader, parent.experiment_id, missing, parent_id, hash_of,
                                                   reconstruction)
        runs.runs = children + runs.reused
    runs.missing_jobs = missing
    outside = len(launched - set(expected))
    runs.grid_note = (f"expected jobs: {how}"
                      + (f"; {len(runs.reused)} skipped by resume=true, their earlier FINISHED runs reused"
                         if runs.reused else "")
                      + (f"; {outside} run(s) outside them" if outside else ""))
    return runs


def _finished_elsewhere(reader: StoreReader, experiment: str, jobs: list[str], parent_id: str, hash_of,
                        reconstruction):
    """For jobs a resume=true sweep skipped: the latest FINISHED run with the job's config hash (as
    ``resume`` found it), and the jobs that have none."""
    by_hash = {r.tags[CONFIG_HASH_TAG]: r for r in reader.runs(experiment, status="FINISHED")
               if CONFIG_HASH_TAG in r.tags and r.tags.get(PARENT_TAG) != parent_id}
    reused, missing = [], []
    for job in jobs:
        try:
            found = by_hash.get(hash_of(job))
        except ConfigurationError:
            found = None
        if found is None:
            missing.append(job)
        else:
            reused.append(record(found, reconstruction))
    return reused, missing


def grid_of(sweep_overrides: str) -> str | None:
    """The grid a sweep ran (``experiment=logistic size=bench`` -> ``logistic-bench``), or None when it
    ran no single grid."""
    values = {key.lstrip("+~"): value for key, _, value in (o.partition("=") for o in split_overrides(sweep_overrides))}
    grid, size = values.get("experiment", ""), values.get("size", "")
    if not grid or "," in grid or "(" in grid:
        return None
    return grid + (f"-{size}" if size and "," not in size else "")


_SWEEP_FUNCTION = re.compile(r"^(range|interval|choice|glob|tag)\(")


def swept_name(sweep_overrides: str) -> str | None:
    """What a sweep swept, as a name: its fixed model or experiment, its sweeper when it is not Hydra's basic one,
    then the settings it varies (``model=gaussian estimator=msc,jsa seed=0,1`` -> ``gaussian-estimator-seed``,
    ``hydra/sweeper=optuna optimizer.lr=interval(0.001,0.1)`` -> ``optuna-lr``); None when nothing varies."""
    fixed, sweeper, swept = [], [], []
    for override in split_overrides(sweep_overrides):
        key, value = override_key(override), override.partition("=")[2]
        depth, top_level_comma = 0, False
        for character in value:
            depth += character in "[{(" and 1 or -(character in "]})")
            top_level_comma |= character == "," and depth == 0
        if top_level_comma or _SWEEP_FUNCTION.match(value):
            swept.append(key.rpartition(".")[2])
        elif key == "hydra/sweeper":
            sweeper.append(value)
        elif key in ("experiment", "model"):
            fixed.append(value)
    return "-".join([*fixed, *sweeper, *dict.fromkeys(swept)]) if swept else None


# -------------------------------------------------------------------------------- selection


def parse_filters(filters: Iterable[str]) -> dict[str, set[str]]:
    """``["dataset=pima,heart", "N=10"]`` -> {"dataset": {"pima", "heart"}, "N": {"10"}}."""
    parsed: dict[str, set[str]] = {}
    for item in filters:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise ConfigurationError(f"--where takes KEY=VALUE[,VALUE...] (a key setting such as dataset, method, N, "
                                     f"or a param such as model.dim), got {item!r}")
        parsed.setdefault(key, set()).update(values.split(","))
    return parsed


def select(runs: RunSet, filters: dict[str, set[str]]) -> RunSet:
    """The runs whose settings (or params, or tags) match every filter."""
    def keep(run: RunRecord) -> bool:
        values = {**run.tags, **run.factors()}
        return all(values.get(key) in allowed for key, allowed in filters.items())

    if not filters:
        return runs
    return RunSet(source=runs.source, runs=[r for r in runs.runs if keep(r)], parent_run_id=runs.parent_run_id,
                  missing_jobs=runs.missing_jobs, reused=[r for r in runs.reused if keep(r)], grid_note=runs.grid_note,
                  sweep_overrides=runs.sweep_overrides, parents=runs.parents)


# -------------------------------------------------------------------------------- histories


class Histories:
    """Metric histories (steps, values) of a report's runs: a metric's histories of all of them are read
    from the store at once, the first time a figure asks for one (a step logged twice: its latest value)."""

    def __init__(self, reader: StoreReader, run_ids: Iterable[str]):
        self._reader = reader
        self._run_ids = list(run_ids)
        self._cache: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    def __call__(self, run_id: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        if metric not in self._cache:
            self._cache[metric] = metric_series(self._reader, self._run_ids, metric)
        return self._cache[metric].get(run_id) or (np.array([], dtype=float), np.array([], dtype=float))
