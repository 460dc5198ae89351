"""Shared metrics: log-mean-exp, the PSIS Pareto k̂ against scipy's generalized Pareto, and the
importance-sampling log Z on a target with a known normalizing constant."""

import numpy as np
import pytest
import scipy.stats as st
from scipy.special import logsumexp

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation
from mcsa_bench.metrics import _generalized_pareto_shape, importance_log_z, log_mean_exp, pareto_khat


def test_log_mean_exp_matches_scipy_and_survives_large_values():
    values = np.random.default_rng(0).normal(scale=300.0, size=(50, 3))
    np.testing.assert_allclose(log_mean_exp(values, axis=0), logsumexp(values, axis=0) - np.log(50), rtol=1e-12)
    assert log_mean_exp(np.array([-np.inf, -np.inf])) == -np.inf


@pytest.mark.parametrize("shape", [0.1, 0.3, 0.5, 0.7, 1.0])
def test_pareto_shape_fit_agrees_with_scipy_maximum_likelihood(shape):
    x = np.sort(st.genpareto(c=shape).rvs(size=2000, random_state=np.random.default_rng(1)))
    fitted = _generalized_pareto_shape(np.log(x))
    mle = st.genpareto.fit(x, floc=0)[0]
    assert fitted == pytest.approx(mle, abs=0.03)
    assert fitted == pytest.approx(shape, abs=0.1)


def test_khat_separates_good_from_heavy_tailed_weights():
    rng = np.random.default_rng(2)
    z = rng.standard_normal(4096)
    light = st.norm(0, 0.8).logpdf(z) - st.norm.logpdf(z)  # bounded weights
    heavy = np.log(st.genpareto(c=0.9).rvs(size=4096, random_state=rng))  # Pareto tail, k = 0.9
    assert pareto_khat(light) < 0.5
    assert pareto_khat(heavy) == pytest.approx(0.9, abs=0.15)


def test_khat_edge_cases():
    assert np.isnan(pareto_khat(np.zeros(4096)))  # equal weights: no tail to fit
    assert np.isnan(pareto_khat(np.zeros(10)))  # too few draws
    # The top 3√n weights span ~940 nats: beyond double precision, yet the fit stays finite and
    # says what it should: hopelessly heavy.
    assert 10 < pareto_khat(np.linspace(0.0, 20_000.0, 4096)) < np.inf
    # Scale invariance: shifting all log weights changes nothing.
    heavy = np.log(st.genpareto(c=0.6).rvs(size=4096, random_state=np.random.default_rng(4)))
    assert pareto_khat(heavy + 1000.0) == pytest.approx(pareto_khat(heavy), rel=1e-9)


def test_importance_log_z_of_a_normalized_target_is_zero():
    target = get_registry().build("model", "gaussian", dim=3, nu=5.0, seed=1)
    family = get_registry().build("family", "meanfield_gaussian", dim=3)
    mean, cov = target.mean, target.cov
    q = Approximation(family, np.concatenate([mean, np.log(np.expm1(1.5 * np.sqrt(np.diag(cov))))]))
    result = importance_log_z(target, q, np.random.default_rng(3))
    assert result["log_z"] == pytest.approx(0.0, abs=0.05) and result["log_z_khat"] < 0.7
