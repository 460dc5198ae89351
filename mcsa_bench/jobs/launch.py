"""From a command line to tracked jobs: pre-flight checks, the sweep's parent run, Hydra's launch of
the jobs and the summary (:func:`launch`, the driver of ``mcsa-bench run``).

Pre-flight (:func:`preflight`) composes every job as Hydra will, checks that every job's
directory can be made and written, builds each distinct combination of components once, checks
the memory one iteration (and the gradient-variance diagnostic) needs, the tracking URI and store,
and marks runs whose processes are gone as KILLED. Nothing runs and nothing is tracked
until all of it passes. A sweep's parent run is created here, in the launching process, before
any job starts; jobs receive the experiment id and the parent run id through
``hydra.job.env_set``, so they look nothing up (and nesting works with every launcher).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mcsa_bench.api import Approximation, ConfigurationError, MCSAError
from mcsa_bench.assembly import Assembly
from mcsa_bench.jobs.cell import Job, cells_computed_by, check_jax_backend, launcher_cells, write_cells
from mcsa_bench.jobs.cellcompute import CellCompute
from mcsa_bench.jobs.composition import Compositions, cached_sweep_composition, launching
from mcsa_bench.jobs.config import (
    CONFIG_MODULE,
    CONFIG_NAME,
    RunSettings,
    check_no_control_characters,
    compose,
    shipped_yaml,
    shown,
)
from mcsa_bench.jobs.job import run_job
from mcsa_bench.jobs.localray import RAY_LAUNCHER, local_only, own_signals, starts_own_instance
from mcsa_bench.jobs.objective import (
    DIVERGED_ERRORS,
    NEVERGRAD_SWEEPER,
    OBJECTIVE_ENV,
    Goal,
    TrialFailed,
    encode,
    resolve_goals,
    sweeper_direction,
)
from mcsa_bench.jobs.slurm import SLURM_LAUNCHER, ClusterLimits, read_limits, slurm_arrays
from mcsa_bench.jobs.summary import sweep_table, where_to_look
from mcsa_bench.jobs.tracked import (
    CELLS_ENV,
    EXPERIMENT_ID_ENV,
    PARENT_RUN_ENV,
    SWEEP_ID_ENV,
    SWEEP_KEYS_ENV,
    JobPlace,
)
from mcsa_bench.jobs.workers import JOBLIB_LAUNCHER, JoblibWorkerStart
from mcsa_bench.plugins import get_registry
from mcsa_bench.tracking.lifecycle import LAUNCHER_ENV, Heartbeat, identity_tags, launcher_identity, signals_deferred
from mcsa_bench.tracking.record import (
    CONFIG_HASH_TAG,
    ERROR_TAG,
    ERROR_TYPE_TAG,
    HEARTBEAT_TAG,
    HIGHER,
    JOB_COUNT_TAG,
    JOB_NUMBER_TAG,
    OVERRIDES_TAG,
    PARENT_TAG,
    ROLE_SWEEP,
    ROLE_TAG,
    SEARCH_TAG,
    STALE_TAG,
    SWEEP_JOBS_ARTIFACT,
    SWEEP_TAG,
    SweepJobs,
    encode_sweep_jobs,
    override_key,
    split_overrides,
)
from mcsa_bench.tracking.store import (
    _client,
    absolute_uri,
    check_reachable,
    check_tracking_uri,
    finished_run_with_hash,
    mark_stale_runs,
    prepare_store,
    redacted,
    report_stale,
    source_tags,
    store_exists,
)
from mcsa_bench.tracking.writer import DRAIN_AFTER_SIGNAL_SECONDS, Retrying, within

#: share of the available memory one iteration may plan to use
MEMORY_SHARE = 0.8


@dataclass
class Plan:
    """A validated command: its jobs, store and experiment."""

    multirun: bool
    settings: list[RunSettings]
    overrides: list[list[str]]
    sweep_dir: str
    tracking_uri: str
    experiment: str
    experiment_id: str
    skipped: list[int] = field(default_factory=list)  # jobs that resume=true will skip
    job_dirs: list[str] = field(default_factory=list)  # each job's output directory, as Hydra's launchers make it
    ray: bool = False  # Hydra's Ray launcher runs the jobs (SIGTERM stays ours: jobs/localray.py)
    own_ray_instance: bool = False  # the launch starts a Ray instance, kept on 127.0.0.1 (jobs/localray.py)
    workers: JoblibWorkerStart | None = None  # starts the joblib launcher's workers (jobs/workers.py)
    slurm: ClusterLimits | None = None  # the cluster Hydra's Slurm launcher submits to (jobs/slurm.py)
    parallel: int = 1  # how many jobs the launcher runs at once
    #: a search (jobs/objective.py): the sweeper as chosen, its settings, the keys it searches; its goals, once
    #: resolved (resolve_goals). ``settings`` then holds the master config's job only: the sweeper picks the rest
    search: str | None = None
    sweeper_settings: dict = field(default_factory=dict)
    searched: list[str] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)

    @property
    def varying_keys(self) -> list[str]:
        """Override keys whose value differs between jobs: what tells the jobs of a sweep apart (a search's: the
        keys it searches)."""
        if self.search:
            return self.searched
        values: dict[str, set[str]] = {}
        for job in self.overrides:
            for override in job:
                key, _, value = override.partition("=")
                values.setdefault(key, set()).add(value)
        return [key for key, seen in values.items() if len(seen) > 1 or any(key not in
                {o.partition("=")[0] for o in job} for job in self.overrides)]


def preflight(overrides: list[str], *, multirun: bool, config_dir: str | None,
              compositions: Compositions | None = None) -> Plan:
    """Compose and check every job; prepare the store. Raises ConfigurationError (one line).
    ``compositions`` keeps the jobs' compositions for Hydra's launch of the same command."""
    composition = compose(overrides, multirun=multirun, config_dir=config_dir, compositions=compositions)
    if composition.grid:
        raise ConfigurationError(_grid_without_multirun(overrides, composition.grid))
    check_output_dirs("hydra.sweep.dir/subdir" if multirun else "hydra.run.dir", composition.output_dirs,
                      composition.log_name)
    registry = get_registry()
    settings = []
    built: dict[str, None] = {}
    for number, (job_overrides, cfg) in enumerate(composition.jobs):
        try:
            job = RunSettings.from_config(cfg)
            replicas = job.diagnostics_replicas if job.diagnostics_every else 0
            combination = json.dumps([job.components, job.n_samples, replicas, job.backend, job.n_iters,
                                      job.checkpoint_every], sort_keys=True, default=str)
            if combination not in built:  # validation cost grows with the distinct combinations, not the jobs
                parts = job.assemble(registry)
                tried_by_preflight(check_memory, parts, job.n_samples, replicas)
                if job.backend == "jax":
                    check_jax_backend(job, parts)
                built[combination] = None
        except ConfigurationError as error:
            if not multirun:
                raise
            raise ConfigurationError(f"job #{number} ({' '.join(job_overrides)}): {error}") from error
        settings.append(job)
    stores = {(s.tracking_uri, s.experiment) for s in settings}
    if len(stores) > 1:
        raise ConfigurationError("tracking.uri and tracking.experiment cannot vary within a sweep; "
                                 "run one sweep per store")
    (uri, experiment), = stores
    check_tracking_uri(uri)
    check_reachable(uri)
    slurm = read_limits() if multirun and composition.launcher == SLURM_LAUNCHER else None
    # every job is checked: the workers start and import while the store is prepared
    workers = None
    if multirun and composition.launcher == JOBLIB_LAUNCHER:
        workers = JoblibWorkerStart(composition.launcher_settings, dict(compositions or {}))
        workers.start()
    try:
        if not store_exists(uri):  # a relative path from another directory makes a second store: say so
            print(f"New MLflow store {absolute_uri(uri)} (tracking.uri={uri} from {Path.cwd()})")
        experiment_id = prepare_store(uri, experiment)
        report_stale(mark_stale_runs(uri, [experiment_id]))
        skipped = [n for n, s in enumerate(settings) if not composition.search  # a search's trials resume one by one
                   and s.resume and finished_run_with_hash(uri, experiment_id, s.config_hash(registry))]
    except BaseException:
        if workers is not None:  # no job has run: nothing of theirs to lose
            workers.end()
        raise
    own_ray_instance = multirun and starts_own_instance(composition.launcher, composition.ray_address)
    return Plan(multirun, settings, [o for o, _ in composition.jobs], composition.sweep_dir, uri, experiment,
                experiment_id, skipped, composition.output_dirs, ray=multirun and composition.launcher == RAY_LAUNCHER,
                own_ray_instance=own_ray_instance, workers=workers, slurm=slurm, parallel=composition.parallel,
                search=composition.search, sweeper_settings=composition.sweeper_settings,
                searched=composition.searched)


def _grid_without_multirun(overrides: list[str], grid: dict[str, int]) -> str:
    """A grid run without -m would run its first job and nothing else: say what -m would run."""
    size = math.prod(grid.values())
    swept = " x ".join(f"{count} {key.partition('@')[0]}" for key, count in grid.items())
    command = " ".join(overrides)
    return (f"{command} is a grid of {size:,} jobs ({swept}); without -m only its first would run. Sweep it with "
            f"mcsa-bench run -m {command} hydra/launcher=joblib (size=smoke or size=bench for a smaller grid; "
            "docs/report.md, \"The experiment grids\"), or fix every swept key for one run")


def check_output_dirs(key: str, directories: list[str], log_name: str) -> None:
    """Refuse job directories that cannot be made or written, creating nothing: the deepest existing
    ancestor of each must be a writable directory, each missing part (and the job's log file) a name
    the file system takes. ``key`` says which settings chose them."""
    writable: dict[Path, str | None] = {}  # each ancestor probed once: a sweep's jobs share theirs
    check_no_control_characters("hydra.job.name", log_name)
    for directory in dict.fromkeys(directories):
        check_no_control_characters(f"{key}: the job directory", directory)
        path = Path(directory).absolute()
        existing = next(p for p in [path, *path.parents] if _exists(p))
        if existing not in writable:
            writable[existing] = _cannot_write(existing)
        problem = writable[existing] or _too_long(existing, [*path.relative_to(existing).parts, log_name])
        if problem:
            raise ConfigurationError(f"{key}: the job directory {shown(directory)} cannot be created or written "
                                     f"({existing}: {problem}); choose a writable directory")


def _cannot_write(directory: Path) -> str | None:
    """Why no file can be made in ``directory``, or None."""
    if not directory.is_dir():
        return "not a directory"
    try:
        tempfile.TemporaryFile(dir=directory).close()  # an unnamed file where the file system allows it
    except OSError as error:
        return error.strerror or str(error)
    return None


def _too_long(directory: Path, parts: list[str]) -> str | None:
    """Why ``parts`` below ``directory`` are names the file system refuses, or None."""
    longest, path_max = os.pathconf(directory, "PC_NAME_MAX"), os.pathconf(directory, "PC_PATH_MAX")
    if any(len(part.encode()) > longest for part in parts) or len(os.fsencode(directory.joinpath(*parts))) >= path_max:
        return f"names are at most {longest} bytes, paths {path_max - 1}"
    return None


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False for a name too long to look up."""
    try:
        return path.exists()
    except OSError:
        return False


def tried_by_preflight(check: Callable, parts: Assembly, *args) -> None:
    """Run a pre-flight check that calls the components (the memory check evaluates the model and
    estimator on a few points): anything they raise, ``sys.exit`` included, is one line before any run
    exists, not the end of the command with the component's own status."""
    try:
        check(parts, *args)
    except (MCSAError, KeyboardInterrupt):
        raise
    except BaseException as error:  # a component's failure, not the tool's
        names = ", ".join(f"{kind} {source.name!r}" for kind, source in parts.sources.items())
        raise ConfigurationError(f"a component raised {type(error).__name__}: {error} when pre-flight tried it "
                                 f"({names}); `mcsa-bench check <kind> <name>` tests one") from None


def check_memory(parts: Assembly, n_samples: int, replicas: int = 0) -> None:
    """Refuse a budget whose iteration, with the gradient-variance diagnostic's ``replicas`` copies
    of the chains, would not fit in the available memory, before any run exists."""
    available = available_memory()
    if available is None:
        return
    point = bytes_per_point(parts)
    iteration = 4 * n_samples * point  # states, proposals, their weights and scores
    if iteration > MEMORY_SHARE * available:
        raise ConfigurationError(
            f"n_samples={n_samples} needs about {_size(iteration)} per iteration "
            f"(model {parts.sources['model'].name!r} "
            f"takes about {_size(point)} per point); {_size(available)} of memory is available. Lower n_samples."
        )
    replica = bytes_per_replica(parts) if replicas else 0.0  # measured once the iteration fits
    if iteration + replicas * replica > MEMORY_SHARE * available:
        raise ConfigurationError(
            f"diagnostics.replicas={replicas} needs about {_size(replicas * replica)} (about {_size(replica)} per "
            f"copy of the chains) besides the iteration's {_size(iteration)}; {_size(available)} of memory is "
            f"available. Lower diagnostics.replicas.")


def bytes_per_replica(parts: Assembly) -> float:
    """Peak memory of one copy of the estimator's chains (the diagnostic's replica) through a
    diagnostic point: its state, the next state and gradient from one estimate, measured on a few."""
    q = Approximation(parts.family, parts.family.init_params())
    rng, copies = np.random.default_rng(0), 2
    estimator = copy.deepcopy(parts.estimator)  # an adapting kernel's state stays as built
    tracemalloc.start()
    try:
        replicas = [estimator.init(rng, parts.model, q) for _ in range(copies)]
        estimates = estimator.estimate_replicas(rng, replicas, parts.model, q)
        np.stack([estimate.grad for estimate in estimates])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / copies


def bytes_per_point(parts: Assembly) -> float:
    """Peak memory of one more point in a batched log-density call, measured on a small batch."""
    family = parts.family
    z = family.sample(family.init_params(), np.random.default_rng(0), 4)
    # schemes without a kernel (snis, elbo): the gradient call when the model has one, the larger of the two
    gradient = parts.kernel.needs_gradient if parts.kernel is not None else parts.model.has_gradient
    evaluate = parts.model.log_joint_and_grad if gradient else parts.model.log_joint
    peaks = []
    for batch in (z[:1], z):
        tracemalloc.start()
        try:
            evaluate(batch)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return max((peaks[1] - peaks[0]) / 3, 8.0 * family.num_params)


def available_memory() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _size(n_bytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n_bytes < 1024 or unit == "TB":
            return f"{n_bytes:.3g} {unit}"
        n_bytes /= 1024
    raise AssertionError("unreachable")


def hydra_quote(value: str) -> str:
    """A value as a quoted Hydra override string (any character, apostrophes included)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ----------------------------------------------------------------------------- the sweep

#: MLflow's longest param value
PARAM_LENGTH = 6000


def sweep_params(plan: Plan, command_overrides: list[str]) -> dict[str, str]:
    """A sweep's parent run's params, for the MLflow UI: every command-line override (``experiment``,
    ``size``, ...), and under ``sweep.`` every key that varies between the jobs with its values in order."""
    params = {override_key(o): redacted(o.partition("=")[2]) for o in command_overrides}
    varying = set(plan.varying_keys)
    for job in plan.overrides:
        for override in job:
            if override.partition("=")[0] in varying:
                values = params.setdefault(f"sweep.{override_key(override)}", [])
                if (value := override.partition("=")[2]) not in values:
                    values.append(value)
    if plan.search:
        params["sweep.sweeper"], params["sweep.objective"] = plan.search, encode(plan.goals)
    else:
        params["sweep.jobs"] = str(len(plan.settings))
    texts = {key: value if isinstance(value, str) else ",".join(value) for key, value in params.items()}
    return {key: text if len(text) <= PARAM_LENGTH else text[: PARAM_LENGTH - 1] + "…" for key, text in texts.items()}


def sweep_jobs(plan: Plan) -> SweepJobs:
    """The job list a report of the sweep reads (docs/report.md): each job's overrides as its run's
    overrides tag will hold them and, for a resume=true sweep, its config hash (to find the run it reuses;
    computed only then, as pre-flight's resume check does, since it costs as much as composing)."""
    resume = any(s.resume for s in plan.settings)
    if plan.search:  # chosen as it goes: none known at launch
        return SweepJobs(overrides=(), resume=resume, chosen_by=plan.search)
    registry = get_registry()
    return SweepJobs(overrides=tuple(redacted(" ".join(job)) for job in plan.overrides), resume=resume,
                     config_hashes=tuple(s.config_hash(registry) for s in plan.settings) if resume else ())


class Sweep:
    """The parent run of a sweep: created before any job, ended with a summary after the last."""

    def __init__(self, plan: Plan, command_overrides: list[str]):
        self.plan = plan
        self.client = Retrying(_client(plan.tracking_uri), plan.settings[0].outage_seconds)
        run = self.client.create_run(plan.experiment_id, run_name=f"sweep {plan.sweep_dir}", tags={
            **source_tags(), **identity_tags(),
            SWEEP_TAG: plan.sweep_dir, ROLE_TAG: ROLE_SWEEP, OVERRIDES_TAG: redacted(" ".join(command_overrides)),
            **({SEARCH_TAG: f"{plan.search} {encode(plan.goals)}"} if plan.search
               else {JOB_COUNT_TAG: str(len(plan.settings))}),
        })
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        self.client.log_batch(
            self.run_id, params=[Param(k, v) for k, v in sweep_params(plan, command_overrides).items()]
        )
        self.jobs = sweep_jobs(plan)
        self.client.log_text(self.run_id, encode_sweep_jobs(self.jobs), SWEEP_JOBS_ARTIFACT)
        self._heartbeat = Heartbeat(lambda: self.client.set_tag(self.run_id, HEARTBEAT_TAG, f"{time.time():.0f}"))

    def children(self):
        return self.client.search_runs([self.plan.experiment_id], max_results=50_000,
                                       filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}'")

    def computed_elsewhere(self, children) -> int:
        """How many jobs of a resuming sweep, not skipped by pre-flight, have no run of their own because
        another run finished or computes their cell (it did when the job started, tracking.claims)."""
        if not self.jobs.resume or self.plan.search:
            return 0
        own = {c.data.tags.get(JOB_NUMBER_TAG) for c in children}
        without_run = [n for n in range(len(self.plan.settings)) if str(n) not in own and n not in self.plan.skipped]
        return sum(self._computed(self.jobs.config_hashes[n]) for n in without_run)

    def _computed(self, config_hash: str) -> bool:
        runs = self.client.search_runs([self.plan.experiment_id], max_results=50,
                                       filter_string=f"tags.`{CONFIG_HASH_TAG}` = '{config_hash}'")
        return any(run.info.status in ("FINISHED", "RUNNING") for run in runs)

    def finish(self) -> int:
        """Summarize the jobs and end the parent run; returns the command's exit status."""
        self._heartbeat.stop()
        children = self.children()
        failures = [c for c in children if c.info.status != "FINISHED"]
        if self.plan.search:  # a diverged trial is a bad value for the sweeper, not a failure of the search
            failures = [c for c in failures if c.data.tags.get(ERROR_TYPE_TAG) not in DIVERGED_ERRORS]
            print(search_summary(self.plan, children))
            missing = 0
        else:
            elsewhere = self.computed_elsewhere(children)
            missing = len(self.plan.settings) - len(children) - len(self.plan.skipped) - elsewhere
            print(
                f"Sweep finished: {len(self.plan.settings)} jobs, {len(children) - len(failures)} FINISHED, "
                f"{len(failures)} not"
                + (f", {len(self.plan.skipped)} skipped (already FINISHED)" if self.plan.skipped else "")
                + (f", {elsewhere} skipped (computed by another process)" if elsewhere else "")
                + (f", {missing} without a run" if missing > 0 else "")
                + "."
            )
        self.client.set_terminated(self.run_id, "FAILED" if failures or missing > 0 else "FINISHED")
        varying = set(self.plan.varying_keys)
        rows = sorted(
            (
                (
                    c.data.tags.get(JOB_NUMBER_TAG, "?"),
                    c.info.status,
                    " ".join(o for o in c.data.tags.get(OVERRIDES_TAG, "").split() if o.partition("=")[0] in varying),
                    c.data.metrics,
                )
                for c in children
            ),
            key=lambda row: int(row[0]) if row[0].isdigit() else -1,
        )
        for line in sweep_table(rows):
            print(line)
        for child in failures:
            tags = child.data.tags
            print(f"  {child.info.status} job {tags.get(JOB_NUMBER_TAG, '?')} ({tags.get(OVERRIDES_TAG, '')}): "
                  f"{tags.get(ERROR_TAG, tags.get(STALE_TAG, 'no error recorded'))}", file=sys.stderr)
        print(where_to_look(self.plan.tracking_uri))
        return 1 if failures or missing > 0 else 0

    def abort(self, status: str) -> None:
        """End the parent run and every child still RUNNING (their processes are ending or gone), waiting
        for the store at most DRAIN_AFTER_SIGNAL_SECONDS (a signal's clean-up is bounded whatever the store
        does); past that, or if the store fails, one line says what is left for `runs --fix-stale`."""
        self._heartbeat.stop()

        def end_runs() -> None:
            for child in self.children():
                if child.info.status == "RUNNING":
                    self.client.set_terminated(child.info.run_id, status)
            self.client.set_terminated(self.run_id, status)

        problem = within(DRAIN_AFTER_SIGNAL_SECONDS, end_runs)
        if problem is not None:
            print(f"mcsa-bench: could not mark the sweep {status} in {redacted(self.plan.tracking_uri)} ({problem}); "
                  "`mcsa-bench runs --fix-stale` marks its runs once the store answers", file=sys.stderr)


#: the experiment that fits a split one's model to all its rows, where the shipped reference posterior lives
ALL_ROWS_SUFFIX = "_all_rows"


def accuracy_note(plan: Plan) -> str:
    """One line for the experiments of the command that hold out test data, so that no reference posterior
    fits their model and their runs log no posterior-accuracy metrics, naming the experiments that do."""
    shipped, registry = shipped_yaml("experiment"), get_registry()
    first_job: dict[str, RunSettings] = {}
    for job_overrides, settings in zip(plan.overrides, plan.settings):
        for override in job_overrides:
            if override_key(override) == "experiment":
                first_job.setdefault(override.partition("=")[2], settings)
    lacking = [name for name, settings in first_job.items()
               if name + ALL_ROWS_SUFFIX in shipped and settings.assemble(registry).reference is None]
    if not lacking:
        return ""
    return (f"Note: {', '.join(f'experiment={name}' for name in lacking)} hold{'s' * (len(lacking) == 1)} out test "
            "data: no reference posterior fits, so no posterior-accuracy metrics (ref_*, excess_inclusive_kl) will "
            f"be logged; {', '.join(f'experiment={name}{ALL_ROWS_SUFFIX}' for name in lacking)} "
            f"log{'s' * (len(lacking) == 1)} them (docs/references.md)")


def job_environment(plan: Plan, sweep: Sweep | None, cell_file: Path | None = None) -> list[str]:
    """Hydra overrides that hand every job what the launcher knows (and a sweep by cell's cell file), and
    fix the sweep directory."""
    env = {EXPERIMENT_ID_ENV: plan.experiment_id, LAUNCHER_ENV: launcher_identity()}
    if sweep is not None:
        env.update({PARENT_RUN_ENV: sweep.run_id, SWEEP_ID_ENV: plan.sweep_dir,
                    SWEEP_KEYS_ENV: ",".join(plan.varying_keys)})
    if cell_file is not None:
        env[CELLS_ENV] = str(cell_file)
    if plan.goals:
        env[OBJECTIVE_ENV] = encode(plan.goals)
    overrides = [f"++hydra.job.env_set.{name}={hydra_quote(value)}" for name, value in env.items()]
    if plan.multirun:
        overrides.append(f"hydra.sweep.dir={hydra_quote(plan.sweep_dir)}")
    return overrides


# ----------------------------------------------------------------------------- the launch


class SweepStopped(MCSAError):
    """Hydra's launcher failed mid-sweep (e.g. a joblib worker killed by the OS); the summary is out."""

    exit_code = 1


def launch(overrides: list[str], argv: list[str], *, multirun: bool, config_dir: str | None,
           compute: CellCompute | None = None) -> int:
    """``mcsa-bench run``: pre-flight, then the jobs through Hydra's launcher (a sweep's by cell:
    :func:`by_cell`), then the sweep's summary; returns the exit status. ``argv`` is the command line as
    Hydra reads it; ``compute``: how the cells run in this process are computed (jobs/cell.py,
    ``cells_computed_by``; default: by JAX)."""
    compositions = {}  # pre-flight's, reused by Hydra's sweeper and launcher
    plan = preflight(overrides, multirun=multirun, config_dir=config_dir, compositions=compositions)
    if note := accuracy_note(plan):
        print(note)
    direction = search_direction(plan, overrides)
    if plan.skipped:
        print(f"resume: skipping {len(plan.skipped)} of {len(plan.settings)} jobs that already have a FINISHED run: "
              + ", ".join(f"#{n}" for n in plan.skipped))
    sweep = None
    try:
        with signals_deferred():  # a signal now is handled once `sweep` names the parent run
            sweep = Sweep(plan, overrides) if plan.multirun else None
        cells = by_cell(plan, sweep) if sweep is not None else None
        cell_file = write_cells(plan.sweep_dir, cells) if cells is not None else None
        if cells is not None:
            print(f"By cell: {sum(map(len, cells))} jobs in {len(cells)} launcher jobs, each running its seeds "
                  "(a jax cell as one program, numpy seeds one after another); Hydra lists each by its first job")
        if plan.workers is not None:
            plan.workers.join()  # started by pre-flight; the launcher reuses them
        with (local_only() if plan.own_ray_instance else contextlib.nullcontext(),
              own_signals() if plan.ray else contextlib.nullcontext(), slurm_arrays(plan.slurm),
              launching(None if cells is None else [launcher_job(plan, cell) for cell in cells]),
              cells_computed_by(compute) if compute is not None else contextlib.nullcontext()):
            call_hydra([*argv, *direction, *job_environment(plan, sweep, cell_file)], compositions)
        if plan.workers is not None:
            plan.workers.end()
    except KeyboardInterrupt:
        if sweep is not None:
            sweep.abort("KILLED")
        raise
    except Exception as error:  # the launcher itself failed, e.g. a joblib worker killed by the OS
        if sweep is None:
            raise
        mark_stale_runs(plan.tracking_uri, [plan.experiment_id])
        sweep.finish()
        raise SweepStopped(stopped_early(plan, error)) from error
    return sweep.finish() if sweep is not None else 0


def search_direction(plan: Plan, overrides: list[str]) -> list[str]:
    """A search's goals, resolved into ``plan.goals`` (jobs/objective.py), and the override that sets its
    sweeper's direction to theirs (none when it agrees already), said in one line."""
    if not plan.search:
        return []
    settings = plan.settings[0]
    plan.goals = resolve_goals(settings.objective, settings.assemble(get_registry()))
    command_keys = {override_key(o) for o in overrides}
    override, note = sweeper_direction(plan.goals, plan.sweeper_settings.get("_target_", ""), plan.sweeper_settings,
                                       command_keys)
    print(f"Search by hydra/sweeper={plan.search} over {', '.join(plan.searched) or 'its own params'}. {note}")
    return [override] if override else []


def search_summary(plan: Plan, children) -> str:
    """A search's first summary line: its trials, how they ended, and the best one by the first goal."""
    goal = plan.goals[0]
    finished = [c for c in children if c.info.status == "FINISHED"]
    diverged = [c for c in children if c.data.tags.get(ERROR_TYPE_TAG) in DIVERGED_ERRORS]
    reused = " (and the trials said above that reused a FINISHED run)" if plan.settings[0].resume else ""
    line = (f"Search finished: {len(children)} trials run for hydra/sweeper={plan.search}{reused}, "
            f"{len(finished)} FINISHED"
            + (f", {len(diverged)} diverged (each the worst {goal.metric} to the sweeper)" if diverged else "")
            + (f", {len(children) - len(finished) - len(diverged)} not" if len(children) > len(finished) + len(diverged)
               else "") + ".")
    scored = [c for c in finished if goal.metric in c.data.metrics]
    if scored:
        pick = max if goal.direction == HIGHER else min
        best = pick(scored, key=lambda c: c.data.metrics[goal.metric])
        searched = [o for o in split_overrides(best.data.tags.get(OVERRIDES_TAG, ""))
                    if override_key(o) in plan.searched]
        first = f" (the first of {len(plan.goals)} goals)" if len(plan.goals) > 1 else ""
        line += (f" Best {goal}{first}: {best.data.metrics[goal.metric]:.4g}, trial "
                 f"#{best.data.tags.get(JOB_NUMBER_TAG, '?')} ({' '.join(searched) or best.info.run_name}).")
    return line


def stopped_early(plan: Plan, error: Exception) -> str:
    """Why a sweep's launch stopped before its last job, and what helps: resume=true completes a sweep whose
    launcher failed; a search stopped by a failed trial needs that failure fixed, or its sweeper to allow failures."""
    what = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    if not plan.search:
        return f"the sweep stopped early: {what}. Complete it with the same command and resume=true"
    if isinstance(error, TrialFailed):
        key = ("hydra.sweeper.optim.max_failure_rate" if plan.sweeper_settings.get("_target_") == NEVERGRAD_SWEEPER
               else "hydra.sweeper.max_failure_rate")
        return (f"the search stopped: {error}. hydra/sweeper={plan.search} ends a search when more of a batch's trials "
                f"fail than {key} allows (default 0: any); fix what failed, or raise {key} to go on past failures")
    return (f"the search stopped early: {what}. Run the same command with resume=true to reuse the trials that "
            "finished: the sweeper proposes them again only when seeded (Optuna: hydra.sweeper.sampler.seed=0)")


def by_cell(plan: Plan, sweep: Sweep) -> list[list[Job]] | None:
    """The sweep's launcher jobs by cell (jobs/cell.py: a jax cell whole, a numpy cell in parts that keep
    the launcher's parallel jobs busy), or None when every one would hold a single job (Hydra launches
    the sweep's own jobs then) and for a search (its sweeper launches its trials batch by batch, each returning
    its own value). Jobs that resume=true skips are left out."""
    if plan.search:
        return None
    registry, skipped = get_registry(), set(plan.skipped)
    jobs = [(settings.resolve(registry), JobPlace(
        True, number, Path(plan.job_dirs[number]), tuple(plan.overrides[number]), plan.experiment_id,
        plan.sweep_dir, sweep.run_id, ",".join(plan.varying_keys)))
        for number, settings in enumerate(plan.settings) if number not in skipped]
    cells = launcher_cells(jobs, plan.parallel)
    return cells if any(len(cell) > 1 for cell in cells) else None


def launcher_job(plan: Plan, cell: list[Job]) -> list[str]:
    """The overrides Hydra launches a cell's job with: its first member's, in that member's directory."""
    settings, place = cell[0]
    subdir = os.path.relpath(place.output_dir, plan.sweep_dir)
    if subdir.startswith(".."):
        subdir = str(place.output_dir.absolute())
    return [*place.overrides, f"hydra.sweep.subdir={hydra_quote(subdir)}"]


def call_hydra(argv: list[str], compositions: Compositions | None = None) -> None:
    """Hydra's own run or sweep of ``argv``, composing jobs through ``compositions`` (pre-flight's)."""
    import hydra

    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME)(run_job)
    saved_argv, saved_full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = ["mcsa-bench run", *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # errors reach the caller instead of Hydra's printer
    try:
        # jobs composed at the cost of their distinct group choices; pre-flight checked every one
        with cached_sweep_composition(compositions, jobs_checked=compositions is not None):
            main()
    finally:
        sys.argv = saved_argv
        if saved_full_error is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_full_error
