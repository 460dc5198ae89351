"""The grid experiment=posterior_accuracy: its size at each setting, and a smoke run through the CLI in
which every job finds its reference and logs the posterior-accuracy metrics."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from mcsa_bench import get_registry
from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs
from tests.conf.test_grids import all_child_runs, sweep_size
from tests.support import cli_in_process

ACCURACY_METRICS = ("ref_mean_error_max", "ref_mean_error_rms", "ref_log_sd_ratio_max", "ref_log_sd_ratio_rms",
                    "excess_inclusive_kl")


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


def test_grid_sizes():
    # 4 pairs x 6 methods x 3 families x averaging off/on x 5 replications
    assert sweep_size("experiment=posterior_accuracy") == 4 * 6 * 3 * 2 * 5
    assert sweep_size("experiment=posterior_accuracy", "size=bench") == 720
    assert sweep_size("experiment=posterior_accuracy", "size=smoke") == 2 * 2 * 3 * 2 * 2


def test_every_job_is_on_all_rows_at_the_papers_n_and_t():
    jobs = [RunSettings.from_config(cfg) for _, cfg in compose_jobs(["experiment=posterior_accuracy"], multirun=True)]
    assert {job.n_iters for job in jobs} == {10_000} and {job.n_samples for job in jobs} <= {1, 10}
    for job in jobs:
        model = job.resolved["model"]
        assert model.get("test_fraction", 0) == 0 and job.resolved.get("max_rows") is None


@pytest.mark.slow
def test_smoke_run_logs_the_accuracy_metrics_in_every_job(tmp_path, store_in, monkeypatch):
    store = store_in(tmp_path, "mlflow.db") / "mlflow.db"
    result = cli_in_process("run", "-m", "experiment=posterior_accuracy", "size=smoke", "seed=0",
                            f"tracking.uri=sqlite:///{store}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                            cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    _, children = all_child_runs(store)
    assert Counter(run.info.status for run in children) == Counter({"FINISHED": 24})
    assert {run.data.tags["mcsa_bench.reference"] for run in children} == {"logistic--pima-raw", "radon--radon"}
    for run in children:
        assert all(math.isfinite(run.data.metrics[name]) for name in ACCURACY_METRICS), run.info.run_name
    student = [run for run in children if run.data.params["family.name"] == "meanfield_student_t"]
    assert student and all("excess_inclusive_kl_se" in run.data.metrics for run in student)
