"""log Z and its Pareto k̂ (docs/methods.md §7) for the data models.

radon and stochastic_volatility report ``log_z`` / ``log_z_khat`` from evaluate() (importance
sampling with 2^12 draws of q); it must be finite even for the poor initial q. The other data
models report predictive metrics instead (the papers evaluate them by test LPD); the importance
estimate itself is finite for them too, with 256 draws (the GP models on 40 rows of their data:
their log joint costs one n×n Cholesky factor per draw).
"""

import math

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation
from mcsa_bench.metrics import importance_log_z


def initial_q(model):
    family = get_registry().build("family", "meanfield_gaussian", dim=model.dim)
    return Approximation(family, family.init_params())


@pytest.mark.parametrize("name", ["radon", "stochastic_volatility"])
def test_models_that_estimate_log_z_report_it_finite(name):
    model = get_registry().build("model", name)
    metrics = model.evaluate(initial_q(model), np.random.default_rng(0))
    assert math.isfinite(metrics["log_z"]) and math.isfinite(metrics["log_z_khat"])


@pytest.mark.parametrize("name,params", [("logistic", {}), ("bnn", {}), ("gp_classification", {"max_rows": 40}),
                                         ("gp_regression", {"max_rows": 40})])
def test_the_importance_estimate_is_finite_for_the_other_models(name, params):
    model = get_registry().build("model", name, **params)
    assert "log_z" not in model.evaluate(initial_q(model), np.random.default_rng(0))
    result = importance_log_z(model, initial_q(model), np.random.default_rng(0), n=256)
    assert math.isfinite(result["log_z"]) and math.isfinite(result["log_z_khat"])


@pytest.mark.parametrize("name,family", [("radon", "meanfield_gaussian"), ("radon", "fullrank_gaussian"),
                                         ("stochastic_volatility", "meanfield_gaussian"),
                                         ("eight_schools", "meanfield_student_t")])
def test_log_z_in_blocks_of_draws_gives_the_values_of_one_call_to_1e_12(name, family):
    """importance_log_z draws from q and calls the log joint block by block (the evaluation's cost):
    for the built-in families, log Z and k̂ are those of all 2^12 draws made and scored at once."""
    from mcsa_bench.metrics import LOG_Z_BLOCK, LOG_Z_DRAWS, log_mean_exp, pareto_khat

    assert LOG_Z_DRAWS > LOG_Z_BLOCK  # more than one block
    model = get_registry().build("model", name)
    q_family = get_registry().build("family", family, dim=model.dim)
    params = q_family.init_params() + np.random.default_rng(1).normal(0.0, 0.05, q_family.num_params)
    q = Approximation(q_family, params)
    result = importance_log_z(model, q, np.random.default_rng(0))
    z, log_q = q.sample_with_log_prob(np.random.default_rng(0), LOG_Z_DRAWS)
    log_w = model.log_joint(z) - log_q
    assert result["log_z"] == pytest.approx(float(log_mean_exp(log_w)), rel=1e-12, abs=1e-12)
    assert result["log_z_khat"] == pytest.approx(pareto_khat(log_w), rel=1e-12, abs=1e-12)
