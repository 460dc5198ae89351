"""One Hydra job: a composed config becomes components, a tracked run, and saved results.

The job's results are written to its Hydra output directory as they come and logged as MLflow
artifacts at the end (:mod:`mcsa_bench.tracking.localrecord` lists the files). Every run ends in a
terminal state: FINISHED, FAILED (with the error as a tag, the metrics so far and the last finite
parameters kept), or KILLED (Ctrl-C, SIGTERM, or its launcher gone).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mcsa_bench.api import MCSAError
from mcsa_bench.assembly import Assembly
from mcsa_bench.engine import Snapshot, remove_checkpoint, run
from mcsa_bench.jobs.composition import cache_sweep_composition_in_this_worker
from mcsa_bench.jobs.config import RunSettings
from mcsa_bench.jobs.health import MIN_ITERATIONS, Health, assess, final_khat, health_rng
from mcsa_bench.jobs.summary import ENGINE_METRICS, format_metrics, where_to_look
from mcsa_bench.jobs.threads import limit_threads
from mcsa_bench.jobs.workers import settle_after_first_job
from mcsa_bench.plugins import get_registry
from mcsa_bench.references.accuracy import accuracy_verdict, noise_floors
from mcsa_bench.tracking import record as run_record
from mcsa_bench.tracking.lifecycle import (
    exit_code,
    in_worker_process,
    install_signal_handlers,
    interrupt_behind,
    signals_deferred,
    watch_launcher,
)
from mcsa_bench.tracking.localrecord import LocalRecord
from mcsa_bench.tracking.record import flatten, override_key
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
#: checkpoints of runs with checkpoint_every > 0, by config hash (relative to the working directory, like outputs/)
CHECKPOINT_DIR = Path("outputs") / "checkpoints"
#: overrides already visible in a run's name (keys without Hydra's ``+``/``~`` and ``@package`` parts)
NAMED_KEYS = ("estimator", "kernel", "model", "model.dataset", "seed", "experiment", "method")


class ProgressBar:
    """A tqdm bar over iterations showing the latest metrics; only for interactive single runs.

    Metrics that do not fit the terminal's width are left out whole, never cut mid-value.
    """

    def __init__(self, total: int):
        from tqdm import tqdm

        # A terminal may report a size of 0 x 0 (fresh ptys, `script`): tqdm then draws nothing, so
        # take shutil's size, which falls back to 80 x 24.
        self.columns, lines = shutil.get_terminal_size()
        self._bar = tqdm(total=total, unit="it", ncols=self.columns, nrows=lines, file=sys.stderr)
        self._done = 0

    def __call__(self, snapshot: Snapshot) -> None:
        self._bar.update(snapshot.iteration - self._done)
        self._done = snapshot.iteration
        self._bar.set_postfix_str(self.postfix(snapshot.metrics), refresh=False)

    def postfix(self, metrics: dict[str, float]) -> str:
        """The model's own metrics first (they are what the run is for), then the acceptance rate,
        as many as fit beside the counter, the rate and a bar of at least five columns."""
        meter = self._bar.format_meter(self._bar.total, self._bar.total, 3600.0, ncols=0)  # "100%|... 1.0it/s]"
        room = self.columns - len(meter) - 7
        keys = [k for k in metrics if k not in ENGINE_METRICS] + ["acceptance_rate"]
        shown = []
        for key in keys:
            if key in metrics:
                item = f"{key}={metrics[key]:.3g}"
                if len(", ".join([*shown, item])) > room:
                    break
                shown.append(item)
        return ", ".join(shown)

    def close(self) -> None:
        self._bar.close()

    @staticmethod
    def wanted(multirun: bool) -> bool:
        return not multirun and sys.stderr.isatty() and not os.environ.get("CI")


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


def run_name(tags: dict[str, str], task_overrides: list[str], job_number: int | None) -> str:
    """``method-model[-dataset]-seedK``; in a sweep also the job's other varying overrides and its number.

    The method is the one chosen by ``method=NAME`` (``elbo_n1``, ``msc_hmc``) when there is one, else
    the ``method`` tag."""
    chosen = [o.partition("=")[2] for o in task_overrides if override_key(o) == "method"]
    method = chosen[-1] if chosen else tags["method"]
    name = "-".join(p for p in (method, tags["model"], tags["dataset"], f"seed{tags['seed']}") if p)
    if job_number is None:
        return name
    varying = {override_key(key) for key in os.environ.get(SWEEP_KEYS_ENV, "").split(",")}
    extra = [o for o in task_overrides if override_key(o) in varying and override_key(o) not in NAMED_KEYS]
    return " ".join([name, *extra, f"#{job_number}"])


def run_job(cfg: DictConfig) -> str:
    """The Hydra task function. Returns FINISHED, FAILED, KILLED or SKIPPED.

    In a sweep, a failing job is recorded FAILED (error message as a tag) and the sweep goes on;
    in a single run an expected failure (e.g. divergence) ends the program with one line.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    logging.raiseExceptions = False  # a log file on a full disk must not print a traceback per message
    worker = in_worker_process()
    if worker:
        install_signal_handlers()
        watch_launcher()
        cache_sweep_composition_in_this_worker()  # for the jobs this worker runs next
    try:
        return _run_tracked_job(cfg, hydra_cfg, multirun)
    except KeyboardInterrupt as interrupt:
        if worker:  # a joblib/submitit worker: the launcher reports; this process just ends
            logging.shutdown()
            os._exit(exit_code(interrupt))
        raise
    finally:
        if worker:
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            settle_after_first_job()


def _run_tracked_job(cfg: DictConfig, hydra_cfg, multirun: bool) -> str:
    registry = get_registry()
    settings = RunSettings.from_config(cfg).resolve(registry)  # the kernel that runs and the config hash, once
    limit_threads(settings.threads)
    effective = settings.effective_config(registry)
    digest = settings.identity
    experiment_id = os.environ.get(EXPERIMENT_ID_ENV) or prepare_store(settings.tracking_uri, settings.experiment)
    job_number = hydra_cfg.job.num if multirun else None
    if settings.resume:
        done = finished_run_with_hash(settings.tracking_uri, experiment_id, digest)
        if done is not None:
            log.debug("job %s skipped: run %s already FINISHED this configuration", job_number, done.info.run_id)
            return "SKIPPED"

    output_dir = Path(hydra_cfg.runtime.output_dir)
    checkpoint = checkpoint_file(settings, digest)
    record = LocalRecord(output_dir)
    record.write_config(OmegaConf.to_yaml(OmegaConf.create(effective)))
    tags = key_setting_tags(settings, effective)
    tracker = parts = progress = None
    name = run_name(tags, list(hydra_cfg.overrides.task), job_number)
    tags.update({run_record.ROLE_TAG: run_record.ROLE_JOB, run_record.CONFIG_HASH_TAG: digest,
                 run_record.JOB_NUMBER_TAG: str(job_number or 0),
                 run_record.OVERRIDES_TAG: redacted(" ".join(hydra_cfg.overrides.task))})
    if multirun and os.environ.get(SWEEP_ID_ENV):
        tags.update({run_record.SWEEP_TAG: os.environ[SWEEP_ID_ENV], run_record.PARENT_TAG: os.environ[PARENT_RUN_ENV]})
    record.update_run_info(tracking_uri=absolute_uri(settings.tracking_uri), experiment=settings.experiment,
                           run_name=name, tags=tags, status="STARTING")
    try:
        parts = settings.assemble(registry)
        tags.update(component_tags(parts))
        tags.update(run_record.metric_spec_tags(parts.metric_specs()))  # what the report reads them as
        with signals_deferred():  # a signal now is handled once `tracker` names the new run
            tracker = JobTracker(settings.tracking_uri, experiment_id, name, tags, settings.outage_seconds)
        record.update_run_info(run_id=tracker.run_id, tags=tags, status="RUNNING")
        tracker.log_params(flatten({k: v for k, v in effective.items() if k != "paper"}, drop_none=True))
        callbacks = [record, tracker]
        if ProgressBar.wanted(multirun):
            progress = ProgressBar(settings.n_iters)
            callbacks.append(progress)
        result = run(*parts.run_args(), replace(settings, checkpoint_path=checkpoint), callbacks=callbacks,
                     reference=parts.reference)
        if result.resumed_from:
            earlier = [row for row in result.history if row["iteration"] <= result.resumed_from]
            tracker.log_history(earlier)
            tracker.set_tags({run_record.RESUMED_FROM_TAG: str(result.resumed_from)})
        health = assess_run(parts, settings, result)
        verdict_tags, verdict_metrics = accuracy_of_run(parts, result)
        tags.update({**health.tags(), **verdict_tags})
        tracker.set_tags({**health.tags(), **verdict_tags})
        tracker.log_history([{"iteration": settings.n_iters, **health.metrics(), **verdict_metrics}])
        record.update_run_info(tags=tags)
        _save(record, parts, result)
        if checkpoint is not None:
            remove_checkpoint(checkpoint)  # the run is complete: nothing to resume
        tracker.log_artifacts(output_dir)
        tracker.finish("FINISHED")
        record.update_run_info(status="FINISHED", uploaded=tracker.lost is None)
    except KeyboardInterrupt:
        _end(record, tracker, "KILLED")
        raise
    except BaseException as error:  # a component's sys.exit too: a failure of this job, not of the command
        interrupt = interrupt_behind(error)
        if interrupt is not None:  # the signal came inside a library call whose clean-up failed
            _end(record, tracker, "KILLED")
            raise interrupt from error
        partial = getattr(error, "partial", None)  # metrics so far and the last finite parameters
        if parts is not None and partial is not None:
            _save(record, parts, partial)
        _end(record, tracker, "FAILED", error, output_dir)
        return _failed(error, multirun, job_number)
    finally:
        if progress is not None:
            progress.close()
    if tracker.lost is not None and record.lost is not None:
        return _failed(TrackingError(
            f"lost the tracking store {redacted(settings.tracking_uri)} ({tracker.lost}) and the local record in "
            f"{output_dir} ({record.lost}): the run's results are kept nowhere"), multirun, job_number)
    if tracker.lost is not None:
        return _failed(TrackingError(
            f"lost the tracking store {redacted(settings.tracking_uri)} ({tracker.lost}); the finished run's results "
            f"are in {output_dir}; upload them with: mcsa-bench sync {output_dir}"), multirun, job_number)
    if not multirun:
        print(f"Finished {settings.n_iters} iterations: {format_metrics(result.history[-1])}")
        if health.status != run_record.HEALTH_OK:
            what = "The fit diverged" if health.diverged else "The fit is suspect"
            print(f"{what} ({health.reason}); the run is tagged mcsa_bench.health={health.status} "
                  "(docs/estimators.md, \"Run health\").")
        if settings.resolved.get("paper"):
            print(paper_note(settings, tags["method"], hydra_cfg.runtime.choices.get("experiment")))
        print(where_to_look(settings.tracking_uri))
    return "FINISHED"


def assess_run(parts: Assembly, settings: RunSettings, result) -> Health:
    """The run's health (mcsa_bench.jobs.health), its k̂ from its own stream of the seed."""
    judged = settings.n_iters >= MIN_ITERATIONS  # a shorter run's k̂ is not read
    khat = final_khat(parts.model, result.q, health_rng(settings.seed), result.history) if judged else None
    return assess(result.history, settings.n_iters, parts.family, parts.family.init_params(), result.q.params,
                  trace=result.trace, khat=khat, n_samples=settings.n_samples)


def accuracy_of_run(parts: Assembly, result) -> tuple[dict[str, str], dict[str, float]]:
    """A run with a reference: its accuracy verdict's tags and its metrics' noise floors (else nothing)."""
    if parts.reference is None:
        return {}, {}
    floors = noise_floors(parts.reference, parts.family)
    verdict = accuracy_verdict(result.history[-1], floors)
    return {run_record.ACCURACY_TAG: verdict.level, run_record.ACCURACY_REASON_TAG: verdict.reason}, floors


def paper_note(settings: RunSettings, method: str, experiment: str | None) -> str:
    """Say that one run of a paper setting is one replication of the paper's average, and how to
    reproduce the average."""
    paper = settings.resolved["paper"]
    reported = paper["values"].get(method, {})
    numbers = ", ".join(f"{name} {value:g}" for name, value in reported.items())
    said = f"; {method} scored {numbers} there" if numbers else ""
    sweep = (f"mcsa-bench run -m experiment={experiment} seed='range(20)' hydra/launcher=joblib"
             if experiment else "mcsa-bench run -m <this setting> seed='range(20)' hydra/launcher=joblib")
    return (f"Note: this is one replication (seed {settings.seed}: one random train/test split) of a setting that "
            f"{paper['source']} averages over {paper['replications']} replications{said}. One split varies a lot; for "
            f"the average run\n  {sweep}\n  mcsa-bench report --sweep latest")


def checkpoint_file(settings: RunSettings, digest: str) -> Path | None:
    """Where a run with checkpoints keeps them: ``outputs/checkpoints/<config hash>.npz``, found again
    by any later run of the same configuration. Only ``resume=true`` continues from an existing one;
    one of the earlier pickle format (``.pkl``) is then given to the engine, which refuses it unread."""
    if not settings.checkpoint_every:
        return None
    path = CHECKPOINT_DIR / f"{digest}.npz"
    pickled = path.with_suffix(".pkl")
    if not settings.resume:
        path.unlink(missing_ok=True)
        pickled.unlink(missing_ok=True)
    return pickled if pickled.exists() and not path.exists() else path


def _failed(error: BaseException, multirun: bool, job_number: int | None) -> str:
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


def _save(record: LocalRecord, parts: Assembly, result) -> None:
    moments = parts.family.moments(result.params)
    record.write_results(result.params, parts.model.latent_names(), {} if moments is None else moments.summary(),
                         parts.model.artifacts(), result.history)


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
