"""Sweeps through a real Slurm cluster (hydra/launcher=submitit_slurm, mcsa_bench/jobs/slurm.py):
a single-node cluster of Debian's slurmctld, slurmd and munge on 127.0.0.1 (tests/e2e/slurm_cluster.py)
whose MaxArraySize is 2, so that a sweep of 6 jobs (each task about 10 CPU s) needs three arrays; a job
cancelled with scancel mid-run and resumed from its checkpoint; Ctrl-C on the launching process. Skipped,
with the reason, where Slurm is not installed. The cluster's configuration is parsed and the arrays planned
in the fast tests below without it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mcsa_bench.jobs.slurm import LEFT_THE_QUEUE, ClusterLimits, queue_command, read_queue, shares, split
from tests.e2e.slurm_cluster import SlurmCluster, slurm_missing
from tests.support import cli, cli_in_process, wait_for

MAX_ARRAY_SIZE = 2
TINY = ["model.dim=3", "n_iters=20", "eval_every=10"]


# --------------------------------------------------------------------------- without a cluster

CONFIG = """\
Configuration data as of 2026-11-27T17:11:08
AccountingStorageType   = accounting_storage/slurmdbd
KillWait                = 30 sec
MaxArraySize            = 1001
MaxJobCount             = 10000
SchedulerParameters     = default_queue_depth=100,max_array_tasks=300,bf_continue
"""


def test_the_array_limit_is_the_smaller_of_max_array_size_and_max_array_tasks():
    limits = ClusterLimits.parse(CONFIG)
    assert limits == ClusterLimits(array_tasks=300, accounting=True, kill_wait=30)
    plain = CONFIG.replace("max_array_tasks=300,", "").replace("slurmdbd", "none").replace("1001", "4")
    assert ClusterLimits.parse(plain) == ClusterLimits(array_tasks=4, accounting=False, kill_wait=30)
    assert ClusterLimits.parse(CONFIG.replace("(null)", "").replace("1001", "0")).array_tasks == 1  # arrays off


@pytest.mark.parametrize("n_tasks, array_tasks", [(10, 4), (8, 4), (1, 4), (3, 1), (12_060, 1001)])
def test_a_sweep_is_split_into_consecutive_arrays_that_fit(n_tasks, array_tasks):
    parts = split(n_tasks, array_tasks)
    assert [task for part in parts for task in part] == list(range(n_tasks))
    assert all(1 <= len(part) <= array_tasks for part in parts) and len(parts) == -(-n_tasks // array_tasks)


@pytest.mark.parametrize("parallelism, n_arrays", [(6, 3), (7, 3), (64, 13), (2, 3), (1, 1)])
def test_array_parallelism_is_shared_between_the_arrays(parallelism, n_arrays):
    parts = shares(parallelism, n_arrays)
    assert len(parts) == n_arrays and min(parts) >= 1 and max(parts) - min(parts) <= 1
    assert sum(parts) == max(parallelism, n_arrays)


def test_without_accounting_job_states_come_from_the_queue_and_a_job_that_left_it_has_ended():
    """submitit's watcher asks sacct, which fails without accounting storage: a task killed without a
    result would be waited for forever. In its place squeue lists the tasks; one no longer listed ended."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    watcher = SlurmInfoWatcher()
    assert queue_command(watcher) is None  # nothing to ask about
    for task in ("12_0", "12_1", "12_2", "13"):
        watcher.register_job(task)
    assert queue_command(watcher)[0] == "squeue" and "--states=all" in queue_command(watcher)
    info = read_queue(watcher, b"12_0|RUNNING|localhost\n12_1|CANCELLED|localhost\n13|PENDING|\n99_0|RUNNING|x\n")
    states = {task: info[task]["State"] for task in ("12_0", "12_1", "12_2", "13")}
    assert states == {"12_0": "RUNNING", "12_1": "CANCELLED", "12_2": LEFT_THE_QUEUE, "13": "PENDING"}
    watcher._info_dict.update(info)
    done = {task: watcher.is_done(task, mode="cache") for task in states}
    assert done == {"12_0": False, "12_1": True, "12_2": True, "13": False}


def test_the_slurm_launcher_without_slurm_is_one_line_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python, and no scontrol
    result = cli_in_process("run", "-m", "hydra/launcher=submitit_slurm", "seed=0,1", *TINY, cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "scontrol" in result.stderr and "submitit_local" in result.stderr
    assert not (tmp_path / "outputs").exists()  # no store, no run, no job directory


# ------------------------------------------------------------------------------- on a cluster


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(max_array_size=MAX_ARRAY_SIZE).start()
    try:
        yield cluster
    finally:
        cluster.stop()
    daemons = [f"{name} (pid {process.pid})" for name, process in cluster.daemons.items() if process.poll() is None]
    assert not daemons, f"still running after the cluster's stop: {', '.join(daemons)}"


def runs(workdir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}")
    return client, client.search_runs(["1"], max_results=1000)


def children(all_runs):
    return sorted((r for r in all_runs if "mlflow.parentRunId" in r.data.tags),
                  key=lambda r: (int(r.data.tags["hydra.job.num"]), r.info.start_time))


def arrays_of(cluster: SlurmCluster, job_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    """The tasks slurmctld knows of the arrays ``job_ids``, by array."""
    found: dict[str, list[dict[str, str]]] = {}
    for job in cluster.jobs():
        if job.get("ArrayJobId", job["JobId"]) in job_ids:
            found.setdefault(job.get("ArrayJobId", job["JobId"]), []).append(job)
    return found


def submitted_arrays(output: str) -> set[str]:
    """The array ids the launching process reported (``Slurm: ... jobs 12, 15, 16``)."""
    line = next(line for line in output.splitlines() if line.startswith("Slurm: "))
    return set(line.rpartition("jobs ")[2].split(", "))


@pytest.mark.slow
def test_the_cluster_listens_on_loopback_only(cluster):
    from tests.e2e.test_scaling import _leaves_loopback, _sockets

    pids = {process.pid for process in cluster.daemons.values()}
    sockets = _sockets(pids)
    assert sockets, "the daemons hold no socket: the check would see nothing"
    assert [s for s in sockets if _leaves_loopback(*s[1][2:])] == []


@pytest.mark.slow
def test_a_sweep_larger_than_max_array_size_runs_as_arrays_that_fit(cluster, tmp_path, store_in):
    store_in(tmp_path)
    result = cli("run", "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.array_parallelism=6",
                 "seed=range(6)", *TINY, cwd=tmp_path, env=cluster.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr + cluster.logs()
    assert (
        "Slurm: 6 jobs in 3 arrays of at most 2 tasks (the cluster's limit), array_parallelism 6 shared as 2+2+2"
        in result.stdout
    )
    arrays = arrays_of(cluster, submitted_arrays(result.stdout))
    assert sorted(len(tasks) for tasks in arrays.values()) == [2, 2, 2]
    assert {task["ArrayTaskThrottle"] for tasks in arrays.values() for task in tasks} == {"2"}
    assert {task["JobState"] for tasks in arrays.values() for task in tasks} == {"COMPLETED"}
    _, all_runs = runs(tmp_path)
    jobs = children(all_runs)
    assert [r.data.tags["hydra.job.num"] for r in jobs] == [str(n) for n in range(6)]
    assert all(r.info.status == "FINISHED" and r.data.tags["seed"] == r.data.tags["hydra.job.num"] for r in jobs)
    assert "sacct" not in result.stderr  # job states from squeue: this cluster keeps no accounting


@pytest.mark.slow
def test_a_sweep_by_cell_runs_each_cell_in_one_task(cluster, tmp_path, store_in):
    """jobs/cell.py: with one task at a time (array_parallelism=1) the 8 numpy seeds of one configuration
    run one after another in one task, the jax cell's 8 replicates in another as one program."""
    pytest.importorskip("jax")
    store_in(tmp_path)
    result = cli("run", "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.array_parallelism=1",
                 "backend=numpy,jax", "seed=range(8)", *TINY, cwd=tmp_path, env=cluster.env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr + cluster.logs()
    assert "By cell: 16 jobs in 2 launcher jobs" in result.stdout and "16 jobs, 16 FINISHED, 0 not" in result.stdout
    jobs = children(runs(tmp_path)[1])
    assert [r.data.tags["hydra.job.num"] for r in jobs] == [str(n) for n in range(16)]
    tasks = Counter((r.data.tags["mcsa_bench.backend"], r.data.tags["mcsa_bench.pid"]) for r in jobs)
    assert sorted(tasks.values()) == [8, 8]  # a task's seeds share its process
    assert {r.data.tags["mcsa_bench.cell"].split(" ", 1)[1] for r in jobs
            if r.data.tags["mcsa_bench.backend"] == "jax"} == {"R=8 chunk=8"}


@pytest.mark.slow
def test_a_job_cancelled_with_scancel_is_recorded_killed_and_resumes_from_its_checkpoint(cluster, tmp_path,
                                                                                          store_in, monkeypatch):
    # about 3 s of iterations per job: the cancel comes at the first checkpoint of job #1 (iteration 1000)
    setting = ["model.dim=3", "n_iters=20000", "eval_every=500", "checkpoint_every=1000", "estimator=jsa"]
    sweep = ["run", "-m", "hydra/launcher=submitit_slurm", "seed=0,1", *setting]
    store_in(tmp_path)
    driver = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", *sweep], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(cluster))
    try:
        wait_for(lambda: "mcsa_bench.config_hash" in _tags(_job_directory(tmp_path, 1, "run.json")), timeout=120,
                 what="job #1's run")
        digest = _tags(_job_directory(tmp_path, 1, "run.json"))["mcsa_bench.config_hash"]
        checkpoint = tmp_path / "outputs" / "checkpoints" / f"{digest}.npz"
        wait_for(checkpoint.exists, timeout=60, what="job #1's checkpoint")
        task, = [task for task in cluster.queued() if task.endswith("_1")]
        cluster.command("scancel", task)
        output, _ = driver.communicate(timeout=240)
    finally:
        driver.kill()
    assert driver.returncode == 1, output
    assert "Complete it with the same command and resume=true" in output
    _, first = runs(tmp_path)
    assert [r.info.status for r in children(first)] == ["FINISHED", "KILLED"], output
    assert "RUNNING" not in {r.info.status for r in first}  # the sweep's parent ended too
    assert checkpoint.exists() and cluster.queued() == []

    again = cli(*sweep, "resume=true", cwd=tmp_path, env=cluster.env, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resume: skipping 1 of 2 jobs that already have a FINISHED run: #0" in again.stdout
    client, second = runs(tmp_path)
    statuses = Counter((r.data.tags["hydra.job.num"], r.info.status) for r in children(second))
    assert statuses == {("0", "FINISHED"): 1, ("1", "KILLED"): 1, ("1", "FINISHED"): 1}
    resumed = children(second)[-1]
    assert int(resumed.data.tags["mcsa_bench.resumed_from_iteration"]) >= 1000
    assert not checkpoint.exists()  # a finished run leaves none

    # the continued run equals one never interrupted, bit for bit
    reference_dir = store_in(tmp_path / "reference")
    reference = cli_in_process("run", "seed=1", *setting, cwd=reference_dir, monkeypatch=monkeypatch)
    assert reference.returncode == 0, reference.stderr
    reference_client, (reference_run,) = runs(reference_dir)
    history = _history(client, resumed.info.run_id)
    assert history == _history(reference_client, reference_run.info.run_id) and len(history) == 41
    np.testing.assert_array_equal(_final_params(tmp_path / "outputs" / "multirun"),
                                  _final_params(reference_dir / "outputs" / "runs"))


@pytest.mark.slow
def test_ctrl_c_on_the_launching_process_cancels_every_array_it_submitted(cluster, tmp_path, store_in):
    store_in(tmp_path)
    driver = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", "run", "-m", "hydra/launcher=submitit_slurm",
                               "hydra.launcher.array_parallelism=3", "seed=range(5)", "model.dim=3",
                               "n_iters=10000000", "eval_every=1000"], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(cluster))
    try:
        wait_for(lambda: any(_evaluated(_job_directory(tmp_path, n, "metrics.jsonl")) for n in range(5)),
                 timeout=120, what="a job's first evaluation")
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=180)
    finally:
        driver.kill()
    assert driver.returncode == 130, output
    assert "mcsa-bench: interrupted (SIGINT)" in output
    arrays = arrays_of(cluster, submitted_arrays(output))
    assert len(arrays) == 3 and cluster.queued() == []  # every array cancelled, none left queued
    assert {task["JobState"] for tasks in arrays.values() for task in tasks} == {"CANCELLED"}
    _, all_runs = runs(tmp_path)
    statuses = Counter(r.info.status for r in all_runs)
    assert statuses["KILLED"] >= 2 and set(statuses) == {"KILLED"}  # the parent and the jobs that started


def _env(cluster: SlurmCluster) -> dict[str, str]:
    import os

    return {**os.environ, **cluster.env}


def _job_directory(workdir: Path, number: int, name: str = "") -> Path:
    """Job ``number``'s directory in the latest sweep under ``workdir`` (a path that does not exist before)."""
    sweeps = sorted((workdir / "outputs" / "multirun").glob("*/*"))
    return (sweeps[-1] / str(number) / name) if sweeps else workdir / "no sweep yet"


def _evaluated(metrics: Path) -> bool:
    """Whether a job's local record holds an evaluation (the file exists, empty, from the job's start)."""
    return metrics.exists() and metrics.stat().st_size > 0


def _tags(record: Path) -> dict[str, str]:
    """The tags in a job's local record so far (none before it exists)."""
    return json.loads(record.read_text())["tags"] if record.exists() else {}


def _history(client, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "kl_inclusive"))


def _final_params(directory: Path) -> np.ndarray:
    newest = max(directory.rglob("variational.npz"), key=lambda path: path.stat().st_mtime)
    return np.load(newest)["params"]
