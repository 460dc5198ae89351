"""A search's trials (mcsa_bench.jobs.objective): what each returns to Hydra's Optuna or Nevergrad sweeper, the
sweeper's direction set from the objective, and a real Optuna search through the CLI (docs/tuning.md)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import yaml

from mcsa_bench.api import ConfigurationError
from mcsa_bench.jobs.config import RunSettings, compose
from mcsa_bench.jobs.objective import (
    NEVERGRAD_SWEEPER,
    OPTUNA_SWEEPER,
    Goal,
    TrialFailed,
    check_objective,
    decode,
    encode,
    resolve_goals,
    sweeper_direction,
    trial_value,
)
from mcsa_bench.plugins import get_registry
from mcsa_bench.tracking.localrecord import LocalRecord
from mcsa_bench.tracking.record import HIGHER, LOWER
from tests.support import cli_in_process

OPTUNA = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
if OPTUNA:  # imported before any command: scikit-learn, which optuna imports, sets KMP_* variables on first import
    import optuna  # noqa: F401


def parts_of(*overrides: str):
    (_, cfg), = compose(list(overrides), multirun=False).jobs
    return RunSettings.from_config(cfg).assemble(get_registry())


@pytest.mark.parametrize("value", [None, "test_lpd", "grad_norm:min", ["test_lpd", "test_accuracy:max"]])
def test_the_setting_takes_metric_names_with_an_optional_direction(value):
    check_objective(value)


@pytest.mark.parametrize("value", ["test_lpd:up", ":max", [], [3]])
def test_the_setting_refuses_anything_else_in_one_line(value):
    with pytest.raises(ConfigurationError, match="objective"):
        check_objective(value)


def test_the_default_goal_is_the_models_headline_metric_in_its_direction():
    assert resolve_goals(None, parts_of("experiment=logistic_pima", "size=tiny")) == [Goal("test_lpd", HIGHER)]
    assert resolve_goals(None, parts_of("model.dim=3")) == [Goal("kl_inclusive", LOWER)]


def test_named_goals_take_the_catalogues_direction_unless_one_is_written():
    parts = parts_of("experiment=logistic_pima", "size=tiny")
    assert resolve_goals(["test_accuracy", "test_lpd:min", "grad_norm:max"], parts) == [
        Goal("test_accuracy", HIGHER), Goal("test_lpd", LOWER), Goal("grad_norm", HIGHER)]


def test_a_goal_without_a_direction_or_not_logged_by_the_model_is_one_line():
    parts = parts_of("model.dim=3")
    with pytest.raises(ConfigurationError, match="'grad_norm' has no better direction; write grad_norm:max or"):
        resolve_goals("grad_norm", parts)
    with pytest.raises(ConfigurationError, match=r"'test_lpd': no such metric.*results: kl_inclusive, kl_exclusive"):
        resolve_goals("test_lpd", parts)


def test_goals_travel_to_the_trials_as_text():
    goals = [Goal("test_lpd", HIGHER), Goal("wall_time", LOWER)]
    assert encode(goals) == "test_lpd:max,wall_time:min" and decode(encode(goals)) == goals


def test_the_sweepers_direction_is_set_from_the_goals_and_a_contradiction_is_refused():
    up, down = Goal("test_lpd", HIGHER), Goal("wall_time", LOWER)
    override, note = sweeper_direction([up], OPTUNA_SWEEPER, {"direction": "minimize"}, set())
    assert override == "hydra.sweeper.direction=maximize" and "test_lpd (higher is better)" in note
    assert sweeper_direction([down], OPTUNA_SWEEPER, {"direction": "minimize"}, set())[0] is None
    assert sweeper_direction([up, down], OPTUNA_SWEEPER, {"direction": "minimize"}, set())[0] == \
        "hydra.sweeper.direction=[maximize,minimize]"
    with pytest.raises(ConfigurationError, match="hydra.sweeper.direction contradicts the objective"):
        sweeper_direction([up], OPTUNA_SWEEPER, {"direction": "minimize"}, {"hydra.sweeper.direction"})
    assert sweeper_direction([up], NEVERGRAD_SWEEPER, {"optim": {"maximize": False}}, set())[0] == \
        "hydra.sweeper.optim.maximize=true"
    with pytest.raises(ConfigurationError, match="Nevergrad's sweeper optimizes one objective"):
        sweeper_direction([up, down], NEVERGRAD_SWEEPER, {"optim": {}}, set())
    assert sweeper_direction([up], "my.Sweeper", {}, set())[0] is None  # another sweeper chooses its own


def record_of(directory, rows, **info):
    record = LocalRecord(directory)
    for row in rows:
        record.log_row(row)
    record.update_run_info(**info)
    return directory


def test_a_trial_returns_the_final_values_its_run_logged(tmp_path):
    rows = [{"iteration": 0, "test_lpd": -0.9, "wall_time": 0.0}, {"iteration": 50, "test_lpd": -0.7, "wall_time": 1.5},
            {"iteration": 50, "diverged": 0.0}]  # the run-level row at T
    directory = record_of(tmp_path, rows, status="FINISHED")
    assert trial_value([Goal("test_lpd", HIGHER)], "FINISHED", directory, None, 3) == -0.7
    assert trial_value([Goal("test_lpd", HIGHER), Goal("wall_time", LOWER)], "FINISHED", directory, None, 3) == \
        [-0.7, 1.5]
    with pytest.raises(TrialFailed, match="trial #3: its run logged no test_accuracy"):
        trial_value([Goal("test_accuracy", HIGHER)], "FINISHED", directory, None, 3)


def test_a_reused_trial_returns_its_earlier_runs_values_and_a_diverged_one_its_worst(tmp_path):
    goals = [Goal("test_lpd", HIGHER), Goal("wall_time", LOWER)]
    assert trial_value(goals, "SKIPPED", tmp_path, {"test_lpd": -0.6, "wall_time": 2.0}, 1) == [-0.6, 2.0]
    for kind in ("NonFiniteError", "DivergenceError"):  # a non-finite log density; gradient or λ
        diverged = record_of(tmp_path / kind, [], status="FAILED", error=f"{kind}: non-finite gradient at iteration 3")
        assert trial_value(goals, "FAILED", diverged, None, 1) == [-math.inf, math.inf]


def test_a_trial_whose_run_failed_otherwise_fails_for_its_sweeper(tmp_path):
    directory = record_of(tmp_path, [], status="FAILED", error="RuntimeError: a component broke")
    with pytest.raises(TrialFailed, match="trial #2 ended FAILED: RuntimeError: a component broke"):
        trial_value([Goal("test_lpd", HIGHER)], "FAILED", directory, None, 2)


SEARCH = ("run", "-m", "hydra/sweeper=optuna", "model.dim=2", "n_iters=30", "eval_every=10",
          "optimizer.lr=interval(0.001,0.3)", "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=0")


@pytest.mark.slow
@pytest.mark.skipif(not OPTUNA, reason="hydra-optuna-sweeper is not installed (the dev extra installs it)")
def test_optunas_sweeper_tunes_a_stepsize_through_the_driver_each_trial_its_own_run(tmp_path, monkeypatch):
    """The issue's command at a tiny size: every trial returns its run's kl_inclusive, Optuna minimizes it and
    names as best the trial whose run logged the least; the summary counts trials; a report reads the search."""
    from mlflow.tracking import MlflowClient

    from mcsa_bench.report.runs import load_sweep
    from mcsa_bench.tracking.tables import open_reader

    result = cli_in_process(*SEARCH, cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert "Each trial returns kl_inclusive (lower is better); hydra.sweeper.direction=minimize agrees" in result.stdout
    assert "Search finished: 4 trials run for hydra/sweeper=optuna, 4 FINISHED." in result.stdout
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    trials = [r for r in runs if r.data.tags.get("mcsa_bench.role") == "job"]
    rates = {r.data.params["optimizer.lr"] for r in trials}
    assert len(trials) == 4 and len(rates) == 4  # each trial its own run, at its own stepsize
    (results_file,) = (tmp_path / "outputs").rglob("optimization_results.yaml")
    best = yaml.safe_load(results_file.read_text())
    least = min(trials, key=lambda r: r.data.metrics["kl_inclusive"])
    assert best["best_value"] == pytest.approx(least.data.metrics["kl_inclusive"], rel=1e-12)
    assert float(least.data.params["optimizer.lr"]) == pytest.approx(best["best_params"]["optimizer.lr"])
    assert f"Best kl_inclusive:min: {least.data.metrics['kl_inclusive']:.4g}" in result.stdout
    search = load_sweep(open_reader(uri), "latest", "mcsa-bench")
    assert search.missing_jobs == [] and "chosen by hydra/sweeper=optuna" in search.grid_note

    again = cli_in_process(*SEARCH, "resume=true", cwd=tmp_path, monkeypatch=monkeypatch)  # the same seeded study
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("reuses the FINISHED run") == 4 and "Search finished: 0 trials run" in again.stdout
    (_, rerun) = sorted((tmp_path / "outputs").rglob("optimization_results.yaml"))
    assert yaml.safe_load(rerun.read_text())["best_value"] == best["best_value"]


@pytest.mark.slow
@pytest.mark.skipif(not OPTUNA, reason="hydra-optuna-sweeper is not installed (the dev extra installs it)")
def test_a_search_stopped_by_a_failed_trial_says_why_and_not_to_resume(tmp_path, monkeypatch):
    """grad_variance is logged only with the gradient diagnostic on: every trial fails for Optuna, whose
    max_failure_rate of 0 ends the search; the command says so, and that resuming would not help."""
    result = cli_in_process(*SEARCH[:-2], "hydra.sweeper.n_trials=2", "objective=grad_variance:min", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 1
    assert "Search finished: 2 trials run for hydra/sweeper=optuna, 2 FINISHED." in result.stdout
    assert "the search stopped: trial #0: its run logged no grad_variance" in result.stderr
    assert "hydra.sweeper.max_failure_rate" in result.stderr and "resume=true" not in result.stderr
    info = json.loads(next((tmp_path / "outputs" / "multirun").rglob("run.json")).read_text())
    assert info["status"] == "FINISHED"  # the run itself is fine: its trial had no value to return


@pytest.mark.slow
@pytest.mark.skipif(not OPTUNA, reason="hydra-optuna-sweeper is not installed (the dev extra installs it)")
def test_a_stepsize_that_diverges_is_the_worst_trial_not_the_end_of_the_search(tmp_path, monkeypatch):
    """SGD at a stepsize of 10⁸ ends in a non-finite gradient (DivergenceError): Optuna gets −∞ for its test_lpd, the
    search goes on and names the other stepsize best, and the command exits 0."""
    result = cli_in_process("run", "-m", "hydra/sweeper=optuna", "experiment=logistic_pima", "size=tiny",
                            "optimizer=sgd", "optimizer.lr=choice(0.01,1e8)", "hydra.sweeper.n_trials=2",
                            "hydra.sweeper.sampler.seed=0", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    assert "2 trials run for hydra/sweeper=optuna, 1 FINISHED, 1 diverged (each the worst test_lpd to the sweeper)" \
        in result.stdout and "(optimizer.lr=0.01)." in result.stdout
    (results_file,) = (tmp_path / "outputs").rglob("optimization_results.yaml")
    assert yaml.safe_load(results_file.read_text())["best_params"] == {"optimizer.lr": 0.01}
