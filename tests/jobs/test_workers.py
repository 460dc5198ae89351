"""A sweep's joblib workers (mcsa_bench/jobs/workers.py): started and warmed while pre-flight
prepares the store, reused by Hydra's joblib launcher, cheap between jobs, ended with the sweep."""

from __future__ import annotations

import gc
import os

import pytest
from omegaconf import OmegaConf

from mcsa_bench.jobs import composition, launch, workers
from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME, compose, register_configs
from mcsa_bench.plugins import get_registry
from tests.support import cli_in_process

JOBLIB = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


@pytest.fixture
def recorded(monkeypatch):
    """The launch's JoblibWorkerStart, recording each start (``recorded.started``) and end (``.ended``)."""
    class Recorded(workers.JoblibWorkerStart):
        started, ended = [], []

        def start(self):
            Recorded.started.append(self)
            super().start()

        def end(self):
            Recorded.ended.append(self)
            super().end()

    monkeypatch.setattr(launch, "JoblibWorkerStart", Recorded)
    monkeypatch.setenv("KMP_INIT_AT_FORK", "FALSE")  # what loky sets in the launching process when it starts workers
    return Recorded


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_joblib_sweep_runs_its_jobs_in_the_workers_warmed_during_pre_flight_and_ends_them(
    tmp_path, store_in, monkeypatch, recorded
):
    """Hydra's launcher reuses the pool pre-flight started (same settings): every job ran in a
    warmed worker, and the workers are gone when the command returns."""
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.lifecycle import PID_TAG

    result = cli_in_process("run", "-m", *JOBLIB, "seed=0,1,2,3", "model.dim=2", "n_iters=20", "eval_every=10",
                            cwd=store_in(tmp_path), monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    (start,) = recorded.started
    assert len(set(start.pids)) == 2
    store = MlflowClient(f"sqlite:///{tmp_path}/outputs/mlflow.db")
    experiment = store.get_experiment_by_name("mcsa-bench")
    jobs = [r for r in store.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(jobs) == 4 and all(r.info.status == "FINISHED" for r in jobs)
    assert {int(r.data.tags[PID_TAG]) for r in jobs} <= set(start.pids)
    assert not any(alive(pid) for pid in start.pids)


def test_a_warmed_worker_has_settled_its_imports_and_keeps_pre_flights_compositions(tmp_path):
    """After the warm-up, the worker's imports are frozen out of garbage collection (loky collects
    after every job), and a job of the sweep finds its composition in the worker's cache."""
    from joblib import Parallel, delayed

    shared = {}
    sweep = compose([*JOBLIB, "estimator=msc,pmcsa", "seed=0,1", f"hydra.sweep.dir={tmp_path}"], multirun=True,
                    compositions=shared)
    start = workers.JoblibWorkerStart(sweep.launcher_settings, shared)
    start.start()
    start.join()
    settings = workers.joblib_settings(sweep.launcher_settings)
    frozen = Parallel(**settings)(delayed(gc.get_freeze_count)() for _ in range(8))
    pids = Parallel(**settings)(delayed(os.getpid)() for _ in range(8))
    workers.end_joblib_workers()
    assert set(pids) <= set(start.pids) and len(set(start.pids)) == 2
    assert min(frozen) > 50_000  # numpy, scipy, Hydra, MLflow and the project: ~300,000 objects


def test_a_worker_seeded_with_pre_flights_compositions_composes_no_job_again_and_equals_hydra(
        monkeypatch, compositions_from_scratch):
    """The compositions a warm worker receives serve the sweep's jobs from the first one on (keyed
    by config name, sources and group overrides); a job they do not cover is composed as before."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from_scratch, calls = ConfigLoaderImpl.load_sweep_config, compositions_from_scratch
    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", from_scratch)  # restored after the test
    monkeypatch.setattr(composition, "_worker_seed", {})
    command = ["estimator=msc,pmcsa", "seed=0,1"]
    shared = {}
    jobs = compose(command, multirun=True, compositions=shared).jobs
    seeded = len(calls)
    composition.cache_sweep_composition_in_this_worker(seed=shared)
    hydra = Hydra.create_main_hydra2("mcsa-bench", create_config_search_path(f"pkg://{CONFIG_MODULE}"))
    try:
        master = hydra.compose_config(CONFIG_NAME, command, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        for job, _ in [*jobs, (["estimator=jsa", "seed=0"], None)]:
            cached = hydra.config_loader.load_sweep_config(master, job)
            exact = from_scratch(hydra.config_loader, master, job)
            assert OmegaConf.to_container(cached) == OmegaConf.to_container(exact), job
    finally:
        GlobalHydra.instance().clear()
    assert calls[seeded:] == [["estimator=jsa"]]  # only the job pre-flight did not compose


def test_settle_freezes_what_is_alive_and_collects_the_rest():
    class Cycle:
        pass

    garbage = Cycle()
    garbage.self = garbage
    del garbage
    kept = [object() for _ in range(100)]
    try:
        before = gc.get_freeze_count()
        workers.settle()
        assert gc.get_freeze_count() >= before + len(kept)
        assert not any(type(o) is Cycle for o in gc.get_objects()) and gc.collect() == 0
    finally:
        gc.unfreeze()


def test_a_launch_that_fails_after_the_workers_started_ends_them(tmp_path, monkeypatch, recorded):
    """A store that cannot be prepared fails the command (exit 2, one line) with no job run: the
    workers started for it are ended at once instead of importing on until the process exits."""
    from mcsa_bench.api import ConfigurationError

    def unusable_store(uri, experiment):
        raise ConfigurationError(f"tracking store {uri} is unusable")

    monkeypatch.setattr(launch, "prepare_store", unusable_store)
    result = cli_in_process("run", "-m", *JOBLIB, "seed=0,1", "model.dim=2", "n_iters=2", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 2 and "is unusable" in result.stderr
    (start,) = recorded.started
    assert recorded.ended == [start] and not start.is_alive() and len(start.pids) == 2
    assert not any(alive(pid) for pid in start.pids)
