"""One Hydra job: a composed config becomes components, a tracked run, and saved results.

The job's results are written to its Hydra output directory as they come and logged as MLflow
artifacts at the end (:mod:`mcsa_bench.tracking.localrecord` lists the files). Every run ends in a
terminal state: FINISHED, FAILED (with the error as a tag, the metrics so far and the last finite
parameters kept), or KILLED (Ctrl-C, SIGTERM, or its launcher gone).
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig, read_write

from mcsa_bench.engine import Snapshot, remove_checkpoint, run
from mcsa_bench.jobs.cell import read_cell, run_cell_jobs
from mcsa_bench.jobs.composition import cache_sweep_composition_in_this_worker
from mcsa_bench.jobs.config import RunSettings
from mcsa_bench.jobs.objective import goals_of_this_trial, trial_value
from mcsa_bench.jobs.summary import ENGINE_METRICS
from mcsa_bench.jobs.threads import limit_threads
from mcsa_bench.jobs.tracked import (
    CELLS_ENV,
    JobPlace,
    TrackedRun,
    checkpoint_file,
    described,
    failed,
    print_single_run_end,
)
from mcsa_bench.jobs.workers import settle_after_first_job
from mcsa_bench.plugins import get_registry
from mcsa_bench.tracking.lifecycle import (
    exit_code,
    in_worker_process,
    install_signal_handlers,
    interrupt_behind,
    watch_launcher,
)
from mcsa_bench.tracking.store import finished_run_with_hash

log = logging.getLogger(__name__)


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


def run_job(cfg: DictConfig) -> str | float | list[float]:
    """The Hydra task function. Returns FINISHED, FAILED, KILLED or SKIPPED (one per job of a cell, joined by
    commas), or to a search's sweeper the trial's value (jobs/objective.py).

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
        place = JobPlace.from_hydra(hydra_cfg, multirun)
        cell_file = os.environ.get(CELLS_ENV) if multirun else None
        if cell_file:  # a sweep by cell: this launcher job runs the members the driver listed
            jobs = cell_members(cfg, place, read_cell(cell_file, hydra_cfg.job.num))
        else:  # the kernel that runs and the config hash, worked out once
            jobs = [(RunSettings.from_config(cfg).resolve(get_registry()), place)]
        if jobs[0][0].backend == "jax":
            statuses = run_cell_jobs(jobs)  # one compiled program for the cell
        else:
            statuses = [_run_tracked_job(settings, place) for settings, place in jobs]  # one after another
        goals = goals_of_this_trial()
        if goals is not None:  # a trial of a search: its sweeper reads the value (jobs/objective.py)
            return trial_of(goals, *jobs[0], statuses[0])
        return ",".join(statuses)
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


def cell_members(cfg: DictConfig, place: JobPlace, members: list[dict]) -> list[tuple[RunSettings, JobPlace]]:
    """The jobs of a launcher job of a sweep by cell (jobs/cell.py): ``cfg`` is its first member's composed
    config; each member's is the same with the member's seed (its cell differs in nothing else, and what
    follows ``${seed}`` follows it), at the member's own place in the sweep."""
    registry, jobs = get_registry(), []
    for member in members:
        own = copy.deepcopy(cfg)
        with read_write(own):
            own.seed = member["seed"]
        jobs.append((RunSettings.from_config(own).resolve(registry),
                     replace(place, number=member["number"], output_dir=Path(member["output_dir"]),
                             overrides=tuple(member["overrides"]))))
    return jobs


def trial_of(goals, settings: RunSettings, place: JobPlace, status: str) -> float | list[float]:
    """A search's trial: the value of its run, or under resume=true of the FINISHED run it was skipped for."""
    reused = None
    if status == "SKIPPED":
        run = finished_run_with_hash(settings.tracking_uri, place.experiment_id, settings.identity)
        reused = run.data.metrics if run is not None else None
        if run is not None:
            print(f"resume: trial #{place.number or 0} reuses the FINISHED run {run.info.run_id} of its configuration")
    return trial_value(goals, status, place.output_dir, reused, place.number)


def _run_tracked_job(settings: RunSettings, place: JobPlace) -> str:
    registry = get_registry()
    limit_threads(settings.threads)
    tracked = TrackedRun(settings, place, registry)
    if tracked.already_finished():
        return "SKIPPED"
    tracked.start_record()
    parts = progress = None
    try:
        parts = settings.assemble(registry)
        tracked.open(parts, claimant=bool(settings.resume or settings.checkpoint_every))
        holder = tracked.claim_cell()
        if holder is not None and settings.resume:
            return tracked.skip_for(holder)
        if holder is not None:
            print(f"mcsa-bench: {described(holder)} computes this configuration and writes its checkpoint; "
                  "this run writes none", file=sys.stderr)
        checkpoint = checkpoint_file(settings, tracked.digest) if holder is None else None
        callbacks = tracked.callbacks
        if ProgressBar.wanted(place.multirun):
            progress = ProgressBar(settings.n_iters)
            callbacks.append(progress)
        checkpoints = replace(settings, checkpoint_path=checkpoint, checkpoint_every=settings.checkpoint_every
                              if checkpoint is not None else 0)
        result = run(*parts.run_args(), checkpoints, callbacks=callbacks, reference=parts.reference,
                     target_draws=parts.target_draws)
        health = tracked.complete(parts, result)
        if checkpoint is not None:
            remove_checkpoint(checkpoint)  # the run is complete: nothing to resume
    except KeyboardInterrupt:
        tracked.kill()
        raise
    except BaseException as error:  # a component's sys.exit too: a failure of this job, not of the command
        interrupt = interrupt_behind(error)
        if interrupt is not None:  # the signal came inside a library call whose clean-up failed
            tracked.kill()
            raise interrupt from error
        tracked.fail(error, parts)
        return failed(error, place.multirun, place.number)
    finally:
        if progress is not None:
            progress.close()
    lost = tracked.lost_error()
    if lost is not None:
        return failed(lost, place.multirun, place.number)
    if not place.multirun:
        print_single_run_end(settings, tracked, result.history[-1], health, place.experiment)
    return "FINISHED"
