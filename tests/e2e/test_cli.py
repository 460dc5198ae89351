"""End to end through the command line, in temporary directories, against MLflow's real SQLite store
(created by the `sweep` fixture's command, copied ready-made for the other commands: `store_in`).
Commands run in processes of their own, except where the subject is what a command does rather
than its process (`cli_in_process`: the CLI's main in the test's process, 5 s of CPU less each)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from mcsa_bench.jobs.summary import ENGINE_METRICS, REFERENCE_METRICS, SAMPLE_METRICS
from tests.conf.test_grids import GRIDS
from tests.support import cli, cli_in_process, completed_process_once
from tests.test_plugins import make_distribution

pytestmark = pytest.mark.slow


def client(workdir: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}")


def all_runs(workdir: Path):
    store = client(workdir)
    experiment = store.get_experiment_by_name("mcsa-bench")
    if experiment is None:
        return []
    return store.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def split_runs(runs):
    parents = [r for r in runs if r.data.tags.get("mcsa_bench.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The issue's example on a fresh machine (the sweep creates the store), run once per session
    through the CLI's main (the tests read what it made, not how its process ended)."""
    def sweep_in(workdir):
        with pytest.MonkeyPatch.context() as monkeypatch:
            return cli_in_process("run", "-m", "model=gaussian", "model.dim=4", "estimator=msc,msc_rb,jsa,pmcsa",
                                  "seed=0,1", "n_iters=50", "eval_every=10", cwd=workdir, monkeypatch=monkeypatch)

    return completed_process_once(tmp_path_factory, "cli_sweep", sweep_in)


def test_the_issue_example_sweep_shape_produces_nested_finished_runs(sweep):
    workdir, result = sweep
    assert result.returncode == 0, result.stderr
    assert "mcsa-bench ui" in result.stdout
    table = [line for line in result.stdout.splitlines() if line.lstrip().startswith("#")]
    assert len(table) == 8 and all("FINISHED" in line and "kl_inclusive=" in line for line in table)
    parents, children = split_runs(all_runs(workdir))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 8
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert sorted((c.data.params["estimator.name"], c.data.params["seed"]) for c in children) == sorted(
        (e, s) for e in ("msc", "msc_rb", "jsa", "pmcsa") for s in ("0", "1"))
    assert all(c.info.status == "FINISHED" for c in children)
    # the sweep made the store, and says where: a relative path read from another directory is another store
    assert (
        f"New MLflow store sqlite:///{workdir.resolve()}/outputs/mlflow.db (tracking.uri=sqlite:///outputs/mlflow.db"
        in result.stdout
    )


def test_a_sweeps_parent_run_carries_its_settings_as_params_and_no_job_logs_an_unset_kernel(
    tmp_path, store_in, monkeypatch
):
    store_in(tmp_path)
    result = cli_in_process(
        "run",
        "-m",
        "model=gaussian",
        "model.dim=2",
        "estimator=snis,pmcsa",
        "seed=0,1",
        "n_iters=10",
        "eval_every=5",
        cwd=tmp_path,
        monkeypatch=monkeypatch,
    )
    assert result.returncode == 0, result.stderr
    assert "New MLflow store" not in result.stdout  # the store existed
    parents, children = split_runs(all_runs(tmp_path))
    assert parents[0].data.params == {"model": "gaussian", "model.dim": "2", "estimator": "snis,pmcsa", "seed": "0,1",
                                      "n_iters": "10", "eval_every": "5", "sweep.estimator": "snis,pmcsa",
                                      "sweep.seed": "0,1", "sweep.jobs": "4"}
    kernels = {
        c.data.params["estimator.name"]: c.data.params.get("kernel.name", c.data.params.get("kernel")) for c in children
    }
    assert kernels == {"snis": None, "pmcsa": "imh"}  # snis has no kernel: no `kernel=None` param


def test_validation_error_on_a_fresh_machine_creates_no_store(tmp_path):
    result = cli("run", "estimator=bogus", cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "outputs").exists()


def test_a_failing_job_is_recorded_failed_and_the_sweep_goes_on(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    # lr = 1e300 passes validation but diverges at the first update: the draws of iteration 2 are
    # astronomically large and the log density overflows to NaN, a real failure.
    result = cli_in_process("run", "-m", "optimizer=sgd", "optimizer.lr=0.01,1e300,0.02", "model.dim=3", "n_iters=30",
                            "eval_every=10", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 1
    assert "3 jobs, 2 FINISHED, 1 not" in result.stdout
    assert "FAILED job 1" in result.stderr and "NonFiniteError" in result.stderr
    parents, children = split_runs(all_runs(tmp_path))
    assert parents[0].info.status == "FAILED"
    statuses = {c.data.params["optimizer.lr"]: c.info.status for c in children}
    assert statuses == {"0.01": "FINISHED", "1e+300": "FAILED", "0.02": "FINISHED"}
    failed = next(c for c in children if c.info.status == "FAILED")
    assert failed.data.tags["error"].startswith("NonFiniteError: log density returned NaN")


def test_joblib_launcher_with_two_workers_loses_no_metric(tmp_path, store_in):
    store_in(tmp_path)
    result = cli("run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1,2,3", "model.dim=3",
                 "n_iters=400", "eval_every=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    store = client(tmp_path)
    _, children = split_runs(all_runs(tmp_path))
    assert len(children) == 4
    for run in children:
        assert run.info.status == "FINISHED"
        assert len(store.get_metric_history(run.info.run_id, "kl_inclusive")) == 201
        assert len(store.get_metric_history(run.info.run_id, "grad_norm")) == 200


def test_submitit_launcher_runs_jobs_in_separate_processes(tmp_path, store_in):
    store_in(tmp_path)
    # submitit_local: the Slurm launcher's machinery (pickled jobs, other processes) without Slurm.
    result = cli("run", "-m", "hydra/launcher=submitit_local", "seed=0,1", "model.dim=3", "n_iters=40",
                 "eval_every=10", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    parents, children = split_runs(all_runs(tmp_path))
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" and c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
               for c in children)


def test_single_run_artifacts_and_hint(tmp_path, store_in, monkeypatch):
    store_in(tmp_path)
    result = cli_in_process("run", "model.dim=3", "n_iters=20", "eval_every=5", "estimator=jsa", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert (
        f"Browse them with: mcsa-bench ui tracking.uri=sqlite:///{tmp_path.resolve()}/outputs/mlflow.db"
        in result.stdout
    )
    assert "Finished 20 iterations: kl_exclusive=" in result.stdout
    local = next((tmp_path / "outputs" / "runs").rglob("run.json")).parent
    assert {"config.yaml", "run.json", "metrics.jsonl", "metrics.csv", "variational.npz", "target.npz"} <= {
        p.name for p in local.iterdir()}
    assert len((local / "metrics.jsonl").read_text().splitlines()) == 6  # 5 evaluations, then the run-level metrics
    assert "it/s" not in result.stderr  # no progress bar without a terminal
    runs = all_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and "mlflow.parentRunId" not in runs[0].data.tags
    assert runs[0].data.tags["hydra.job.num"] == "0"


def test_a_plugin_kernels_own_diagnostic_is_logged_and_declared(tmp_path, store_in, monkeypatch):
    """rwmh (mcsa-bench-extras) reports ``jump_distance`` in its transitions' info: the run logs it at
    every evaluation after the first, and the components the job builds declare it a diagnostic."""
    store_in(tmp_path)
    overrides = ["kernel=rwmh", "estimator=pmcsa", "model.dim=3", "n_iters=20", "eval_every=10"]
    result = cli_in_process("run", *overrides, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    (run,) = all_runs(tmp_path)
    history = client(tmp_path).get_metric_history(run.info.run_id, "jump_distance")
    assert [m.step for m in history] == [10, 20] and all(0.0 < m.value < 10.0 for m in history)
    from mcsa_bench import get_registry
    from mcsa_bench.api import MetricSpec
    from mcsa_bench.assembly import assemble

    parts = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="pmcsa", kernel="rwmh", n_samples=10)
    assert parts.metric_specs()["jump_distance"] == MetricSpec(
        "diagnostic", "higher", "mean jump distance of the chains"
    )


def test_every_model_and_data_set_runs_from_the_cli(tmp_path, store_in, monkeypatch):
    """Every single-setting experiment config (the grids' own configs run in tests/conf/test_grids.py)."""
    store_in(tmp_path)
    from mcsa_bench.jobs.config import shipped_yaml

    # the flows grid's own composition is checked in tests/conf/test_grids.py; its five targets run here
    settings = sorted(set(shipped_yaml("experiment")) - set(GRIDS) - {"flows"})
    assert set(GRIDS) < set(shipped_yaml("experiment")) and len(settings) >= 14
    result = cli_in_process("run", "-m", f"experiment={','.join(settings)}", "size=tiny", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    store = client(tmp_path)
    _, children = split_runs(all_runs(tmp_path))
    assert len(children) == len(settings)
    summary = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  #")}
    for run in children:
        row = summary[f"#{run.data.tags['hydra.job.num']}"]
        assert all(f"{name}=" in row for name in run.data.metrics  # each row its own model metrics
                   if name not in (*ENGINE_METRICS, *REFERENCE_METRICS, *SAMPLE_METRICS)), row
        assert run.info.status == "FINISHED"
        model = run.data.params["model.name"]
        expected = {"gaussian": "kl_inclusive", "funnel": "kl_inclusive", "radon": "log_z",
                    "stochastic_volatility": "log_z", "gaussian_mixture": "excess_inclusive_kl",
                    "many_well": "excess_inclusive_kl"}.get(model, "test_lpd")  # the mixtures: against exact draws
        if (
            float(run.data.params.get("model.test_fraction", 0.1)) == 0.0
        ):  # an all-rows setting: no test rows, and on the
            assert expected not in run.data.metrics  # tiny size's 60-row slice no reference posterior either
        else:
            assert len(store.get_metric_history(run.info.run_id, expected)) == 3  # iterations 0, 10, 20
        variational = np.load(
            store.download_artifacts(run.info.run_id, "variational.npz", str(tmp_path / run.info.run_id))
        )
        assert len(variational["names"]) * 2 == len(variational["params"])


def test_progress_bar_only_on_a_terminal(tmp_path, store_in, monkeypatch):
    """The bar is drawn when stderr is a terminal (a pseudo-terminal here, read by a thread so that
    the command never blocks on a full buffer); the command runs through the CLI's main."""
    import pty
    import threading

    from mcsa_bench.cli import main

    store_in(tmp_path)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.chdir(tmp_path)
    leader, follower = pty.openpty()
    chunks = []

    def read_terminal():
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal was closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    with open(follower, "w", closefd=True) as terminal, contextlib.redirect_stderr(terminal), \
            contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", "model.dim=3", "n_iters=300", "eval_every=50"])
    reader.join(timeout=30)
    os.close(leader)
    text = b"".join(chunks).decode(errors="replace")
    assert code == 0
    assert "300/300" in text and "kl_inclusive" in text


def test_cfg_job_prints_the_config_with_the_kernel_that_will_run_and_runs_nothing(tmp_path):
    result = cli("run", "--cfg", "job", "estimator=msc_rb", "model.dim=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["estimator"] == {"name": "msc_rb"} and config["model"]["dim"] == 3
    assert config["kernel"]["name"] == "cis"
    assert not (tmp_path / "outputs").exists()


def test_run_help_lists_groups_options_and_keys(tmp_path):
    result = cli("run", "--help", cwd=tmp_path)
    assert result.returncode == 0
    for text in ("estimator (default: pmcsa)", "msc_rb", "n_samples=10", "tracking.uri=sqlite:///outputs/mlflow.db",
                 "seed=${seed}", "size: bench, smoke, tiny", "method: "):
        assert text in result.stdout


def test_plugins_and_help_do_not_import_mlflow_or_hydra(tmp_path):
    probe = textwrap.dedent("""
        import contextlib, io, sys
        from mcsa_bench.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plugins"]) == 0 and main(["--help"]) == 0
        print(sorted(m for m in ("mlflow", "hydra") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_a_single_run_imports_neither_scipy_stats_nor_scipy_optimize_nor_jax(tmp_path):
    """Start-up (issue 53 §4): scipy.stats costs a command about 1 s of CPU and scipy.optimize 0.3 s; a run of the
    default setting, whose optimum is moment matching, needs neither (benchmarks/measure/startup.py). The final
    sample metrics are off here: their Sinkhorn divergence (POT, where installed) imports scipy.stats through
    scikit-learn when the run ends, not when it starts. Nor does a numpy run import JAX, although every installed
    plugin is loaded and the extras name JAX at the top of a module (issue 53 §5: that import cost a sweep's
    launcher and each of its workers 1.7 s, +3.4 s before a sweep's first run)."""
    probe = textwrap.dedent("""
        import contextlib, io, sys
        from mcsa_bench.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["run", "n_iters=20", "eval_every=10", "sample_metrics=off"]) == 0
        print(sorted(m for m in ("scipy.stats", "scipy.optimize", "jax") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1:] == ["[]"], result.stderr


def test_plugins_json_lists_every_component_with_its_origin(tmp_path):
    result = cli("plugins", "--json", cwd=tmp_path)
    rows = json.loads(result.stdout)
    imh = next(r for r in rows if r["kind"] == "kernel" and r["name"] == "imh")
    assert imh["plugin"] == "mcsa_bench.builtin.kernels" and imh["distribution"] == "mcsa-bench" and imh["version"]
    assert {r["kind"] for r in rows} == {"model", "family", "kernel", "estimator", "optimizer"}
    table = cli("plugins", cwd=tmp_path).stdout
    assert table.splitlines()[0].split()[:4] == ["KIND", "NAME", "PLUGIN", "DISTRIBUTION"]


def test_a_third_party_kernel_is_selectable_without_yaml(tmp_path, store_in):
    store_in(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    make_distribution(site, "mcsa-bench-thirdparty", "2.0.1", "thirdparty_kernels", """
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import CIS

        class PatientCIS(CIS):
            '''CIS with an (unused) patience parameter.'''
            def __init__(self, patience: int = 3):
                self.patience = patience

        @hookimpl
        def register_kernels(register):
            register("patient_cis", PatientCIS)
    """)
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    listing = json.loads(cli("plugins", "--json", cwd=tmp_path, env=env).stdout)
    assert {
        "kind": "kernel",
        "name": "patient_cis",
        "distribution": "mcsa-bench-thirdparty",
        "version": "2.0.1",
    }.items() <= next(r for r in listing if r["name"] == "patient_cis").items()
    result = cli("run", "kernel=patient_cis", "kernel.patience=5", "estimator=msc_rb", "model.dim=3", "n_iters=10",
                 cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    run = all_runs(tmp_path)[0]
    assert run.data.params["kernel.patience"] == "5"
    assert run.data.tags["component.kernel.distribution"] == "mcsa-bench-thirdparty 2.0.1"
    bad = cli("run", "kernel=patient_cis", "kernel.patience=soon", cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "kernel.patience" in bad.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ui_serves_the_configured_store_on_localhost_quietly(sweep):
    workdir, _ = sweep
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", "ui", "--port", str(port)], cwd=workdir,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = process.stdout.readline()
        assert f"on http://127.0.0.1:{port} (ready in" in ready, ready
        deadline, answer = time.time() + 90, None
        while time.time() < deadline and answer is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=10",
                                            timeout=5) as response:
                    answer = json.loads(response.read())
            except OSError:
                time.sleep(0.2)
        assert answer is not None, "the UI did not answer"
        assert "mcsa-bench" in {e["name"] for e in answer["experiments"]}
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=60)
    assert "INFO" not in rest and len(rest.strip().splitlines()) <= 1, rest  # no server chatter


def test_ui_refuses_to_create_a_store_where_there_is_none(tmp_path):
    result = cli("ui", cwd=tmp_path)
    assert result.returncode == 2 and "no MLflow store at" in result.stderr
    assert not (tmp_path / "outputs").exists()


# Last in the file (tests run in file order): another xdist worker reaching the `sweep` fixture while
# the first worker still builds it would wait idle.
def test_each_job_logs_params_tags_metrics_and_artifacts(sweep):
    workdir, _ = sweep
    store = client(workdir)
    _, children = split_runs(all_runs(workdir))
    for run in children:
        params, tags = run.data.params, run.data.tags
        assert params["model.dim"] == "4" and params["n_iters"] == "50" and params["tracking.uri"].startswith("sqlite")
        expected_kernel = "cis" if params["estimator.name"] in ("msc", "msc_rb") else "imh"
        assert params["kernel.name"] == tags["component.kernel"] == expected_kernel
        assert tags["component.estimator.plugin"] == "mcsa_bench.builtin.estimators"
        assert tags["component.model.distribution"].startswith("mcsa-bench ")
        assert tags["mcsa_bench.version"] and tags["hydra.job.num"] in {str(i) for i in range(8)}
        assert tags["mcsa_bench.sweep.id"].startswith("outputs/multirun/")
        assert tags["mcsa_bench.role"] == "job" and len(tags["mcsa_bench.config_hash"]) == 16
        assert {k: tags[k] for k in ("method", "scheme", "kernel", "model", "dataset", "N", "T", "lr", "seed")} == {
            "method": params["estimator.name"], "scheme": params["estimator.name"], "kernel": expected_kernel,
            "model": "gaussian", "dataset": "", "N": "10", "T": "50", "lr": "0.01", "seed": params["seed"]}
        assert run.info.run_name == f"{params['estimator.name']}-gaussian-seed{params['seed']} #{tags['hydra.job.num']}"
        for name in ("kl_inclusive", "kl_exclusive", "wall_time"):
            assert [m.step for m in store.get_metric_history(run.info.run_id, name)] == [0, 10, 20, 30, 40, 50]
        for name in ("grad_norm", "acceptance_rate"):
            assert [m.step for m in store.get_metric_history(run.info.run_id, name)] == [10, 20, 30, 40, 50]
        assert {"config.yaml", "variational.npz", "metrics.csv", "target.npz"} <= {
            a.path for a in store.list_artifacts(run.info.run_id)}

    run = children[0]
    local = Path(store.download_artifacts(run.info.run_id, "", str(workdir / "download")))
    variational = np.load(local / "variational.npz")
    assert variational["params"].shape == (8,) and variational["mean"].shape == variational["std"].shape == (4,)
    assert list(variational["names"]) == ["z[0]", "z[1]", "z[2]", "z[3]"]
    target = np.load(local / "target.npz")
    assert target["mean"].shape == (4,) and target["cov"].shape == (4, 4)
    assert "estimator:" in (local / "config.yaml").read_text()
    header = (local / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "iteration" and "kl_inclusive" in header
