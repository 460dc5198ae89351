"""What a run shows: the progress bar, the sweep summary, the closing hint (run names: tests/jobs/test_tracked.py)."""

from pathlib import Path
from unittest import mock

import pytest

from mcsa_bench.jobs.job import ProgressBar
from mcsa_bench.jobs.summary import sweep_table, where_to_look

METRICS = {"kl_exclusive": 0.123456, "kl_inclusive": 0.0123456, "test_lpd": -0.5123, "log_z_khat": 1.234,
           "acceptance_rate": 0.55, "wall_time": 1.0, "grad_norm": 3.0}


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_the_progress_bar_fits_the_terminal_and_never_cuts_a_value(columns):
    with mock.patch("shutil.get_terminal_size", return_value=(columns, 24)):
        bar = ProgressBar(10_000)
    try:
        postfix = bar.postfix(METRICS)
        bar._bar.n = 5000
        bar._bar.start_t -= 5.0  # a realistic rate and ETA
        bar._bar.set_postfix_str(postfix, refresh=False)
        line = str(bar._bar)
    finally:
        bar._bar.disable = True
    assert len(line) <= columns
    shown = postfix.split(", ") if postfix else []
    if columns >= 80:
        assert shown[0] == "kl_exclusive=0.123"  # the model's own metrics come first
    for item in shown:
        name, value = item.split("=")
        assert value == f"{METRICS[name]:.3g}" and item in line
    assert "grad_norm" not in postfix and "wall_time" not in postfix
    if columns >= 200:
        assert len(shown) == 5


def test_the_sweep_table_shows_each_runs_own_metrics_in_aligned_columns():
    rows = [("0", "FINISHED", "model=gaussian", {"kl_inclusive": 0.1, "kl_exclusive": 0.2, "wall_time": 1.0}),
            ("1", "FINISHED", "model=logistic model.dataset=heart", {"test_lpd": -0.4, "test_accuracy": 0.8,
                                                                     "wall_time": 2.0}),
            ("10", "FAILED", "x" * 200, {})]
    lines = sweep_table(rows)
    assert "kl_exclusive=0.2  kl_inclusive=0.1  wall_time=1" in lines[0]
    assert "test_accuracy=0.8  test_lpd=-0.4  wall_time=2" in lines[1]  # not lost to another row's metrics
    assert len({line.index("FINISHED") for line in lines[:2]}) == 1
    assert lines[0].index("kl_") == lines[1].index("test_")  # metrics start in one column
    assert len(lines[2]) < 100 and "..." in lines[2]  # a long override list is shortened, not wrapped


def test_the_closing_hint_names_the_store_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hint = where_to_look("sqlite:///outputs/mlflow.db")
    assert f"sqlite:///{tmp_path}/outputs/mlflow.db" in hint
    assert f"mcsa-bench ui tracking.uri=sqlite:///{Path(tmp_path).resolve()}/outputs/mlflow.db" in hint
    assert "tracking server http://h:5000" in where_to_look("http://h:5000")
    database = where_to_look("postgresql://mlflow:s3cret@db-host/mlflow")
    assert "database postgresql://mlflow:***@db-host/mlflow" in database and "s3cret" not in database


def test_a_relative_store_uri_names_the_store_under_the_current_directory(tmp_path, monkeypatch, store_in):
    """Commands called one after another in one process (a notebook, a test) from two directories
    track to each directory's own store, though the tracking client is kept per store."""
    from mcsa_bench.tracking.store import _client

    stores = []
    for name in ("a", "b"):
        monkeypatch.chdir(store_in(tmp_path / name))
        stores.append(_client("sqlite:///outputs/mlflow.db")._tracking_client.tracking_uri)
    assert stores == [f"sqlite:///{(tmp_path / name).resolve()}/outputs/mlflow.db" for name in ("a", "b")]


# ------------------------------------------------------------------- a cell another process computes

CHECKPOINTED = ["model.dim=2", "n_iters=200", "eval_every=50", "checkpoint_every=50"]


def _held_by_another_run(workdir, store_in, monkeypatch):
    """(client, the holder's run id, its checkpoint file): the CHECKPOINTED configuration run once to learn
    its config hash, its run then made a live holder of the cell (RUNNING, claim held, with this
    process's identity), and a checkpoint file of the holder's planted where the cell's goes."""
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.claims import CLAIM_HELD
    from mcsa_bench.tracking.record import CLAIM_TAG, CONFIG_HASH_TAG
    from tests.support import cli_in_process

    store_in(workdir)
    assert cli_in_process("run", *CHECKPOINTED, cwd=workdir, monkeypatch=monkeypatch).returncode == 0
    client = MlflowClient(f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}")
    holder, = client.search_runs(["1"])
    client.update_run(holder.info.run_id, status="RUNNING")
    client.set_tag(holder.info.run_id, CLAIM_TAG, CLAIM_HELD)
    checkpoint = workdir / "outputs" / "checkpoints" / f"{holder.data.tags[CONFIG_HASH_TAG]}.npz"
    checkpoint.write_bytes(b"the holder's checkpoint")
    return client, holder.info.run_id, checkpoint


def test_a_resuming_run_whose_cell_another_process_computes_is_skipped_leaving_its_checkpoint(
        tmp_path, store_in, monkeypatch):
    """Issue 39: two identical runs with resume=true ran the same cell, both from one checkpoint file."""
    from tests.support import cli_in_process

    client, holder, checkpoint = _held_by_another_run(tmp_path, store_in, monkeypatch)
    result = cli_in_process("run", *CHECKPOINTED, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert f"skipped: run {holder} (host " in result.stdout
    assert checkpoint.read_bytes() == b"the holder's checkpoint"
    assert [run.info.run_id for run in client.search_runs(["1"])] == [holder]  # the skipped run is deleted


def test_a_run_with_checkpoints_whose_cell_another_process_computes_writes_none(tmp_path, store_in, monkeypatch):
    """Issue 39: two identical runs with checkpoint_every shared one checkpoint file (the second deleted
    the first's at its start). The second runs without writing checkpoints and says so."""
    from tests.support import cli_in_process

    client, holder, checkpoint = _held_by_another_run(tmp_path, store_in, monkeypatch)
    result = cli_in_process("run", *CHECKPOINTED, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert f"run {holder} (host " in result.stderr and "this run writes none" in result.stderr
    assert checkpoint.read_bytes() == b"the holder's checkpoint"
    assert sorted(run.info.status for run in client.search_runs(["1"])) == ["FINISHED", "RUNNING"]


def test_a_pickle_planted_as_a_jobs_checkpoint_never_runs_and_the_run_fails_saying_so(tmp_path, store_in, monkeypatch):
    """issue 39 item 3: a file at outputs/checkpoints/<config hash>.pkl ran its code at resume=true."""
    import pickle

    from mcsa_bench import get_registry
    from mcsa_bench.jobs.config import register_configs
    from tests.engine.test_settings import settings_of
    from tests.support import cli_in_process, statuses
    from tests.tools.test_convert_checkpoint import Payload

    store_in(tmp_path)
    register_configs(get_registry())
    witness = tmp_path / "executed"
    digest = settings_of("n_iters=20", "eval_every=10").config_hash(get_registry())
    planted = tmp_path / "outputs" / "checkpoints" / f"{digest}.pkl"
    planted.parent.mkdir()
    planted.write_bytes(pickle.dumps(Payload(witness)))
    command = ["run", "n_iters=20", "eval_every=10", "checkpoint_every=10"]
    with pytest.raises(SystemExit, match="run failed: .*earlier pickle format, which can run code when read, so it is "
                                         "not read; delete it.*convert_checkpoint"):  # exit status 1
        cli_in_process(*command, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch)
    assert statuses(tmp_path) == ["FAILED"]
    assert not witness.exists() and planted.exists()
    result = cli_in_process(*command, cwd=tmp_path, monkeypatch=monkeypatch)  # without resume: afresh
    assert result.returncode == 0 and not planted.exists() and not witness.exists()


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_a_component_that_calls_sys_exit_fails_its_job_recorded_and_the_command_goes_on(multirun, tmp_path, store_in,
                                                                                        monkeypatch):
    """issue 39 item 8: sys.exit(7) in a component's method ended the process with status 7, silently,
    its run left RUNNING. Here the optimizer's step exits at its fifth call: in the first job."""
    import sqlite3

    from mcsa_bench.builtin.optimizers import Adam
    from tests.support import cli_in_process, statuses

    step = Adam.step
    calls = []

    def exiting_step(self, params, grad, state):
        calls.append(None)
        if len(calls) == 5:
            raise SystemExit(7)
        return step(self, params, grad, state)

    store_in(tmp_path)
    monkeypatch.setattr(Adam, "step", exiting_step)
    command = ["run", "-m", "seed=1,2"] if multirun else ["run"]
    if multirun:
        result = cli_in_process(*command, "n_iters=20", "eval_every=10", cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 1 and "2 jobs, 1 FINISHED, 1 not" in result.stdout
        assert sorted(statuses(tmp_path, role="job")) == ["FAILED", "FINISHED"]
    else:
        with pytest.raises(SystemExit, match="^mcsa-bench: run failed: a component raised SystemExit: 7$"):
            cli_in_process(*command, "n_iters=20", "eval_every=10", cwd=tmp_path, monkeypatch=monkeypatch)
        assert statuses(tmp_path) == ["FAILED"]
    with sqlite3.connect(tmp_path / "outputs" / "mlflow.db") as store:
        assert store.execute("SELECT value FROM tags WHERE key = 'error'").fetchall() == [("SystemExit: 7",)]


def test_a_component_that_calls_sys_exit_in_pre_flight_is_one_line_before_any_run(tmp_path, store_in, monkeypatch):
    """issue 39 item 8: pre-flight's memory check evaluates the model on a few points; sys.exit(7) there
    ended the command with the component's own status."""
    from mcsa_bench.builtin.models.gaussian import GaussianTarget
    from tests.support import cli_in_process, statuses

    def exiting(self, z):
        raise SystemExit(7)

    store_in(tmp_path)
    monkeypatch.setattr(GaussianTarget, "log_joint", exiting)
    monkeypatch.setattr(GaussianTarget, "log_joint_and_grad", exiting)
    result = cli_in_process("run", "n_iters=20", "eval_every=10", cwd=tmp_path, monkeypatch=monkeypatch)
    message = result.stderr.strip()
    assert result.returncode == 2 and message.count("\n") == 0, result
    assert "a component raised SystemExit: 7 when pre-flight tried it" in message and "model 'gaussian'" in message
    assert not (tmp_path / "outputs" / "mlflow.db").exists() or statuses(tmp_path) == []
