"""backend=jax through `mcsa-bench run` (mcsa_bench/jobs/cell.py): a sweep's seeds of one
configuration as one cell, each replicate its own run with what a numpy job's run records, resume
per replicate, a failing replicate alone FAILED, a mixed grid and its report. The signal test is in
tests/e2e/test_reliability.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from mcsa_bench.jobs.cell import cell_key, group_cells, launcher_cells, split_evenly
from mcsa_bench.jobs.config import RunSettings, compose, register_configs
from mcsa_bench.plugins import get_registry
from mcsa_bench.tracking import record
from tests.support import cli, cli_in_process

SMALL = ["model.dim=3", "n_iters=60", "eval_every=20"]


def client_of(workdir: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}")


def job_runs(workdir: Path) -> list:
    client = client_of(workdir)
    experiment = client.get_experiment_by_name("mcsa-bench").experiment_id
    return client.search_runs([experiment], filter_string=f"tags.`{record.ROLE_TAG}` = '{record.ROLE_JOB}'")


def saved_params(workdir: Path, run) -> np.ndarray:
    """λ of a run's variational.npz artifact."""
    return np.load(workdir / "outputs" / "mlartifacts" / run.info.run_id / "artifacts" / "variational.npz")["params"]


def by_seed(runs) -> dict[int, object]:
    return {int(run.data.params["seed"]): run for run in runs}


def settings_of(*overrides: str) -> list[RunSettings]:
    register_configs(get_registry())
    return [RunSettings.from_config(cfg).resolve(get_registry())
            for _, cfg in compose(list(overrides), multirun=True).jobs]


def test_the_jobs_that_differ_only_in_seed_are_one_cell_and_a_model_following_the_seed_stays_in_it():
    jobs = settings_of("backend=jax", "seed=0,1,2,3", "optimizer.lr=0.01,0.02")
    assert all(job.seed_following == ("seed",) for job in jobs)  # the Gaussian target follows the seed
    cells = group_cells([(job, None) for job in jobs])
    assert [[job.seed for job, _ in cell] for cell in cells] == [[0, 1, 2, 3]] * 2
    assert {job.resolved["optimizer"]["lr"] for job, _ in cells[0]} == {0.01}
    pinned = settings_of("backend=jax", "seed=3", "model.dim=3,4")  # dim equal to the seed is no seed
    assert cell_key(pinned[0]) != cell_key(pinned[1])
    assert [cell_key(job) for job in settings_of("backend=jax", "seed=3,4", "model.dim=3")].count(
        cell_key(pinned[0])) == 2


def test_a_numpy_cell_is_cut_into_parts_that_leave_four_launcher_jobs_per_parallel_slot_and_a_jax_cell_is_not():
    numpy = [(job, None) for job in settings_of("estimator=pmcsa,jsa,msc,msc_rb", "seed=range(6)", "model.dim=3")]
    sizes = {parallel: [[job.seed for job, _ in part] for part in launcher_cells(numpy, parallel)]
             for parallel in (1, 2, 3, 6, 16)}
    assert sizes[1] == [list(range(6))] * 4  # the basic launcher: whole cells
    assert sizes[2] == [[0, 1, 2], [3, 4, 5]] * 4  # 24 jobs for 2 workers: parts of 3, 8 launcher jobs
    assert sizes[3] == [[0, 1], [2, 3], [4, 5]] * 4
    assert sizes[6] == sizes[16] == [[seed] for seed in range(6)] * 4  # too few jobs per slot: none grouped
    assert [len(part) for part in split_evenly(list(range(7)), 3)] == [2, 3, 2]
    jax = [(job, None) for job in settings_of("backend=jax", "seed=range(6)", "model.dim=3")]
    assert [[job.seed for job, _ in part] for part in launcher_cells(jax, 16)] == [list(range(6))]  # one compile


@pytest.mark.slow
def test_a_jax_run_records_the_params_tags_metrics_and_files_of_a_numpy_run(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    for backend in ("numpy", "jax"):
        result = cli_in_process("run", f"backend={backend}", *SMALL, cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0 and "Finished 60 iterations: kl_exclusive=" in result.stdout, result.stderr
    # the jax run says that its cell gets its programs (compiled: a minute on a new structure) and how long it took
    assert "backend=jax: a cell of 1 replicates gets its programs: compiled, unless" in result.stdout
    assert re.search(r"backend=jax: 1 replicates on \S+: programs [0-9.]+ s, optimization [0-9.]+ s, evaluation",
                     result.stdout), result.stdout
    runs = {run.data.tags[record.BACKEND_TAG]: run for run in job_runs(tmp_path)}
    numpy, jax = runs["numpy"], runs["jax"]
    assert numpy.info.status == jax.info.status == "FINISHED"
    assert set(jax.data.params) == set(numpy.data.params)
    assert {k: v for k, v in jax.data.params.items() if jax.data.params[k] != numpy.data.params[k]} == {
        "backend": "jax"}
    cell_tags = {record.CELL_TAG, record.CELL_SECONDS_TAG}
    assert set(jax.data.tags) - set(numpy.data.tags) == cell_tags
    assert jax.data.tags[record.CELL_TAG].endswith("R=1 chunk=1")
    seconds = json.loads(jax.data.tags[record.CELL_SECONDS_TAG])
    assert set(seconds) == {"programs", "optimization", "evaluation"} and seconds["programs"] > 0
    assert set(jax.data.tags) - cell_tags == set(numpy.data.tags)
    differing = {k for k in numpy.data.tags if numpy.data.tags[k] != jax.data.tags[k]}
    results = {record.ACCURACY_TAG, record.ACCURACY_REASON_TAG, record.HEALTH_TAG, record.HEALTH_REASON_TAG}
    assert differing - results <= {record.BACKEND_TAG, record.CONFIG_HASH_TAG, record.OVERRIDES_TAG,
                                   record.HEARTBEAT_TAG, record.PID_TAG, record.PROCESS_TAG, "mlflow.runName"}
    assert set(jax.data.metrics) == set(numpy.data.metrics)
    assert jax.data.metrics["log_density_evals"] == numpy.data.metrics["log_density_evals"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    steps = {backend: [m.step for m in client.get_metric_history(run.info.run_id, "kl_inclusive")]
             for backend, run in runs.items()}
    assert steps["jax"] == steps["numpy"] == [0, 20, 40, 60]
    files = {backend: sorted(a.path for a in client.list_artifacts(run.info.run_id)) for backend, run in runs.items()}
    assert files["jax"] == files["numpy"]


@pytest.mark.slow
def test_a_cell_of_four_seeds_resumes_per_replicate_and_a_subset_reproduces_its_replicates(tmp_path, store_in,
                                                                                          monkeypatch):
    store_in(tmp_path)
    first = cli_in_process("run", "-m", "backend=jax", "seed=0,1,2,3", *SMALL, cwd=tmp_path, monkeypatch=monkeypatch)
    assert first.returncode == 0 and "4 jobs, 4 FINISHED, 0 not" in first.stdout, first.stderr
    runs = by_seed(job_runs(tmp_path))
    assert {run.info.status for run in runs.values()} == {"FINISHED"}
    assert {run.data.tags[record.CELL_TAG].split(" ", 1)[1] for run in runs.values()} == {"R=4 chunk=4"}  # one cell

    again = cli_in_process("run", "-m", "backend=jax", "seed=0,1,2,3,4", *SMALL, "resume=true", cwd=tmp_path,
                           monkeypatch=monkeypatch)
    assert again.returncode == 0 and "resume: skipping 4 of 5 jobs" in again.stdout, again.stderr
    resumed = by_seed(job_runs(tmp_path))
    assert len(job_runs(tmp_path)) == 5 and resumed[4].data.tags[record.CELL_TAG].endswith("R=1 chunk=1")

    elsewhere = tmp_path / "subset"
    elsewhere.mkdir()
    store_in(elsewhere)
    subset = cli_in_process("run", "-m", "backend=jax", "seed=3,1", *SMALL, cwd=elsewhere, monkeypatch=monkeypatch)
    assert subset.returncode == 0, subset.stderr
    for seed, run in by_seed(job_runs(elsewhere)).items():
        assert run.data.metrics == runs[seed].data.metrics | {"wall_time": run.data.metrics["wall_time"]}
        assert run.data.tags[record.CONFIG_HASH_TAG] == runs[seed].data.tags[record.CONFIG_HASH_TAG]
        np.testing.assert_array_equal(saved_params(elsewhere, run), saved_params(tmp_path, runs[seed]))  # bit for bit


@pytest.mark.slow
def test_a_killed_cell_with_checkpoints_resumes_into_the_uninterrupted_runs_and_logs_the_diagnostic(
        tmp_path, store_in, monkeypatch):
    """checkpoint_every and diagnostics.every with backend=jax: a cell killed (Ctrl-C) after its first
    checkpoint ends its runs KILLED; resume=true continues it from the checkpoint into runs whose
    metrics (grad_variance and grad_bias among them) and λ equal an uninterrupted sweep's, and removes it."""
    from mcsa_bench.accel import engine

    sweep = ["-m", "backend=jax", "seed=0,1", *SMALL, "checkpoint_every=30", "diagnostics.every=5",
             "diagnostics.replicas=4"]
    save = engine.save_checkpoint

    def killed(path, state):
        save(path, state)
        raise KeyboardInterrupt

    store_in(tmp_path)
    monkeypatch.setattr(engine, "save_checkpoint", killed)
    interrupted = cli_in_process("run", *sweep, cwd=tmp_path, monkeypatch=monkeypatch)
    assert interrupted.returncode == 130 and {run.info.status for run in job_runs(tmp_path)} == {"KILLED"}
    assert len(list((tmp_path / "outputs" / "checkpoints").glob("cell-*.npz"))) == 1
    monkeypatch.setattr(engine, "save_checkpoint", save)
    starts, start = [], engine.CompiledCell.start
    monkeypatch.setattr(engine.CompiledCell, "start", lambda self, *a: starts.append(1) or start(self, *a))
    resumed = cli_in_process("run", *sweep, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch)
    assert resumed.returncode == 0 and not starts, resumed.stderr  # continued from the checkpoint, not started
    assert not list((tmp_path / "outputs" / "checkpoints").glob("cell-*"))
    elsewhere = tmp_path / "uninterrupted"
    elsewhere.mkdir()
    store_in(elsewhere)
    assert cli_in_process("run", *sweep, cwd=elsewhere, monkeypatch=monkeypatch).returncode == 0
    finished = by_seed([run for run in job_runs(tmp_path) if run.info.status == "FINISHED"])
    for seed, run in by_seed(job_runs(elsewhere)).items():
        assert {"grad_variance", "grad_bias"} <= set(run.data.metrics)
        assert finished[seed].data.metrics == run.data.metrics | {"wall_time": finished[seed].data.metrics["wall_time"]}
        np.testing.assert_array_equal(saved_params(tmp_path, finished[seed]), saved_params(elsewhere, run))
        # issue 52: as a numpy run continued from a checkpoint is (the uninterrupted ones carry no such tag)
        assert finished[seed].data.tags[record.RESUMED_FROM_TAG] == "30"
        assert record.RESUMED_FROM_TAG not in run.data.tags


def _nan_parameters_for_seed(failing_seed: int, at: int):
    """_Cell._iteration with λ made NaN for one seed at one iteration: the real failure path from there."""
    import jax.numpy as jnp

    from mcsa_bench.accel.engine import _Cell

    original = _Cell._iteration

    def iteration(self, replicate, seed, data, t):
        planted = (seed == failing_seed) & (t == at)
        return original(self, replicate._replace(params=jnp.where(planted, jnp.nan, replicate.params)), seed, data, t)

    return iteration


@pytest.mark.slow
def test_a_replicate_that_fails_ends_failed_alone_with_its_partial_result(tmp_path, store_in, monkeypatch):
    from mcsa_bench.accel.engine import _Cell

    store_in(tmp_path)
    monkeypatch.setattr(_Cell, "_iteration", _nan_parameters_for_seed(2, at=30))
    result = cli_in_process("run", "-m", "backend=jax", "seed=0,1,2,3", *SMALL, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 1 and "4 jobs, 3 FINISHED, 1 not" in result.stdout, result.stderr
    runs = by_seed(job_runs(tmp_path))
    assert {seed: run.info.status for seed, run in runs.items()} == {0: "FINISHED", 1: "FINISHED", 2: "FAILED",
                                                                     3: "FINISHED"}
    error = runs[2].data.tags[record.ERROR_TAG]
    assert error == "NonFiniteError: non-finite log density at iteration 30 (backend=jax)"  # q's draws are NaN
    local = json.loads(next((tmp_path / "outputs" / "multirun").rglob("2/run.json")).read_text())
    assert local["status"] == "FAILED"
    rows = (next((tmp_path / "outputs" / "multirun").rglob("2/metrics.csv")).read_text().splitlines())
    assert [row.split(",")[0] for row in rows[1:]] == ["0", "20"]  # the evaluations before the failure


@pytest.mark.slow
def test_a_grid_mixing_backends_runs_both_and_reports_a_table_per_backend(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    sweep = cli_in_process("run", "-m", "backend=numpy,jax", "experiment=logistic_pima", "size=tiny", "n_iters=40",
                           "eval_every=20", "seed=0,1", cwd=tmp_path, monkeypatch=monkeypatch)
    assert sweep.returncode == 0 and "4 jobs, 4 FINISHED, 0 not" in sweep.stdout, sweep.stderr
    assert sorted(run.data.tags[record.BACKEND_TAG] for run in job_runs(tmp_path)) == ["jax", "jax", "numpy", "numpy"]
    out = tmp_path / "report"
    report = cli_in_process("report", "--sweep", "latest", "--no-figures", "--out", str(out), cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert report.returncode == 0, report.stderr
    tables = json.loads((out / "summary.json").read_text())["tables"]
    assert {(t["metric"], t["panel"]["backend"]) for t in tables} == {
        (metric, backend) for metric in ("test_lpd", "test_accuracy") for backend in ("numpy", "jax")}
    assert all(cell["n"] == 2 for table in tables for cell in table["cells"])


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["backend=torch"], "unknown backend 'torch'; allowed: numpy, jax"),
    (["backend=jax", "model=funnel"], "model 'funnel' has no JAX twin (backend=jax); covered models: "),
])
def test_a_backend_that_cannot_run_the_command_is_one_line_before_anything_runs(tmp_path, monkeypatch, args, message):
    result = cli_in_process("run", *args, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists()


# ----------------------------------------------------------------------------- numpy sweeps by cell

NUMPY_GRID = ["seed=0,1,2", "optimizer.lr=0.01,0.02", *SMALL]
#: tags that name the process, the sweep or the moment a run was written, not what it computed (the checkout's
#: commit and state are read once per process: a commit between the two sweeps would change them)
WHERE_AND_WHEN = {record.PID_TAG, record.PROCESS_TAG, record.HEARTBEAT_TAG, record.SWEEP_TAG, record.PARENT_TAG,
                  record.COMMIT_TAG, record.DIRTY_TAG, "mlflow.source.name", "mlflow.user"}


def by_job(runs) -> dict[int, object]:
    return {int(run.data.tags[record.JOB_NUMBER_TAG]): run for run in runs}


def cell_file(workdir: Path) -> Path | None:
    return next((workdir / "outputs" / "multirun").rglob(".mcsa_bench_cells.json"), None)


@pytest.mark.slow
def test_a_numpy_sweep_runs_a_launcher_job_per_cell_recording_what_a_launcher_job_per_seed_records(
        tmp_path, store_in, monkeypatch):
    grouped, per_seed = tmp_path / "grouped", tmp_path / "per_seed"
    for workdir in (grouped, per_seed):
        store_in(workdir)
    # the basic launcher runs one job at a time: one launcher job per cell, its three seeds in it
    result = cli_in_process("run", "-m", *NUMPY_GRID, cwd=grouped, monkeypatch=monkeypatch)
    assert result.returncode == 0 and "6 jobs, 6 FINISHED, 0 not" in result.stdout, result.stderr
    assert "By cell: 6 jobs in 2 launcher jobs" in result.stdout
    cells = json.loads(cell_file(grouped).read_text())
    assert [[member["number"] for member in cell] for cell in cells] == [[0, 2, 4], [1, 3, 5]]
    # two joblib workers for 6 jobs: too few to group (jobs/cell.py, JOBS_PER_SLOT), so one per seed, as before
    result = cli("run", "-m", *NUMPY_GRID, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", cwd=per_seed)
    assert result.returncode == 0 and "6 jobs, 6 FINISHED, 0 not" in result.stdout, result.stderr
    assert "By cell" not in result.stdout and cell_file(per_seed) is None

    ours, theirs = by_job(job_runs(grouped)), by_job(job_runs(per_seed))
    assert sorted(ours) == sorted(theirs) == list(range(6))
    for number, run in ours.items():
        other = theirs[number]
        assert run.info.status == other.info.status == "FINISHED"
        assert run.info.run_name == other.info.run_name
        assert run.data.params == other.data.params
        assert run.data.metrics == other.data.metrics | {"wall_time": run.data.metrics["wall_time"]}
        assert {k: v for k, v in run.data.tags.items() if k not in WHERE_AND_WHEN} == {
            k: v for k, v in other.data.tags.items() if k not in WHERE_AND_WHEN}
        local = json.loads((Path(run.data.tags[record.SWEEP_TAG]) / str(number) / "run.json").read_text())
        assert local["status"] == "FINISHED" and local["run_id"] == run.info.run_id


@pytest.mark.slow
def test_a_failing_seed_fails_alone_and_its_cell_mates_run_on(tmp_path, store_in, monkeypatch):
    from mcsa_bench.api import NonFiniteError
    from mcsa_bench.jobs import job

    def run_failing_seed_1(*args, **kwargs):
        settings = args[4]
        if settings.seed == 1:
            raise NonFiniteError("planted non-finite log density", iteration=7, quantity="log density")
        return engine_run(*args, **kwargs)

    engine_run = job.run
    monkeypatch.setattr(job, "run", run_failing_seed_1)
    store_in(tmp_path)
    result = cli_in_process("run", "-m", "seed=0,1,2", *SMALL, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 1 and "3 jobs, 2 FINISHED, 1 not" in result.stdout, result.stderr
    assert "By cell: 3 jobs in 1 launcher jobs" in result.stdout
    runs = by_seed(job_runs(tmp_path))
    assert {seed: run.info.status for seed, run in runs.items()} == {0: "FINISHED", 1: "FAILED", 2: "FINISHED"}
    assert runs[1].data.tags[record.ERROR_TAG] == "NonFiniteError: planted non-finite log density"


@pytest.mark.slow
def test_a_jax_cell_runs_as_one_job_of_the_joblib_launcher(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    result = cli("run", "-m", "backend=jax", "seed=0,1,2", *SMALL, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                 cwd=tmp_path)
    assert result.returncode == 0 and "3 jobs, 3 FINISHED, 0 not" in result.stdout, result.stderr
    assert "By cell: 3 jobs in 1 launcher jobs" in result.stdout
    runs = job_runs(tmp_path)
    assert {run.data.tags[record.CELL_TAG].split(" ", 1)[1] for run in runs} == {"R=3 chunk=3"}  # one program
    (pid,) = {run.data.tags[record.PID_TAG] for run in runs}  # in one worker
    client = client_of(tmp_path)
    experiment = client.get_experiment_by_name("mcsa-bench").experiment_id
    launching = client.search_runs([experiment], filter_string=f"tags.`{record.ROLE_TAG}` = '{record.ROLE_SWEEP}'")[0]
    assert pid != launching.data.tags[record.PID_TAG]  # not in the launching process
