"""A run's final q as ArviZ's InferenceData (mcsa_bench/jobs/inferencedata.py, `mcsa-bench export --format arviz`):
the file opens with arviz.from_netcdf and holds exactly the draws of q at the saved λ from the recorded seed, its
log q and log p, the reference's draws, the model's variable names and ArviZ's dims for variational draws, and the
run's identity; a sweep gives one file per run; a NumPyro model's sites are on their supports; every bad input
is one line, exit 2, nothing written."""

from __future__ import annotations

import io
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.jobs.inferencedata import variables_of
from tests.support import built_once, cli_in_process
from tests.support import cli as cli_process

az = pytest.importorskip("arviz")
get_registry()  # loaded once before the commands in this process, which check that they leave the environment
# as they found it: plugins that import JAX set JAX's variables the first time

RUN = ["model=gaussian", "model.dim=3", "n_iters=40", "eval_every=20"]
PPL = Path(__file__).resolve().parents[1] / "data" / "ppl"


def test_latent_names_are_gathered_into_the_models_variables():
    z = np.arange(2 * 9, dtype=float).reshape(2, 9)
    names = ["x[0]", "y[0]", "x[1]", "y[1]", "W[0,1]", "W[0,0]", "alpha", "gap[0]", "gap[2]"]
    variables = variables_of(names, z)
    assert list(variables) == ["x", "y", "W", "alpha", "gap[0]", "gap[2]"]
    assert np.array_equal(variables["x"], z[:, [0, 2]]) and np.array_equal(variables["y"], z[:, [1, 3]])
    assert np.array_equal(variables["W"], z[:, [5, 4]].reshape(2, 1, 2))  # row-major, whatever the names' order
    assert np.array_equal(variables["alpha"], z[:, 6]) and np.array_equal(variables["gap[2]"], z[:, 8])
    # a name that is also an array's name keeps every coordinate its own variable
    assert list(variables_of(["b", "b[0]"], z[:, :2])) == ["b", "b[0]"]


def cli(workdir: Path, monkeypatch, *args: str, code: int = 0):
    done = cli_in_process(*args, cwd=workdir, monkeypatch=monkeypatch)
    assert done.returncode == code, done.stderr
    return done


@pytest.fixture
def sweep(tmp_path_factory, tmp_path, store_in):
    """A copy (store and artifacts) of a 2-seed sweep of the Gaussian target, built once per session."""
    def build(directory: Path):
        store_in(directory)
        done = cli_process("run", "-m", *RUN, "seed=0,1", cwd=directory)  # a process: the sweep's imports its own
        assert done.returncode == 0, done.stderr

    built = built_once(tmp_path_factory, "arviz_sweep", build)
    shutil.copytree(built, tmp_path, dirs_exist_ok=True)
    database = sqlite3.connect(tmp_path / "outputs" / "mlflow.db")  # the copy's runs point at the copy's artifacts
    with database:
        database.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (str(built), str(tmp_path)))
    database.close()
    return tmp_path


def job_runs(workdir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/outputs/mlflow.db")
    experiment = client.get_experiment_by_name("mcsa-bench").experiment_id
    return client, client.search_runs([experiment], "tags.`mcsa_bench.role` = 'job'",
                                      order_by=["attributes.start_time ASC"])


def saved_q(workdir: Path, run_id: str):
    """λ and the built components of a run, from its artifacts, independently of the export."""
    import yaml

    from mcsa_bench import get_registry
    from mcsa_bench.assembly import assemble

    artifacts = workdir / "outputs" / "mlartifacts" / run_id / "artifacts"
    config = yaml.safe_load((artifacts / "config.yaml").read_text())
    params = np.load(artifacts / "variational.npz")["params"]
    parts = assemble(get_registry(), model=("gaussian", {k: v for k, v in config["model"].items() if k != "name"}),
                     family=("meanfield_gaussian", {k: v for k, v in config["family"].items() if k != "name"}),
                     estimator=config["estimator"]["name"], n_samples=config["n_samples"])
    return params, parts


def test_a_runs_final_q_round_trips_through_netcdf(sweep, monkeypatch):
    client, (run, _) = job_runs(sweep)
    run_id = run.info.run_id
    done = cli(sweep, monkeypatch, "export", "--format", "arviz", "--run", run_id, "--draws", "500",
               "--draws-seed", "7", "--out", "q.nc")
    assert f"Wrote 500 draws of run {run_id}'s final q to q.nc" in done.stdout
    data = az.from_netcdf(sweep / "q.nc")
    assert set(data.groups()) == {"posterior", "sample_stats", "reference_posterior"}

    params, parts = saved_q(sweep, run_id)
    z = parts.family.sample(params, np.random.default_rng(7), 500)
    posterior = data.posterior
    assert list(posterior.data_vars) == ["z"] and posterior["z"].dims == ("chain", "draw", "z_dim_0")
    assert posterior["z"].shape == (1, 500, 3)
    np.testing.assert_allclose(posterior["z"].values[0], z, rtol=0, atol=1e-12)
    stats = data.sample_stats
    np.testing.assert_allclose(stats["log_q"].values[0], parts.family.log_prob(params, z), rtol=1e-12)
    np.testing.assert_allclose(stats["lp"].values[0], parts.model.log_joint(z), rtol=1e-12)
    np.testing.assert_allclose(data.reference_posterior["z"].values[0], parts.reference.draws, rtol=0, atol=1e-12)

    attrs = posterior.attrs
    from mcsa_bench.version import __version__
    assert attrs["inference_library"] == "mcsa-bench" and attrs["inference_library_version"] == __version__
    assert attrs["arviz_version"] == az.__version__
    assert (attrs["mcsa_bench_run_id"], attrs["mcsa_bench_config_hash"], attrs["mcsa_bench_sweep_id"]) == (
        run_id, run.data.tags["mcsa_bench.config_hash"], run.data.tags["mcsa_bench.sweep.id"])
    assert (attrs["mcsa_bench_draws"], attrs["mcsa_bench_draws_seed"], attrs["mcsa_bench_scale"]) == (500, 7, "latent")
    assert (attrs["mcsa_bench_model"], attrs["mcsa_bench_family"], attrs["mcsa_bench_seed"]) == (
        "gaussian", "meanfield_gaussian", 0)
    assert data.reference_posterior.attrs["mcsa_bench_reference"] == parts.reference.name
    assert az.summary(data, kind="stats").index.tolist() == ["z[0]", "z[1]", "z[2]"]

    again = cli(sweep, monkeypatch, "export", "--format", "arviz", "--run", run_id, "--draws", "500",
                "--draws-seed", "7", "--out", "again.nc")
    assert again.returncode == 0
    assert np.array_equal(az.from_netcdf(sweep / "again.nc").posterior["z"].values, posterior["z"].values)


def test_a_sweep_is_one_file_per_run(sweep, monkeypatch):
    client, runs = job_runs(sweep)
    client.set_terminated(runs[1].info.run_id, "FAILED")
    done = cli(sweep, monkeypatch, "export", "--format", "arviz", "--sweep", "latest", "--draws", "50",
               "--out", "draws")
    assert f"skipped run {runs[1].info.run_id}" in done.stdout and "FAILED, no final q" in done.stdout
    assert sorted(p.name for p in (sweep / "draws").iterdir()) == [f"{runs[0].info.run_id}.nc"]
    client.set_terminated(runs[1].info.run_id, "FINISHED")
    cli(sweep, monkeypatch, "export", "--format", "arviz", "--sweep", "latest", "--draws", "50")
    folder = sweep / "outputs" / "arviz" / "mcsa-bench-sweep-latest"
    files = {run.info.run_id: folder / f"{run.info.run_id}.nc" for run in runs}
    assert sorted(folder.iterdir()) == sorted(files.values())
    for run_id, path in files.items():
        data = az.from_netcdf(path)
        params, parts = saved_q(sweep, run_id)
        assert data.posterior.attrs["mcsa_bench_run_id"] == run_id
        np.testing.assert_allclose(data.posterior["z"].values[0], parts.family.sample(
            params, np.random.default_rng(0), 50), rtol=0, atol=1e-12)


def fail_one_line(workdir: Path, monkeypatch, *args: str) -> str:
    before = sorted(workdir.rglob("*"))
    done = cli(workdir, monkeypatch, "export", *args, code=2)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(workdir.rglob("*")) == before, "a refused export wrote something"
    return done.stderr


def test_every_bad_input_is_one_line_exit_2_and_nothing_written(sweep, monkeypatch):
    client, (run, other) = job_runs(sweep)
    arviz = ["--format", "arviz", "--out", "q.nc"]
    assert "no run 'nope' in the store" in fail_one_line(sweep, monkeypatch, *arviz, "--run", "nope")
    parent = run.data.tags["mlflow.parentRunId"]
    assert f"is a sweep's parent, not a job: export its jobs with --sweep {parent}" in fail_one_line(
        sweep, monkeypatch, *arviz, "--run", parent)
    assert "--draws must be at least 1" in fail_one_line(sweep, monkeypatch, *arviz, "--run", run.info.run_id,
                                                         "--draws", "0")
    assert "--run RUN_ID or --sweep" in fail_one_line(sweep, monkeypatch, *arviz, "--run", "x", "--sweep", "latest")
    assert "options of --format arviz" in fail_one_line(sweep, monkeypatch, "--run", run.info.run_id)
    assert "options of --format arviz" in fail_one_line(sweep, monkeypatch, "--draws-seed", "3")
    assert "invalid choice: 'netcdf'" in fail_one_line(sweep, monkeypatch, "--format", "netcdf")

    client.set_terminated(other.info.run_id, "KILLED")
    assert "is KILLED: only a FINISHED run has a final q" in fail_one_line(sweep, monkeypatch, *arviz, "--run",
                                                                           other.info.run_id)
    client.set_tag(run.info.run_id, "mcsa_bench.config_hash", "0123456789abcdef")
    assert "ran as config hash 0123456789abcdef" in fail_one_line(sweep, monkeypatch, *arviz, "--run",
                                                                  run.info.run_id)
    config = sweep / "outputs" / "mlartifacts" / run.info.run_id / "artifacts" / "config.yaml"
    config.write_text("\n".join(line for line in config.read_text().splitlines() if not line.startswith("n_iters")))
    assert "config.yaml lacks 'n_iters' (written by an older mcsa-bench?)" in fail_one_line(
        sweep, monkeypatch, *arviz, "--run", run.info.run_id)
    (sweep / "outputs" / "mlartifacts" / other.info.run_id / "artifacts" / "variational.npz").unlink()
    client.set_terminated(other.info.run_id, "FINISHED")
    assert "has no variational.npz artifact: its final q was not saved" in fail_one_line(
        sweep, monkeypatch, *arviz, "--run", other.info.run_id)

    monkeypatch.setitem(sys.modules, "arviz", None)  # as where ArviZ is not installed
    assert "needs ArviZ: pip install 'mcsa-bench[arviz]'" in fail_one_line(sweep, monkeypatch, *arviz, "--run",
                                                                           other.info.run_id)


@pytest.mark.slow  # a NumPyro model's run, JAX's compilations: about 20 s
def test_a_numpyro_models_sites_are_on_their_supports(tmp_path, store_in, monkeypatch):
    pytest.importorskip("numpyro")
    store_in(tmp_path)
    shutil.copy(PPL / "eight_schools_numpyro.py", tmp_path / "model.py")
    shutil.copy(PPL / "eight_schools.json", tmp_path / "data.json")
    cli(tmp_path, monkeypatch, "run", "model=numpyro", "model.source=model.py:model", "model.data=data.json",
        "n_iters=20", "eval_every=20")
    _, (run,) = job_runs(tmp_path)
    cli(tmp_path, monkeypatch, "export", "--format", "arviz", "--run", run.info.run_id, "--draws", "200",
        "--out", "schools.nc")
    data = az.from_netcdf(tmp_path / "schools.nc")
    posterior, latent = data.posterior, data.unconstrained_posterior
    assert {"mu", "tau", "eta"} <= set(posterior.data_vars) and set(latent.data_vars) == {"mu", "tau", "eta"}
    assert posterior["eta"].dims == ("chain", "draw", "eta_dim_0") and posterior["eta"].shape == (1, 200, 8)
    assert posterior.attrs["mcsa_bench_scale"] == "constrained"
    # the latent draws are q's at the saved λ; the sites are NumPyro's transforms of them (tau = exp(log tau))
    import yaml

    from mcsa_bench import get_registry
    from mcsa_bench.autodiff.ppl import NumPyroModel

    artifacts = tmp_path / "outputs" / "mlartifacts" / run.info.run_id / "artifacts"
    config = yaml.safe_load((artifacts / "config.yaml").read_text())
    params = np.load(io.BytesIO((artifacts / "variational.npz").read_bytes()))["params"]
    family = get_registry().build("family", "meanfield_gaussian", dim=10,
                                  **{k: v for k, v in config["family"].items() if k != "name"})
    z = family.sample(params, np.random.default_rng(0), 200)
    np.testing.assert_allclose(latent["mu"].values[0], z[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(latent["eta"].values[0], z[:, 2:], rtol=0, atol=1e-12)
    assert np.all(posterior["tau"].values > 0)
    np.testing.assert_allclose(posterior["tau"].values[0], np.exp(z[:, 1]), rtol=1e-12)
    sites = NumPyroModel(f"{tmp_path / 'model.py'}:model", str(tmp_path / "data.json")).constrained(z)
    for site, values in sites.items():
        np.testing.assert_allclose(posterior[site].values[0], values, rtol=1e-12)
