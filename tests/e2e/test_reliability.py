"""Reliability, by fault injection: bad inputs are refused cleanly by a real process, every abnormal
ending leaves no run RUNNING, resume completes exactly the missing cells, and the tracking store
fails within bounded time without losing results (docs/reliability.md).

Real processes, real signals, a real `mlflow server` on 127.0.0.1, MLflow's real SQLite store. A
command that is signalled or killed runs in a process of its own; the command that cleans up after
it (resume, sync, --fix-stale) runs through the CLI's main in the test's process
(tests.support.cli_in_process). The bad inputs themselves are tried in tests/test_cli_errors.py, the
tracking modules' own handling of signals in tests/tracking/.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support import MlflowServer, cli, cli_in_process, statuses, store_rows, wait_for

LONG_RUN = ["n_iters=100000000", "eval_every=200", "model.dim=3"]
#: long enough to be killed while it runs (minutes of iterations), short enough for the JAX optimizer's schedule,
#: T stepsizes computed on the host (accel/optimizers.py): at T = 10^8 the pre-flight's twin and the job's took
#: 80 s of the test's 101 s
JAX_LONG_RUN = ["n_iters=2000000", *LONG_RUN[1:]]


# ------------------------------------------------------------------------------------ helpers


_started: list[subprocess.Popen] = []


def start(*args: str, cwd: Path, env: dict[str, str | None] | None = None) -> subprocess.Popen:
    """A command in its own process group, as a terminal would run it (Ctrl-C reaches the whole group);
    ``env`` changes this process's environment for it (None: a variable left out)."""
    environment = {**os.environ, **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={name: value for name, value in environment.items() if value is not None})
    _started.append(process)
    return process


@pytest.fixture(autouse=True)
def _no_command_outlives_its_test():
    """A test that fails before its command ends must not leave the command (a 10^8-iteration run)
    taking a core from the rest of the suite: kill what is left of each started process group."""
    yield
    while _started:
        process = _started.pop()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.communicate()


def finished_cells(workdir: Path) -> list[str]:
    """Config hashes of FINISHED job runs (a cell finished twice appears twice)."""
    return [row[0] for row in store_rows(
        workdir, "SELECT tags.value FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                 "WHERE tags.key = 'mcsa_bench.config_hash' AND runs.status = 'FINISHED'")]


# -------------------------------------------------------------------------------- bad inputs


@pytest.mark.slow
@pytest.mark.parametrize("args", [["run", "seed=-1"], ["run", "n_samples=1000000000"], ["run", "=3"],
                                  ["run", "-m", "seed=0,1", "hydra.sweep.dir=/proc/mcsa/sweep"]])
def test_bad_input_exits_2_without_traceback_from_a_real_process(args, tmp_path):
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------------- abnormal endings

@pytest.mark.slow
@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_a_single_run_killed(tmp_path, store_in, signum, code):
    store_in(tmp_path)
    process = start("run", *LONG_RUN, cwd=tmp_path)
    wait_for(lambda: statuses(tmp_path) == ["RUNNING"], what="the run to start")
    os.killpg(process.pid, signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code and f"interrupted ({signum.name})" in stderr and "Traceback" not in stderr
    assert statuses(tmp_path) == ["KILLED"]
    local = next((tmp_path / "outputs" / "runs").rglob("run.json")).read_text()
    assert '"status": "KILLED"' in local


@pytest.mark.slow
def test_sigterm_ends_a_ray_sweep_killed(tmp_path, store_in):
    """Issue 39: Ray's driver replaced mcsa-bench's SIGTERM handler (ray.init's sys.exit, its node's "kill
    Ray's processes, exit 1"): the sweep exited 134 with the sweep and its job RUNNING. SIGTERM to the
    launching process alone, as `kill -TERM $!` sends it: exit 143, the sweep and its job KILLED."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the 'ray' extra is not installed")
    store_in(tmp_path)
    process = start("run", "-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=1", *LONG_RUN,
                    "seed=0,1", cwd=tmp_path, env={"RAY_ADDRESS": None})
    wait_for(lambda: "RUNNING" in statuses(tmp_path, "job"), timeout=300, what="a running job")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "interrupted (SIGTERM)" in stderr and "Traceback" not in stderr
    assert sorted(statuses(tmp_path)) == ["KILLED", "KILLED"]  # the job and the sweep's parent


@pytest.mark.slow
def test_kill_9_leaves_a_stale_run_that_the_next_command_marks_killed(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    process = start("run", *LONG_RUN, cwd=tmp_path)
    wait_for(lambda: statuses(tmp_path) == ["RUNNING"], what="the run to start")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert statuses(tmp_path) == ["RUNNING"]  # nothing could clean up
    result = cli_in_process("runs", "--fix-stale", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0 and "1 stale run(s) marked KILLED" in result.stdout, result.stderr
    assert statuses(tmp_path) == ["KILLED"]


@pytest.mark.slow
def test_sigterm_ends_a_basic_sweep_killed_and_resume_completes_exactly_the_missing_cells(tmp_path, store_in,
                                                                                          monkeypatch):
    store_in(tmp_path)
    cells = ["model.dim=3", "eval_every=100", "seed=0,1,2"]
    process = start("run", "-m", "n_iters=400,100000000", *cells, cwd=tmp_path)
    # jobs run in order: the three short ones finish, then the first long one runs
    wait_for(lambda: statuses(tmp_path, "job").count("FINISHED") == 3 and "RUNNING" in statuses(tmp_path, "job"),
             what="three finished jobs and a running one")
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert sorted(statuses(tmp_path)) == ["FINISHED"] * 3 + ["KILLED"] * 2  # the job and the sweep's parent

    result = cli_in_process(
        "run", "-m", "n_iters=400,500", *cells, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch
    )
    assert result.returncode == 0, result.stderr
    assert "resume: skipping 3 of 6 jobs" in result.stdout and "3 skipped (already FINISHED)" in result.stdout
    hashes = finished_cells(tmp_path)
    assert len(hashes) == 6 and len(set(hashes)) == 6  # every cell once, none twice
    assert "RUNNING" not in statuses(tmp_path)


@pytest.mark.slow
def test_kill_9_mid_cell_and_resume_computes_only_the_cells_seeds_without_a_finished_run(tmp_path, store_in,
                                                                                       monkeypatch):
    """A numpy cell's seeds run one after another in one launcher job (jobs/cell.py): killed outright
    while its second seed runs, the first stays FINISHED and resume=true computes the other two."""
    store_in(tmp_path)
    cell = ["model.dim=3", "n_iters=30000", "eval_every=10000", "seed=0,1,2"]
    process = start("run", "-m", *cell, cwd=tmp_path)
    wait_for(lambda: sorted(statuses(tmp_path, "job")) == ["FINISHED", "RUNNING"],  # rows come in run-id order
             what="one finished seed and a running one")
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    first = finished_cells(tmp_path)

    result = cli_in_process("run", "-m", *cell, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert "resume: skipping 1 of 3 jobs" in result.stdout and "By cell: 2 jobs in 1 launcher jobs" in result.stdout
    hashes = finished_cells(tmp_path)
    assert len(hashes) == len(set(hashes)) == 3 and set(first) < set(hashes)
    assert sorted(statuses(tmp_path, "job")) == ["FINISHED"] * 3 + ["KILLED"]  # the killed seed's stale run
    assert "RUNNING" not in statuses(tmp_path)


@pytest.fixture
def store_uri(request, tmp_path, store_in):
    """The store a test's commands track to, by the test's ``backend`` parameter: an SQLite file, an
    `mlflow server` on one, or a private PostgreSQL (skipped where PostgreSQL is not installed)."""
    backend = request.node.callspec.params["backend"]
    if backend == "postgresql":
        yield request.getfixturevalue("postgres").create_database()
    elif backend == "server":
        server = MlflowServer(store_in(tmp_path, "server.db")).start()
        try:
            yield server.uri
        finally:
            server.kill()
    else:
        yield f"sqlite:///{store_in(tmp_path) / 'outputs' / 'mlflow.db'}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "server", "postgresql"])
def test_two_identical_resuming_sweeps_started_at_once_run_each_cell_once(backend, store_uri, tmp_path):
    """Issue 39: two identical sweeps with resume=true started at once ran 3 of 4 cells twice, and one
    exited 1. Each job claims its cell in the store first (tracking.claims): every cell has one FINISHED
    run, the two sweeps share the cells between them, both exit 0 and nothing stays RUNNING."""
    from mlflow.tracking import MlflowClient

    cells = ["model.dim=3", "n_iters=3000", "eval_every=500", "seed=0,1,2,3", "resume=true",
             f"tracking.uri={store_uri}"]
    sweeps = [start("run", "-m", *cells, cwd=tmp_path) for _ in range(2)]
    outputs = [sweep.communicate(timeout=600) for sweep in sweeps]
    assert [sweep.returncode for sweep in sweeps] == [0, 0], outputs
    assert all("Traceback" not in stderr for _, stderr in outputs)
    client = MlflowClient(store_uri)
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id],
                              filter_string="tags.`mcsa_bench.role` = 'job'")
    finished = [run.data.tags["mcsa_bench.config_hash"] for run in runs if run.info.status == "FINISHED"]
    assert len(finished) == len(set(finished)) == 4, sorted(finished)
    assert all(run.info.status == "FINISHED" for run in runs)
    ran = [int(re.search(r"Sweep finished: 4 jobs, (\d+) FINISHED", stdout).group(1)) for stdout, _ in outputs]
    assert sum(ran) == 4, outputs  # each cell run by one of the two


@pytest.mark.slow
def test_two_identical_resuming_jax_sweeps_started_at_once_compute_each_replicate_once(tmp_path, store_in):
    """A jax cell's replicates claim their configurations as numpy jobs do (jobs/cell.py): of two identical
    resuming sweeps started at once, each replicate is computed by one launcher job."""
    pytest.importorskip("jax")
    store_in(tmp_path)
    cell = ["backend=jax", "model.dim=3", "n_iters=60", "eval_every=20", "seed=0,1,2,3", "resume=true"]
    sweeps = [start("run", "-m", *cell, cwd=tmp_path) for _ in range(2)]
    outputs = [sweep.communicate(timeout=600) for sweep in sweeps]
    assert [sweep.returncode for sweep in sweeps] == [0, 0], outputs
    hashes = finished_cells(tmp_path)
    assert len(hashes) == len(set(hashes)) == 4, sorted(hashes)
    ran = [int(re.search(r"Sweep finished: 4 jobs, (\d+) FINISHED", stdout).group(1)) for stdout, _ in outputs]
    assert sum(ran) == 4, outputs
    assert "RUNNING" not in statuses(tmp_path)


def joblib_sweep_of_two_running_jobs(tmp_path, store_in):
    """A two-job joblib sweep started in tmp_path's store, once both jobs are RUNNING: (process, job pids)."""
    store_in(tmp_path)
    process = start("run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *LONG_RUN, "seed=0,1",
                    cwd=tmp_path)
    wait_for(lambda: statuses(tmp_path, "job").count("RUNNING") == 2, what="two running jobs")
    return process, job_pids(tmp_path)


@pytest.mark.slow
def test_ctrl_c_on_a_joblib_sweep_kills_parent_children_and_workers(tmp_path, store_in):
    process, workers = joblib_sweep_of_two_running_jobs(tmp_path, store_in)
    assert len(workers) == 2
    os.killpg(process.pid, signal.SIGINT)
    process.communicate(timeout=90)
    assert process.returncode == 130
    wait_for(lambda: "RUNNING" not in statuses(tmp_path), timeout=30, what="no RUNNING run")
    assert sorted(statuses(tmp_path)) == ["KILLED"] * 3
    wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=30, what="the workers to end")


@pytest.mark.slow
def test_killing_the_joblib_launcher_ends_its_workers_and_resume_recovers(tmp_path, store_in, monkeypatch):
    process, workers = joblib_sweep_of_two_running_jobs(tmp_path, store_in)
    assert len(workers) == 2
    os.kill(process.pid, signal.SIGKILL)  # the launcher alone, as the OS would
    process.wait(timeout=30)
    wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=60, what="orphaned workers to end")
    wait_for(lambda: statuses(tmp_path, "job") == ["KILLED", "KILLED"], timeout=30, what="jobs marked KILLED")
    assert statuses(tmp_path, "sweep") == ["RUNNING"]  # its process died without a word

    result = cli_in_process("run", "-m", "n_iters=300", "model.dim=3", "seed=0,1", "resume=true", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert "marked 1 stale run(s) KILLED" in result.stderr
    assert "RUNNING" not in statuses(tmp_path) and len(finished_cells(tmp_path)) == 2


@pytest.mark.slow
def test_a_worker_killed_by_the_os_ends_the_sweep_with_a_summary(tmp_path, store_in):
    process, workers = joblib_sweep_of_two_running_jobs(tmp_path, store_in)
    worker = workers[0]
    assert worker != process.pid
    os.kill(worker, signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert "Sweep finished: 2 jobs" in stdout and "the sweep stopped early" in stderr and "resume=true" in stderr
    assert "Traceback" not in stderr
    assert "RUNNING" not in statuses(tmp_path)


def job_pids(workdir: Path) -> list[int]:
    """The processes running the RUNNING jobs, from their runs' pid tags (not the sweep's: that
    is the launcher's pid, and killing it instead of a worker once made a test hang)."""
    return [int(row[0]) for row in store_rows(
        workdir, "SELECT pid.value FROM runs JOIN tags AS pid ON pid.run_uuid = runs.run_uuid "
                 "JOIN tags AS role ON role.run_uuid = runs.run_uuid WHERE pid.key = 'mcsa_bench.pid' "
                 "AND role.key = 'mcsa_bench.role' AND role.value = 'job' AND runs.status = 'RUNNING'")]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


# ------------------------------------------------------------------------------- the store


@pytest.mark.slow
def test_four_commands_create_one_new_store_at_once(tmp_path):
    processes = [start("run", "model.dim=2", "n_iters=20", "eval_every=10", f"seed={k}", cwd=tmp_path)
                 for k in range(4)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in processes]
    assert [code for code, _ in results] == [0] * 4, results
    assert sorted(statuses(tmp_path)) == ["FINISHED"] * 4


@pytest.mark.slow
def test_a_run_created_while_another_writer_holds_the_store_says_one_line_and_finishes(tmp_path, store_in):
    """Issue 39: under contention run creation failed at once ("cannot create a run"), and MLflow printed
    a traceback per failed database session. Another connection holds SQLite's write lock until 25 s
    after the job starts, past the 20 s MLflow waits for it: the run's creation fails once, is retried,
    and the run finishes; stderr has one line about the retry and no traceback."""
    from mcsa_bench.tracking.store import prepare_store

    database = store_in(tmp_path) / "outputs" / "mlflow.db"
    prepare_store(f"sqlite:///{database}", "mcsa-bench")  # the experiment exists: a run is the first write
    with sqlite3.connect(database, isolation_level=None) as writer:
        writer.execute("BEGIN IMMEDIATE")  # the write lock; reads go on
        process = start("run", "model.dim=2", "n_iters=200", "eval_every=50", cwd=tmp_path)
        wait_for(lambda: any((tmp_path / "outputs" / "runs").rglob("run.json")), what="the job to start")
        time.sleep(25)  # from about when the job asks to create its run
        writer.execute("COMMIT")
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    said = [line for line in stderr.splitlines() if line.startswith("mcsa-bench:")]
    assert len(said) == 1 and "did not take a write" in said[0] and "database is locked" in said[0], stderr
    assert "Traceback" not in stderr and "SQLAlchemy database error" not in stderr
    assert statuses(tmp_path) == ["FINISHED"]


@pytest.mark.slow
def test_an_apostrophe_in_the_sweep_directory_is_fine(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    result = cli_in_process(
        "run",
        "-m",
        'hydra.sweep.dir="outputs/it\'s here"',
        "model.dim=2",
        "n_iters=20",
        "seed=0,1",
        cwd=tmp_path,
        monkeypatch=monkeypatch,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(statuses(tmp_path)) == ["FINISHED"] * 3
    assert (tmp_path / "outputs" / "it's here" / "1" / "run.json").exists()


@pytest.mark.slow
def test_a_tracking_server_killed_mid_run_fails_cleanly_and_sync_uploads_the_run(tmp_path, store_in, monkeypatch):
    server = MlflowServer(store_in(tmp_path, "server.db")).start()  # its database ready-made
    # about 3 s of iterations; the server dies within a second of the first evaluation and stays away
    # longer than the 2 s outage the run is told to ride out
    process = start("run", "n_iters=20000", "eval_every=200", "model.dim=3", f"tracking.uri={server.uri}",
                    "tracking.outage_seconds=2", cwd=tmp_path)
    wait_for(lambda: any(p.stat().st_size for p in (tmp_path / "outputs" / "runs").rglob("metrics.jsonl")),
             what="the first metrics on disk")
    stream = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl"))
    server.kill()
    killed_at = time.time()
    stdout, stderr = process.communicate(timeout=600)
    directory = stream.parent
    assert process.returncode == 1 and "lost the tracking store" in stderr and "mcsa-bench sync" in stderr
    assert "Traceback" not in stderr
    assert time.time() - killed_at < 300  # bounded: the run finishes locally, it does not hang on the server
    rows = stream.read_text().strip().splitlines()
    assert len(rows) == 102  # every evaluation, 0 to T, written as it came, then the run-level metrics
    assert (directory / "variational.npz").exists() and '"status": "FINISHED"' in (directory / "run.json").read_text()

    server.start()  # the same store and port: the server is back
    try:
        result = cli_in_process("sync", str(directory), cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0 and "status FINISHED" in result.stdout, result.stderr
        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.uri)
        run, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
        assert run.info.status == "FINISHED"
        assert len(client.get_metric_history(run.info.run_id, "kl_inclusive")) == 101
        assert "variational.npz" in {a.path for a in client.list_artifacts(run.info.run_id)}
    finally:
        server.kill()


def _disk_full_beyond(size: int):
    """For a child process: every file it writes is full at ``size`` bytes (EFBIG, as ENOSPC on a full disk)."""
    def limit() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


@pytest.mark.slow
def test_a_full_disk_under_the_local_record_leaves_the_run_finished_in_the_store(tmp_path, store_in):
    """Issue 22: with the job directory on a full disk (a 48 kB tmpfs) a run printed a 69-line traceback
    and stayed RUNNING with no points: the local record was written before the store recorded the end.
    Here every file the job writes is full at 20 kB (the store is a server: its files are not the job's),
    so the metric stream fails part-way: the job says so in one line and ends FINISHED in the store."""
    server = MlflowServer(store_in(tmp_path, "server.db")).start()
    try:
        result = subprocess.run([sys.executable, "-m", "mcsa_bench.cli", "run", "n_iters=2000", "eval_every=2",
                                 "model.dim=2", f"tracking.uri={server.uri}"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=600, preexec_fn=_disk_full_beyond(20_000))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        warning, = [line for line in result.stderr.splitlines() if "cannot write the run's local record" in line]
        assert "File too large" in warning
        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.uri)
        run, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
        assert run.info.status == "FINISHED"
        assert len(client.get_metric_history(run.info.run_id, "kl_inclusive")) == 1001
    finally:
        server.kill()


@pytest.mark.slow
def test_a_run_rides_out_a_frozen_and_a_restarting_tracking_server(tmp_path, store_in):
    """Issue 22: a server frozen by SIGSTOP stalled the optimization (about 32 s), and one restarted
    within 20 s made the job exit 1 with its run RUNNING. Now the iterations go on while the server
    is frozen, and an outage shorter than tracking.outage_seconds loses nothing: the run ends
    FINISHED in the store with every evaluation, exit 0."""
    server = MlflowServer(store_in(tmp_path, "server.db")).start()
    # about 30 s of iterations
    process = start("run", "n_iters=200000", "eval_every=500", "model.dim=3", f"tracking.uri={server.uri}",
                    "tracking.outage_seconds=300", cwd=tmp_path)
    try:
        wait_for(lambda: any(p.stat().st_size for p in (tmp_path / "outputs" / "runs").rglob("metrics.jsonl")),
                 what="the first metrics on disk")
        stream = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl"))
        server.freeze()
        time.sleep(2.5)  # past a flush interval: the old tracker now waited in a request for about 32 s
        rows_frozen = len(stream.read_text().splitlines())
        time.sleep(3)
        rows_thawed = len(stream.read_text().splitlines())
        server.freeze(False)
        server.kill()
        time.sleep(3)
        server.start()  # the same store and port
        stdout, stderr = process.communicate(timeout=600)
    finally:
        server.kill()
        if process.poll() is None:
            process.kill()
    assert rows_thawed > rows_frozen or rows_frozen >= 401, "the optimization stalled while the server was frozen"
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "lost the tracking store" not in stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.backend_store_uri)  # the server's store, read directly (no fourth start)
    run, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    assert run.info.status == "FINISHED"
    assert len(client.get_metric_history(run.info.run_id, "kl_inclusive")) == 401  # iterations 0 to T


@pytest.mark.slow
def test_sigterm_while_the_tracking_server_is_frozen_ends_within_seconds_and_sync_records_the_run(
        tmp_path, store_in, monkeypatch):
    """Issue 39: with the server frozen (SIGSTOP), SIGTERM to a sweep ended it after 46 s with a 176-line
    traceback from the interrupt's clean-up and its runs RUNNING. Now the clean-up waits for the store a
    bounded time (a run's drain, then the sweep's end, DRAIN_AFTER_SIGNAL_SECONDS each): exit 143 within
    seconds, no traceback, the job's local record KILLED; `sync` records it once the server is back."""
    from mcsa_bench.tracking.writer import DRAIN_AFTER_SIGNAL_SECONDS

    server = MlflowServer(store_in(tmp_path, "server.db")).start()
    process = start("run", "-m", *LONG_RUN, "seed=0,1", f"tracking.uri={server.uri}", cwd=tmp_path)
    try:
        wait_for(lambda: any(p.stat().st_size for p in (tmp_path / "outputs").rglob("metrics.jsonl")),
                 what="the first metrics on disk")
        server.freeze()
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
        took = time.monotonic() - signalled
        server.freeze(False)
        assert process.returncode == 143 and "Traceback" not in stderr, stderr
        assert took < 2 * DRAIN_AFTER_SIGNAL_SECONDS + 5, took
        directory = next((tmp_path / "outputs").rglob("metrics.jsonl")).parent
        assert '"status": "KILLED"' in (directory / "run.json").read_text()
        result = cli_in_process("sync", str(directory), cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0 and "status KILLED" in result.stdout, result.stderr
        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.uri)
        job, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id],
                                  filter_string="tags.`mcsa_bench.role` = 'job'")
        assert job.info.status == "KILLED"
    finally:
        server.freeze(False)
        server.kill()


# ------------------------------------------------------------------- non-finite values, resume


NAN_MODEL = """
    import numpy as np
    from mcsa_bench import hookimpl
    from mcsa_bench.api import Model

    class NaNAfter(Model):
        '''N(0, I) in 2-D whose log density turns NaN after `calls` batched evaluations.'''
        value = np.nan
        def __init__(self, calls: int = 30):
            self.dim, self.calls, self.seen = 2, calls, 0
        def log_joint(self, z):
            self.seen += 1
            log_p = -0.5 * np.einsum("bi,bi->b", z, z)
            return np.full(len(z), self.value) if self.seen > self.calls else log_p

    class InfAfter(NaNAfter):
        '''The same, turning +inf.'''
        value = np.inf

    @hookimpl
    def register_models(register):
        register("nan_after", NaNAfter)
        register("inf_after", InfAfter)
"""


@pytest.mark.slow
def test_a_model_turning_non_finite_fails_every_scheme_with_the_iteration_and_keeps_the_run(tmp_path, store_in):
    """NaN and +inf, each under every scheme: one sweep of 8 jobs (one command's start-up)."""
    from tests.test_plugins import make_distribution

    store_in(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    make_distribution(site, "mcsa-bench-breaks", "0.1", "breaks_model", NAN_MODEL)
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = cli("run", "-m", "model=nan_after,inf_after", "estimator=msc,msc_rb,jsa,pmcsa", "n_iters=200",
                 "eval_every=10", "n_samples=4", cwd=tmp_path, env=env)
    assert result.returncode == 1 and "8 jobs, 0 FINISHED, 8 not" in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id],
                              filter_string="tags.`mcsa_bench.role` = 'job'")
    assert sorted((r.data.params["model.name"], r.data.params["estimator.name"]) for r in runs) == sorted(
        (m, e) for m in ("nan_after", "inf_after") for e in ("msc", "msc_rb", "jsa", "pmcsa"))
    for run in runs:
        quantity = {"nan_after": "NaN", "inf_after": "+inf"}[run.data.params["model.name"]]
        assert run.info.status == "FAILED"
        assert (
            f"log density returned {quantity}" in run.data.tags["error"] and "at iteration " in run.data.tags["error"]
        )
        failed_at = int(run.data.tags["error"].split("at iteration ")[1].split()[0])
        history = client.get_metric_history(run.info.run_id, "wall_time")
        assert history and max(m.step for m in history) < failed_at  # the evaluations made before it
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"variational.npz", "metrics.csv", "run.json"} <= artifacts  # the last finite λ is kept
        local = np.load(client.download_artifacts(run.info.run_id, "variational.npz", str(tmp_path / run.info.run_id)))
        assert np.all(np.isfinite(local["params"]))


@pytest.mark.slow
def test_a_killed_run_with_checkpoints_resumes_to_the_uninterrupted_result_bit_for_bit(tmp_path, store_in,
                                                                                        monkeypatch):
    # about 1.5 s of iterations: the kill comes 0.3 s after the first checkpoint, near iteration 3000
    setting = ["model.dim=3", "n_iters=10000", "eval_every=250", "checkpoint_every=1000", "estimator=jsa"]
    reference_dir, resumed_dir = store_in(tmp_path / "reference"), store_in(tmp_path / "resumed")
    reference = cli_in_process("run", *setting, cwd=reference_dir, monkeypatch=monkeypatch)
    assert reference.returncode == 0, reference.stderr

    process = start("run", *setting, cwd=resumed_dir)
    checkpoints = resumed_dir / "outputs" / "checkpoints"
    wait_for(lambda: checkpoints.exists() and any(checkpoints.iterdir()), what="a checkpoint")
    time.sleep(0.3)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    again = cli_in_process("run", *setting, "resume=true", cwd=resumed_dir, monkeypatch=monkeypatch)
    assert again.returncode == 0, again.stderr
    assert "marked 1 stale run(s) KILLED" in again.stderr

    def final_params(workdir):
        path = max((workdir / "outputs" / "runs").rglob("variational.npz"), key=lambda p: p.stat().st_mtime)
        return np.load(path)["params"]

    np.testing.assert_array_equal(final_params(resumed_dir), final_params(reference_dir))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{resumed_dir / 'outputs' / 'mlflow.db'}")
    finished, = client.search_runs(["1"], filter_string="attributes.status = 'FINISHED'")
    assert int(finished.data.tags["mcsa_bench.resumed_from_iteration"]) >= 1000
    assert len(client.get_metric_history(finished.info.run_id, "kl_inclusive")) == 41  # the earlier ones too
    assert not any(checkpoints.iterdir())  # a finished run leaves no checkpoint behind




@pytest.mark.slow
def test_a_signal_ends_every_replicate_of_a_jax_cell_killed(tmp_path, store_in):
    """backend=jax: the cell's three replicates run in one launcher job (here the basic launcher's, in the
    launching process), each its own RUNNING run."""
    pytest.importorskip("jax")
    store_in(tmp_path)
    process = start("run", "-m", "backend=jax", "seed=0,1,2", *JAX_LONG_RUN, cwd=tmp_path)
    wait_for(lambda: statuses(tmp_path, "job") == ["RUNNING"] * 3, what="the cell's three runs to start")
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143 and "Traceback" not in stderr, stderr
    assert statuses(tmp_path) == ["KILLED"] * 4  # the replicates and the sweep's parent
    for local in (tmp_path / "outputs" / "multirun").rglob("run.json"):
        assert '"status": "KILLED"' in local.read_text()


@pytest.mark.slow
def test_backend_jax_without_jax_installed_is_one_line(tmp_path):
    missing = tmp_path / "no_jax"
    (missing / "jax").mkdir(parents=True)
    (missing / "jax" / "__init__.py").write_text("raise ImportError('No module named jax')\n")
    result = cli("run", "backend=jax", cwd=tmp_path, env={"PYTHONPATH": str(missing)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "mcsa-bench: error: backend=jax needs JAX: pip install 'mcsa-bench[jax]'"
    assert not (tmp_path / "outputs").exists()


def test_a_hydra_plugin_that_fails_to_load_is_one_line_naming_it(tmp_path):
    """Hydra imports every installed plugin, and lets any error but an ImportError out as a traceback from every
    command (hydra-nevergrad-sweeper 1.2.0 on Python 3.11: a dataclass with a mutable default)."""
    plugin = tmp_path / "site" / "hydra_plugins" / "broken_sweeper"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("raise ValueError('mutable default for field optim is not allowed')\n")
    result = cli("run", "--cfg", "job", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert ("the Hydra plugin hydra_plugins.broken_sweeper fails to load (ValueError: mutable default for field optim "
            "is not allowed)") in result.stderr
