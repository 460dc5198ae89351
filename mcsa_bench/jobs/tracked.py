"""A job's run record, whichever engine computes it (jobs/job.py: the numpy engine, one Hydra job;
jobs/cell.py: the accelerated one, a cell's replicates): where the job stands in its command
(:class:`JobPlace`) and its tracked run (:class:`TrackedRun`): the local record written first, the
MLflow run with the tags tracking/record.py names and the effective config as params, and the end:
health, saved results, artifacts, a terminal status (FINISHED, FAILED with the error, KILLED).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from mcsa_bench.api import Approximation, MCSAError
from mcsa_bench.assembly import Assembly
from mcsa_bench.jobs.config import RunSettings
from mcsa_bench.jobs.health import Health, assess_run
from mcsa_bench.jobs.summary import format_metrics, where_to_look
from mcsa_bench.references.accuracy import accuracy_verdict, noise_floors
from mcsa_bench.tracking import record as run_record
from mcsa_bench.tracking.claims import CLAIMANT_TAGS
from mcsa_bench.tracking.lifecycle import signals_deferred
from mcsa_bench.tracking.localrecord import LocalRecord
from mcsa_bench.tracking.record import changes_results, flatten, override_key
from mcsa_bench.tracking.store import (
    JobTracker,
    TrackingError,
    absolute_uri,
    finished_run_with_hash,
    prepare_store,
    redacted,
)

log = logging.getLogger(__name__)

#: set by the launching command for every job (hydra.job.env_set): what the parent already knows
EXPERIMENT_ID_ENV = "MCSA_BENCH_EXPERIMENT_ID"
PARENT_RUN_ENV = "MCSA_BENCH_PARENT_RUN_ID"
SWEEP_ID_ENV = "MCSA_BENCH_SWEEP_ID"
SWEEP_KEYS_ENV = "MCSA_BENCH_SWEEP_KEYS"  # the override keys that vary between the sweep's jobs
CELLS_ENV = "MCSA_BENCH_CELLS"  # the sweep's cell file: each launcher job runs the members it lists (jobs/cell.py)
#: checkpoints of runs (and jax cells) with checkpoint_every > 0, by config hash (relative to the working
#: directory, like outputs/)
CHECKPOINT_DIR = Path("outputs") / "checkpoints"
#: overrides already visible in a run's name (keys without Hydra's ``+``/``~`` and ``@package`` parts)
NAMED_KEYS = ("estimator", "kernel", "model", "model.dataset", "seed", "experiment", "method")


def component_tags(parts: Assembly) -> dict[str, str]:
    tags = {}
    for kind, component in parts.sources.items():
        plugin = component.plugin
        tag = run_record.COMPONENT_TAG_PREFIX + kind
        tags[tag] = component.name
        tags[f"{tag}.plugin"] = plugin.name
        tags[f"{tag}.distribution"] = f"{plugin.distribution or 'unknown'} {plugin.version or ''}".strip()
    if parts.reference is not None:
        tags[run_record.REFERENCE_TAG] = parts.reference.name  # the run logs posterior-accuracy metrics
    return tags


def key_setting_tags(settings: RunSettings, effective: dict) -> dict[str, str]:
    """Short, stable tags for the MLflow UI's columns and filters, and the report (docs/report.md), of
    resolved settings (:meth:`RunSettings.resolve`: the method names the kernel only when it is not the
    scheme's default); with the paper setting's published values when the run is one."""
    tags = run_record.key_setting_tags(effective, settings.kernel.default)
    if effective.get("paper"):
        tags[run_record.PAPER_TAG] = run_record.encode_paper(effective["paper"])
    return tags


def run_name(tags: dict[str, str], task_overrides: list[str], job_number: int | None,
             sweep_keys: str | None = None) -> str:
    """``method-model[-dataset]-seedK``, then the overrides that set anything else: a single run's every
    override that may change its results (``model.dim=10 n_iters=2000``: runs of other settings get other
    names), a sweep job's overrides whose values vary between the jobs, and its number.

    The method is the one chosen by ``method=NAME`` (``elbo_n1``, ``msc_hmc``) when there is one, else
    the ``method`` tag. ``sweep_keys``: the override keys that vary (default: the launcher's, from the
    environment)."""
    chosen = [o.partition("=")[2] for o in task_overrides if override_key(o) == "method"]
    method = chosen[-1] if chosen else tags["method"]
    name = "-".join(p for p in (method, tags["model"], tags["dataset"], f"seed{tags['seed']}") if p)
    unnamed = [o for o in task_overrides
               if override_key(o) not in NAMED_KEYS and not o.lstrip("+~").startswith("hydra")]
    if job_number is None:
        return " ".join([name, *(o for o in unnamed if changes_results(override_key(o)))])
    keys = os.environ.get(SWEEP_KEYS_ENV, "") if sweep_keys is None else sweep_keys
    varying = {override_key(key) for key in keys.split(",")}
    return " ".join([name, *(o for o in unnamed if override_key(o) in varying), f"#{job_number}"])


@dataclass(frozen=True)
class JobPlace:
    """Where a job stands in its command, as Hydra's job config and the launcher's environment say
    (:meth:`from_hydra`) or as the sweep driver knows it (a cell's jobs, jobs/cell.py): whether it is
    one of a sweep's, its number, output directory and overrides, and the sweep it belongs to."""

    multirun: bool
    number: int | None
    output_dir: Path
    overrides: tuple[str, ...]
    experiment_id: str | None = None  # None: looked up (created) in the store
    sweep_id: str | None = None
    parent_run_id: str | None = None
    sweep_keys: str | None = None  # None: the launcher's, from the environment
    experiment: str | None = None  # the experiment=NAME chosen, for a single run's note on a paper setting

    @classmethod
    def from_hydra(cls, hydra_cfg, multirun: bool) -> JobPlace:
        sweep = multirun and os.environ.get(SWEEP_ID_ENV)
        return cls(multirun, hydra_cfg.job.num if multirun else None, Path(hydra_cfg.runtime.output_dir),
                   tuple(hydra_cfg.overrides.task), os.environ.get(EXPERIMENT_ID_ENV) or None,
                   os.environ[SWEEP_ID_ENV] if sweep else None, os.environ[PARENT_RUN_ENV] if sweep else None,
                   experiment=hydra_cfg.runtime.choices.get("experiment"))


class TrackedRun:
    """One job's run record, whichever engine computes it: its local record (written first), its MLflow
    run with the role, key-setting, identity, config-hash, paper, component and metric-declaration
    tags (tracking/record.py names them) and the flattened effective config as params, and its end:
    health, saved results, artifacts, a terminal status (FINISHED, FAILED with the error, KILLED)."""

    def __init__(self, settings: RunSettings, place: JobPlace, registry):
        self.settings, self.place = settings, place  # settings resolved (RunSettings.resolve)
        self.effective = settings.effective_config(registry)
        self.digest = settings.identity
        self.experiment_id = place.experiment_id or prepare_store(settings.tracking_uri, settings.experiment)
        self.record = self.tracker = None
        self.tags = key_setting_tags(settings, self.effective)
        self.name = run_name(self.tags, list(place.overrides), place.number, place.sweep_keys)

    def already_finished(self) -> bool:
        """Under resume=true, whether this configuration has a FINISHED run (the job is then skipped)."""
        if not self.settings.resume:
            return False
        done = finished_run_with_hash(self.settings.tracking_uri, self.experiment_id, self.digest)
        if done is not None:
            log.debug("job %s skipped: run %s already FINISHED this configuration", self.place.number,
                      done.info.run_id)
        return done is not None

    def start_record(self) -> None:
        """The local record: the effective config and run.json (STARTING), before any component is built."""
        settings, place = self.settings, self.place
        self.record = LocalRecord(place.output_dir)
        self.record.write_config(OmegaConf.to_yaml(OmegaConf.create(self.effective)))
        self.tags.update({run_record.ROLE_TAG: run_record.ROLE_JOB, run_record.CONFIG_HASH_TAG: self.digest,
                          run_record.BACKEND_TAG: settings.backend,
                          run_record.JOB_NUMBER_TAG: str(place.number or 0),
                          run_record.OVERRIDES_TAG: redacted(" ".join(place.overrides))})
        if place.sweep_id:
            self.tags.update({run_record.SWEEP_TAG: place.sweep_id, run_record.PARENT_TAG: place.parent_run_id})
        self.record.update_run_info(tracking_uri=absolute_uri(settings.tracking_uri), experiment=settings.experiment,
                                    run_name=self.name, tags=self.tags, status="STARTING")

    def open(self, parts: Assembly, claimant: bool = False) -> None:
        """The MLflow run of the built components, RUNNING, with its tags and params; a ``claimant``'s
        run is created as a pending claim of its cell (:meth:`claim_cell`)."""
        self.tags.update(component_tags(parts))
        self.tags.update(run_record.metric_spec_tags(parts.metric_specs()))  # what the report reads them as
        if claimant:
            self.tags.update(CLAIMANT_TAGS)
        with signals_deferred():  # a signal now is handled once `tracker` names the new run
            self.tracker = JobTracker(self.settings.tracking_uri, self.experiment_id, self.name, self.tags,
                                      self.settings.outage_seconds)
        self.record.update_run_info(run_id=self.tracker.run_id, tags=self.tags, status="RUNNING")
        self.tracker.log_params(flatten({k: v for k, v in self.effective.items() if k != "paper"}, drop_none=True))

    def claim_cell(self):
        """The run that computes this job's cell instead of it, or None. A job that resumes or writes
        checkpoints claims its cell first (tracking.claims): a resuming one is skipped (its run deleted)
        when another computes the cell or has finished it meanwhile; one with checkpoints goes on without
        writing any, leaving the checkpoint file to the run that holds the cell."""
        settings = self.settings
        if not (settings.resume or settings.checkpoint_every):
            return None
        holder = self.tracker.claim(settings.identity)
        if holder is None and settings.resume:  # finished between the resume check and the claim
            holder = finished_run_with_hash(settings.tracking_uri, self.experiment_id, settings.identity)
        if holder is not None:
            if settings.resume:
                self.tracker.discard(holder.info.run_id)
            else:
                self.tracker.unclaim()
        return holder

    def skip_for(self, holder) -> str:
        """Record that ``holder`` (:meth:`claim_cell`) computes this resuming job's configuration; SKIPPED."""
        self.record.update_run_info(status="SKIPPED", computed_by=holder.info.run_id)
        print(f"resume: job {self.place.number or 0} skipped: {described(holder)} computes its configuration")
        return "SKIPPED"

    @property
    def callbacks(self) -> list:
        return [self.record, self.tracker]

    def complete(self, parts: Assembly, result) -> Health:
        """Health, accuracy verdict, results and artifacts of a run that ran to T, ended FINISHED."""
        settings, tracker, record = self.settings, self.tracker, self.record
        if result.resumed_from:
            earlier = [row for row in result.history if row["iteration"] <= result.resumed_from]
            tracker.log_history(earlier)
            tracker.set_tags({run_record.RESUMED_FROM_TAG: str(result.resumed_from)})
        health = assess_run(parts, result, settings.n_iters, settings.seed, settings.n_samples)
        verdict_tags, verdict_metrics = accuracy_of_run(parts, result)
        self.tags.update({**health.tags(), **verdict_tags})
        tracker.set_tags({**health.tags(), **verdict_tags})
        run_level = {"iteration": settings.n_iters, **health.metrics(), **verdict_metrics}
        tracker.log_history([run_level])
        record.log_row(run_level)  # in the local record too, for `sync`
        record.update_run_info(tags=self.tags)
        _save(record, parts, result, settings.seed)
        tracker.log_artifacts(self.place.output_dir)
        tracker.finish("FINISHED")
        record.update_run_info(status="FINISHED", uploaded=tracker.lost is None)
        return health

    def fail(self, error: BaseException, parts: Assembly | None) -> None:
        """End FAILED with the error as a tag, saving a failed run's partial result where there is one."""
        partial = getattr(error, "partial", None)  # metrics so far and the last finite parameters
        if parts is not None and partial is not None:
            _save(self.record, parts, partial, self.settings.seed)
        _end(self.record, self.tracker, "FAILED", error, self.place.output_dir)

    def kill(self) -> None:
        if self.record is not None:
            _end(self.record, self.tracker, "KILLED")

    def lost_error(self) -> TrackingError | None:
        """The error a run whose results reached the store, the local record or neither ends with, or None."""
        uri, output_dir = redacted(self.settings.tracking_uri), self.place.output_dir
        if self.tracker.lost is not None and self.record.lost is not None:
            return TrackingError(f"lost the tracking store {uri} ({self.tracker.lost}) and the local record in "
                                 f"{output_dir} ({self.record.lost}): the run's results are kept nowhere")
        if self.tracker.lost is not None:
            return TrackingError(f"lost the tracking store {uri} ({self.tracker.lost}); the finished run's results "
                                 f"are in {output_dir}; upload them with: mcsa-bench sync {output_dir}")
        return None


def described(run) -> str:
    """A run by its id and, where it has them, the host and process that write it."""
    tags = run.data.tags
    where = f" (host {tags[run_record.HOST_TAG]}, pid {tags[run_record.PID_TAG]})" if run_record.PID_TAG in tags else ""
    return f"run {run.info.run_id}{where}"


def print_single_run_end(settings: RunSettings, run: TrackedRun, last: dict, health: Health,
                         experiment: str | None) -> None:
    """What a single run prints at its end: the final metrics, health, the paper's note, where to look."""
    print(f"Finished {settings.n_iters} iterations: {format_metrics(last)}")
    if health.status == run_record.HEALTH_TOO_SHORT:
        print(f"The run is {health.too_short}; it is tagged mcsa_bench.health={health.status}.")
    elif health.status != run_record.HEALTH_OK:  # an ok run's advisory signal stays in its tags
        what = "The fit diverged" if health.diverged else "The fit is suspect"
        print(f"{what}; the run is tagged mcsa_bench.health={health.status} (docs/estimators.md, \"Run health\"):")
        for line in health.advice():
            print(f"  {line}")
    if settings.resolved.get("paper"):
        print(paper_note(settings, run.tags["method"], experiment))
    print(where_to_look(settings.tracking_uri))


def paper_note(settings: RunSettings, method: str, experiment: str | None) -> str:
    """Say that one run of a paper setting is one replication of the paper's average, and how to
    reproduce the average."""
    paper = settings.resolved["paper"]
    reported = paper["values"].get(method, {})
    numbers = ", ".join(f"{name} {value}" for name, value in reported.items())
    said = f"; {method} scored {numbers} there" if numbers else ""
    sweep = (f"mcsa-bench run -m experiment={experiment} seed='range(20)' hydra/launcher=joblib"
             if experiment else "mcsa-bench run -m <this setting> seed='range(20)' hydra/launcher=joblib")
    return (f"Note: this is one replication (seed {settings.seed}: one random train/test split) of a setting that "
            f"{paper['source']} averages over {paper['replications']} replications{said}. One split varies a lot; for "
            f"the average run\n  {sweep}\n  mcsa-bench report --sweep latest")


def failed(error: BaseException, multirun: bool, job_number: int | None) -> str:
    """In a sweep a failed job is logged and the sweep goes on; a single run ends with one line
    (exit status 1, whatever status a component's sys.exit asked for)."""
    if multirun:
        log.error("job %s failed: %s: %s", job_number, type(error).__name__, error)
        return "FAILED"
    if isinstance(error, (MCSAError, OSError)):  # OSError: e.g. a full disk under the checkpoint
        raise SystemExit(f"mcsa-bench: run failed: {error}") from error
    if not isinstance(error, Exception):
        raise SystemExit(f"mcsa-bench: run failed: a component raised {type(error).__name__}: {error}") from error
    raise error


def accuracy_of_run(parts: Assembly, result) -> tuple[dict[str, str], dict[str, float]]:
    """A run with a reference: its accuracy verdict's tags and its metrics' noise floors (else nothing)."""
    if parts.reference is None:
        return {}, {}
    floors = noise_floors(parts.reference, parts.family)
    verdict = accuracy_verdict(result.history[-1], floors)
    return {run_record.ACCURACY_TAG: verdict.level, run_record.ACCURACY_REASON_TAG: verdict.reason}, floors


#: draws of the final q a run saves (draws.npz) where its summary has no closed form or the model has sites
SAVED_DRAWS = 1000


def final_draws(parts: Assembly, params, seed: int) -> dict[str, np.ndarray]:
    """draws.npz: ``z`` (SAVED_DRAWS, D) of q(·; λ) from a stream of the seed's own (spawn key 5: the engine
    uses 0-3, the health's k̂ 4), the latent ``names``, and for a model with sites (a NumPyro or PyMC file)
    each site's values on its support under ``site/<name>``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5,)))
    z = Approximation(parts.family, params).sample(rng, SAVED_DRAWS)
    arrays = {"z": z, "names": np.array(parts.model.latent_names())}
    constrained = getattr(parts.model, "constrained", None)
    if constrained is not None:
        arrays.update({f"site/{site}": values for site, values in constrained(z).items()})
    return arrays


def _save(record: LocalRecord, parts: Assembly, result, seed: int) -> None:
    moments = parts.family.moments(result.params)
    arrays = parts.model.artifacts()
    if moments is None or hasattr(parts.model, "constrained"):
        arrays = {**arrays, "draws": final_draws(parts, result.params, seed)}
    record.write_results(result.params, parts.model.latent_names(), {} if moments is None else moments.summary(),
                         arrays, result.history)


def _end(record: LocalRecord, tracker: JobTracker | None, status: str, error: BaseException | None = None,
         output_dir: Path | None = None) -> None:
    """Record a run's abnormal end locally and, if the run exists, in the store."""
    record.update_run_info(status=status, **({"error": f"{type(error).__name__}: {error}"} if error else {}))
    if tracker is None:
        return
    if output_dir is not None:
        tracker.log_artifacts(output_dir)
    tracker.finish(status, error)
    record.update_run_info(uploaded=tracker.lost is None)


def checkpoint_file(settings: RunSettings, digest: str) -> Path | None:
    """Where a run with checkpoints keeps them: ``outputs/checkpoints/<digest>.npz`` (a job's config hash,
    a jax cell's ``cell-<digest>``), found again by any later run of the same configuration. Only
    ``resume=true`` continues from an existing one; one of the earlier pickle format (``.pkl``) is then
    given to the engine, which refuses it unread."""
    if not settings.checkpoint_every:
        return None
    path = CHECKPOINT_DIR / f"{digest}.npz"
    pickled = path.with_suffix(".pkl")
    if not settings.resume:
        path.unlink(missing_ok=True)
        pickled.unlink(missing_ok=True)
    return pickled if pickled.exists() and not path.exists() else path
