"""A sweep's worker processes: started while the launcher prepares, and cheap between jobs.

Hydra's joblib launcher starts its loky workers only when it dispatches the first job; each then
imports Hydra, numpy, scipy, MLflow and the project (about 3 s of CPU) before that job can start,
and every worker process runs a full garbage collection after each job longer than a second (loky
does so when psutil is absent): 0.2 s over the ~300,000 objects those imports leave behind.

- :class:`JoblibWorkerStart` starts the pool the launcher will use, with the launcher's own
  settings (joblib reuses a pool whose settings match), and has each worker import what a job
  needs and keep pre-flight's compositions of the jobs (a worker composes each distinct group
  choice from scratch otherwise: 0.1-0.3 s each), in a background thread while the launching
  process prepares the store.
- The warm-up freezes what the imports made (``gc.freeze``): it leaves later collections, which
  then see only the jobs' own objects; after its first job (which imports the rest: the model's
  modules, its data) a worker settles (:func:`settle`: collects once, then freezes the survivors).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading

from mcsa_bench.jobs.composition import Compositions

log = logging.getLogger(__name__)

JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
#: what a job imports before its first iteration, besides what its model needs
JOB_MODULES = ("mcsa_bench.jobs.job", "mcsa_bench.tracking.store", "mcsa_bench.tracking.writer",
               "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "mlflow.entities",
               "hydra_plugins.hydra_joblib_launcher._core")


def settle() -> None:
    """Collect garbage once, then exclude every object alive now from later collections."""
    gc.collect()
    gc.freeze()


def settle_after_first_job() -> None:
    """In a worker, after each job: the first imported what the next ones need (the model's
    modules, its data), so settle once then."""
    if not getattr(settle_after_first_job, "done", False):
        settle()
        settle_after_first_job.done = True


def warm_worker(compositions: Compositions) -> int:
    """A worker's first task: import what jobs need, load the components' registry, cache the
    launching process's compositions of the jobs, freeze; its pid."""
    for module in JOB_MODULES:
        importlib.import_module(module)
    from mcsa_bench.jobs.composition import cache_sweep_composition_in_this_worker
    from mcsa_bench.plugins import get_registry

    get_registry()
    cache_sweep_composition_in_this_worker(seed=compositions)
    gc.freeze()  # imports leave little garbage: not worth a 0.2 s collection on every worker's start
    return os.getpid()


def joblib_settings(launcher: dict) -> dict:
    """``joblib.Parallel``'s arguments as Hydra's joblib launcher makes them from its config."""
    from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg

    settings = {key: value for key, value in launcher.items() if key != "_target_"}
    settings["backend"] = "loky"  # the launcher's own choice
    process_joblib_cfg(settings)
    return settings


class JoblibWorkerStart(threading.Thread):
    """Starts and warms the workers of Hydra's joblib launcher configured by ``launcher`` (the
    ``hydra.launcher`` node), handing them pre-flight's ``compositions``, in the background; join
    it before the launcher starts. ``pids``: the warmed workers (empty if the start failed: the
    launcher then starts its workers itself)."""

    def __init__(self, launcher: dict, compositions: Compositions):
        super().__init__(name="mcsa-bench-joblib-workers", daemon=True)
        from joblib import effective_n_jobs

        self.settings, self.compositions = joblib_settings(launcher), compositions
        self.workers = effective_n_jobs(self.settings.get("n_jobs"))
        self.pids: list[int] = []

    def run(self) -> None:
        from joblib import Parallel, delayed

        try:
            self.pids = Parallel(**self.settings)(delayed(warm_worker)(self.compositions) for _ in range(self.workers))
        except Exception as error:
            log.debug("starting the joblib workers early failed: %s", error)

    def end(self) -> None:
        """Once they are started, end the workers at once (:func:`end_joblib_workers`)."""
        self.join()
        end_joblib_workers()


def end_joblib_workers() -> None:
    """End the workers of the joblib pool at once: after the sweep's last job has returned (instead
    of letting each wind its imports down at exit), or when the launch fails before any job ran."""
    from joblib.externals.loky import reusable_executor

    executor = reusable_executor._executor
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)
