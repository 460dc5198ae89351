"""Run health (mcsa_bench.jobs.health): each criterion on constructed histories, then both ways on real runs:
the failed full-rank fits are flagged, converged fits of the shipped settings are not, and a job
records the verdict as a tag, a metric and a line in the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble
from mcsa_bench.jobs.health import ACCEPTANCE_FLOOR, MIN_ITERATIONS, SCALE_GROWTH, assess
from tests.support import cli_in_process

FAMILY = get_registry().build("family", "meanfield_gaussian", dim=3)
START = FAMILY.init_params()


def history(acceptance: list[float], n_iters: int = 2000, **last) -> list[dict]:
    rows = [{"iteration": int(i * n_iters / (len(acceptance) - 1)), "acceptance_rate": a, "test_lpd": -0.5}
            for i, a in enumerate(acceptance)]
    rows[-1].update(last)
    return rows


def test_acceptance_collapse_in_the_second_half_is_a_divergence():
    collapsed = assess(history([0.2, 0.1, 0.004, 0.002, 0.001]), 2000, FAMILY, START, START)
    assert collapsed.diverged and "acceptance" in collapsed.reason
    assert collapsed.tags()["mcsa_bench.health"] == "diverged"
    early_only = assess(history([0.0, 0.001, 0.05, 0.06, 0.07]), 2000, FAMILY, START, START)
    assert not early_only.diverged and early_only.tags() == {"mcsa_bench.health": "ok", "mcsa_bench.health_reason": ""}
    at_the_floor = assess(history([0.2] + [ACCEPTANCE_FLOOR] * 4), 2000, FAMILY, START, START)
    assert not at_the_floor.diverged
    short = assess(history([0.0, 0.0, 0.0], n_iters=MIN_ITERATIONS - 1), MIN_ITERATIONS - 1, FAMILY, START, START)
    assert not short.diverged  # a smoke test's few iterations are not a verdict


def test_scales_growing_without_bound_and_non_finite_metrics_are_divergences():
    grown = START.copy()
    grown[3 + 1] = FAMILY._scale.inverse(np.float64(2 * SCALE_GROWTH))
    verdict = assess(history([0.3] * 5), 2000, FAMILY, START, grown)
    assert verdict.diverged and "coordinate 1 grew 2e+03-fold" in verdict.reason
    assert not assess(history([0.3] * 5), 2000, FAMILY, START, START + 1.0).diverged
    nan = assess(history([0.3] * 5, test_lpd=math.nan), 2000, FAMILY, START, START)
    assert nan.diverged and "non-finite test_lpd" in nan.reason
    assert not assess(history([0.3] * 5, log_z_khat=math.nan), 2000, FAMILY, START, START).diverged


def _fit(model, family, estimator, n_iters):
    parts = assemble(get_registry(), model=model, family=family, estimator=estimator, n_samples=10,
                     optimizer=("adam", {"lr": 0.01}))
    result = run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=n_iters // 10)
    return assess(result.history, n_iters, parts.family, parts.family.init_params(), result.q.params)


PIMA = ("logistic", {"dataset": "pima", "standardize": False, "test_fraction": 0.0})


@pytest.mark.parametrize("estimator", ["pmcsa", "msc"])
def test_the_failed_full_rank_fits_are_flagged(estimator):
    """Full-rank in the papers' form on raw-feature pima ends hundreds of posterior sd off (docs/estimators.md)."""
    verdict = _fit(PIMA, ("fullrank_gaussian", {"offdiagonal": "absolute"}), estimator, 2000)
    assert verdict.diverged and "acceptance" in verdict.reason


@pytest.mark.parametrize("model, estimator", [
    (PIMA, "pmcsa"), (PIMA, "jsa"), (PIMA, "msc"), (PIMA, "msc_rb"), (PIMA, "snis"), (PIMA, "elbo"),
    (("logistic", {"dataset": "heart", "standardize": False}), "jsa"),
    (("radon", {}), "jsa"), (("radon", {}), "pmcsa"), (("gaussian", {"dim": 50, "nu": 500.0}), "msc"),
])
def test_converged_fits_of_the_shipped_settings_are_not_flagged(model, estimator):
    assert not _fit(model, "meanfield_gaussian", estimator, 2000).diverged


@pytest.mark.slow
def test_a_diverged_job_is_tagged_logged_and_listed_by_the_report(tmp_path, store_in, monkeypatch):
    from mlflow.tracking import MlflowClient

    store_in(tmp_path)
    bad = cli_in_process("run", "-m", "experiment=logistic_pima_all_rows", "n_iters=1000", "family=fullrank_gaussian",
                         "family.offdiagonal=absolute,relative", cwd=tmp_path, monkeypatch=monkeypatch)
    assert bad.returncode == 0, bad.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id],
                              filter_string="tags.`mcsa_bench.role` = 'job'")
    verdicts = {r.data.params["family.offdiagonal"]: (r.data.tags["mcsa_bench.health"], r.data.metrics["diverged"])
                for r in runs}
    assert verdicts == {"absolute": ("diverged", 1.0), "relative": ("ok", 0.0)}
    (papers_form,) = [r.info.run_id for r in runs if r.data.params["family.offdiagonal"] == "absolute"]
    out = tmp_path / "report"
    report = cli_in_process("report", "--sweep", "latest", "--no-figures", "--out", str(out), cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert report.returncode == 0 and "1 finished runs whose fit diverged" in report.stdout
    (listed,) = json.loads((out / "summary.json").read_text())["diverged"]
    assert listed["run_id"] == papers_form and "acceptance" in listed["reason"]
    assert "whose fit diverged" in (out / "report.html").read_text()
