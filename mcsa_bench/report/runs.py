"""Reading runs from the MLflow store: an experiment's job runs, or the children of a sweep.

A run's key settings come from its short tags (``method``, ``scheme``, ``kernel``, ``dataset``,
``N``, ``lr``, ...), with the flattened config params as the fallback for runs logged before those
tags existed. For a sweep, the jobs it should have launched are re-derived from the parent's
``hydra.overrides`` tag with Hydra's own sweep expansion, so jobs that never produced a run are
reported as missing (for a ``resume=true`` sweep, after looking for the earlier FINISHED runs of
the jobs it skipped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.jobs.config import NON_COMPUTING_KEYS
from mcsa_bench.jobs.health import HEALTH_TAG
from mcsa_bench.tracking.store import CONFIG_HASH_TAG, ROLE_TAG

PARENT_TAG = "mlflow.parentRunId"
OVERRIDES_TAG = "hydra.overrides"
#: the short key settings (tags, in the order tables show them) and the param each falls back to
KEY_SETTINGS: dict[str, str] = {
    "model": "model.name",
    "dataset": "model.dataset",
    "scheme": "estimator.name",
    "kernel": "kernel.name",
    "family": "family.name",
    "optimizer": "optimizer.name",
    "lr": "optimizer.lr",
    "N": "n_samples",
    "T": "n_iters",
    "seed": "seed",
}
#: params that describe where a run was stored, not what it computed
IGNORED_PARAM_PREFIXES = ("tracking.",)
#: settings that change no result: the execution keys, how often a run evaluates (each evaluation draws
#: from a stream of its own, mcsa_bench.engine) and the gradient diagnostic (on a stream of its own)
NON_RESULT_SETTINGS = (*NON_COMPUTING_KEYS, "eval_every", "eval_schedule", "diagnostics")


def changes_results(setting: str) -> bool:
    """Whether runs that differ in ``setting`` may compute different numbers (then a report never mixes them)."""
    return not any(setting == key or setting.startswith(key + ".") for key in NON_RESULT_SETTINGS)
PAGE_SIZE = 10_000


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
        return self.tags.get("error", "")

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


def default_kernel_of(scheme: str) -> str | None:
    """The scheme's default kernel from the installed registry (None for an unknown scheme)."""
    from mcsa_bench.plugins import get_registry

    try:
        return getattr(get_registry().get("estimator", scheme).factory, "default_kernel", None)
    except ConfigurationError:
        return None


def key_settings(tags: dict[str, str], params: dict[str, str],
                 default_kernel: Callable[[str], str | None] = default_kernel_of) -> dict[str, str]:
    """The short settings of a run: its tags, else the params they stand for.

    ``method`` is the scheme's name when the kernel is the scheme's default (or the scheme uses
    none), else ``<scheme>+<kernel>``: the tag if present, else derived the same way.
    """
    settings = {key: tags.get(key, params.get(param, "")) for key, param in KEY_SETTINGS.items()}
    method = tags.get("method")
    if method is None:
        scheme, kernel = settings["scheme"], settings["kernel"]
        method = scheme if not kernel or kernel == default_kernel(scheme) else f"{scheme}+{kernel}"
    return {"method": method, **settings}


def record(run, default_kernel: Callable[[str], str | None] = default_kernel_of) -> RunRecord:
    tags, params = dict(run.data.tags), dict(run.data.params)
    return RunRecord(
        run_id=run.info.run_id,
        name=run.info.run_name or tags.get("mlflow.runName", ""),
        status=run.info.status,
        start_time=int(run.info.start_time or 0),
        tags=tags,
        params=params,
        metrics=dict(run.data.metrics),
        settings=key_settings(tags, params, default_kernel),
    )


# ----------------------------------------------------------------------------------- store


def open_client(uri: str):
    """An MlflowClient on an existing store (an SQLite file that does not exist is an error, not created)."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise ConfigurationError(f"no MLflow store at {uri}; run something first, or choose the store with tracking.uri=...")
    return MlflowClient(tracking_uri=uri)


def _search(client, experiment_ids: list[str], filter_string: str = "") -> list:
    from mlflow.entities import ViewType

    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string, run_view_type=ViewType.ACTIVE_ONLY,
                                  max_results=PAGE_SIZE, order_by=["attributes.start_time ASC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def experiment_id(client, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        names = ", ".join(sorted(e.name for e in client.search_experiments()))
        raise ConfigurationError(f"no experiment {name!r} in the store; experiments: {names or 'none'}")
    return experiment.experiment_id


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

    @cached_property
    def finished(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == "FINISHED"]

    @cached_property
    def not_finished(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status != "FINISHED"]

    @cached_property
    def diverged(self) -> list[RunRecord]:
        """Finished runs whose fit failed (mcsa_bench.jobs.health): in the tables, and listed."""
        return [r for r in self.finished if r.tags.get(HEALTH_TAG) == "diverged"]


def load_experiment(client, name: str) -> RunSet:
    """Every job run of an experiment (sweep parents left out)."""
    runs = [record(r) for r in _search(client, [experiment_id(client, name)]) if r.data.tags.get(ROLE_TAG) != "sweep"]
    return RunSet(source=f"experiment {name!r}", runs=runs)


def load_sweep(client, sweep: str, experiment: str) -> RunSet:
    """The children of a sweep's parent run (``sweep`` is its run id, or ``latest`` in ``experiment``)."""
    from mlflow.exceptions import MlflowException

    if sweep == "latest":
        parents = _search(client, [experiment_id(client, experiment)], f"tags.`{ROLE_TAG}` = 'sweep'")
        if not parents:
            raise ConfigurationError(f"no sweep in experiment {experiment!r}; run one with mcsa-bench run -m ...")
        parent = parents[-1]
    else:
        try:
            parent = client.get_run(sweep)
        except MlflowException:
            raise ConfigurationError(f"no run {sweep!r} in the store; --sweep takes a sweep's parent run id or 'latest'") from None
        if parent.data.tags.get(ROLE_TAG) != "sweep":
            raise ConfigurationError(f"run {sweep} is not a sweep's parent run (tag {ROLE_TAG}={parent.data.tags.get(ROLE_TAG)!r})")
    parent_id = parent.info.run_id
    children = [record(r) for r in _search(client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'")]
    sweep_overrides = parent.data.tags.get(OVERRIDES_TAG, "")
    runs = RunSet(source=f"sweep {parent_id} ({parent.info.run_name})", runs=children, parent_run_id=parent_id,
                  sweep_overrides=sweep_overrides)
    try:
        expected, resumes = expected_jobs(split_overrides(sweep_overrides))
    except ConfigurationError as error:
        runs.grid_note = f"the sweep's jobs could not be re-derived from its overrides {sweep_overrides!r}: {error}"
        return runs
    launched = {r.overrides for r in children}
    missing = [job for job in expected if " ".join(job) not in launched]
    if missing and resumes:
        runs.reused, missing = _finished_elsewhere(client, parent.info.experiment_id, missing, parent_id)
        runs.runs = children + runs.reused
    runs.missing_jobs = [" ".join(job) for job in missing]
    outside = len(launched - {" ".join(job) for job in expected})
    runs.grid_note = (f"expected jobs: the {len(expected)} combinations of the sweep's overrides {sweep_overrides!r}"
                      + (f"; {len(runs.reused)} skipped by resume=true, their earlier FINISHED runs reused"
                         if runs.reused else "")
                      + (f"; {outside} run(s) outside them" if outside else ""))
    return runs


def _finished_elsewhere(client, experiment: str, jobs: list[list[str]], parent_id: str):
    """For jobs a resume=true sweep skipped: the latest FINISHED run with the job's config hash (as
    ``resume`` found it), and the jobs that have none."""
    from mcsa_bench.jobs.config import RunSettings, compose
    from mcsa_bench.plugins import get_registry

    by_hash = {r.data.tags[CONFIG_HASH_TAG]: r for r in _search(client, [experiment], "attributes.status = 'FINISHED'")
               if CONFIG_HASH_TAG in r.data.tags and r.data.tags.get(PARENT_TAG) != parent_id}
    reused, missing = [], []
    for job in jobs:
        try:
            (_, cfg), = compose(job, multirun=False).jobs
            found = by_hash.get(RunSettings.from_config(cfg).config_hash(get_registry()))
        except ConfigurationError:
            found = None
        if found is None:
            missing.append(job)
        else:
            reused.append(record(found))
    return reused, missing


_OVERRIDE_START = re.compile(r"^[~+]{0,2}[A-Za-z_][\w.@/-]*(=|$)")


def split_overrides(text: str) -> list[str]:
    """Hydra overrides joined by spaces (as in the ``hydra.overrides`` tag) back into a list.

    A space-separated piece that does not start like an override (``key=`` or ``~key``) belongs
    to the previous one, e.g. ``model.x=[1, 2]``.
    """
    pieces: list[str] = []
    for piece in text.split():
        if pieces and not _OVERRIDE_START.match(piece):
            pieces[-1] += " " + piece
        else:
            pieces.append(piece)
    return pieces


def grid_of(sweep_overrides: str) -> str | None:
    """The grid a sweep ran (``experiment=logistic size=bench`` -> ``logistic-bench``), or None when it
    ran no single grid."""
    values = {key.lstrip("+~"): value for key, _, value in (o.partition("=") for o in split_overrides(sweep_overrides))}
    grid, size = values.get("experiment", ""), values.get("size", "")
    if not grid or "," in grid or "(" in grid:
        return None
    return grid + (f"-{size}" if size and "," not in size else "")


def expected_jobs(sweep_overrides: list[str]) -> tuple[list[list[str]], bool]:
    """The overrides of every job Hydra's BasicSweeper launches for ``sweep_overrides``, and whether
    the sweep resumes (``resume=true`` skips jobs that already have a FINISHED run).

    The same expansion as ``mcsa_bench.jobs.config.compose`` (sweeper params from the config, then the
    command line), composing only the master config: a report must not compose thousands of
    jobs. A job's overrides joined by spaces are what its run holds in its ``hydra.overrides`` tag.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from mcsa_bench.jobs.composition import create_hydra, split_sweep
    from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME, describe_composition_error, register_configs
    from mcsa_bench.plugins import get_registry

    register_configs(get_registry())
    hydra = create_hydra(f"pkg://{CONFIG_MODULE}")
    try:
        master = hydra.compose_config(CONFIG_NAME, sweep_overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        return split_sweep(hydra, master), bool(master.get("resume", False))
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        raise ConfigurationError(describe_composition_error(error)) from error
    finally:
        GlobalHydra.instance().clear()


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
                  sweep_overrides=runs.sweep_overrides)


# -------------------------------------------------------------------------------- histories


class Histories:
    """Metric histories (step, value) of runs, fetched from the store once each."""

    def __init__(self, client):
        self._client = client
        self._cache: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, run_id: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        key = (run_id, metric)
        if key not in self._cache:
            history = sorted((m.step, m.timestamp, m.value) for m in self._client.get_metric_history(run_id, metric))
            last_per_step = {step: value for step, _, value in history}  # a re-logged step: the latest value
            steps = np.array(sorted(last_per_step), dtype=float)
            self._cache[key] = steps, np.array([last_per_step[s] for s in sorted(last_per_step)], dtype=float)
        return self._cache[key]
