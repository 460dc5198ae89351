"""The Gaussian target (reference.md §6): density against scipy.stats, the Wishart draw against its
known moments, and the exact KL metrics against independent computations."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation, ConfigurationError
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.builtin.models.gaussian import gaussian_kl
from tests.support import assert_gradient_matches, assert_monte_carlo_estimates


def target(**params):
    return get_registry().build("model", "gaussian", **{"dim": 4, "nu": 5.0, "seed": 2, **params})


def test_log_joint_is_the_normalized_gaussian_density():
    model = target()
    z = np.random.default_rng(0).normal(size=(6, 4))
    expected = st.multivariate_normal(model.mean, model.cov).logpdf(z)
    np.testing.assert_allclose(model.log_joint(z), expected, rtol=1e-10)
    np.testing.assert_allclose(model.log_joint(z[2:3]), expected[2:3], rtol=1e-10)


def test_gradient_equals_finite_differences():
    model = target()
    assert model.has_gradient
    assert_gradient_matches(model.log_joint_and_grad, np.random.default_rng(1).normal(size=(5, 4)))


def test_target_draw_has_the_wishart_moments():
    # m ~ N(0, I); Σ ~ Wishart(df, I/df): E Σ = I, Var Σ_ij = (1 + δ_ij)/df.
    dim, nu, seeds = 3, 5.0, 400
    draws = [target(dim=dim, nu=nu, seed=s) for s in range(seeds)]
    covs = np.stack([d.cov for d in draws])
    means = np.stack([d.mean for d in draws])
    df = dim + nu
    standard_error = np.sqrt((1 + np.eye(dim)) / df / seeds)
    assert np.all(np.abs(covs.mean(0) - np.eye(dim)) < 4.5 * standard_error)
    assert np.all(np.abs(means.mean(0)) < 4.5 / np.sqrt(seeds))
    assert np.all(np.abs(covs.var(0) * df - (1 + np.eye(dim))) < 0.35 * (1 + np.eye(dim)))


@pytest.mark.parametrize("dim,nu,seed", [(1, 0.5, 0), (4, 5.0, 2), (100, 500.0, 3)])
def test_target_draw_is_scipys_wishart_draw_bit_for_bit(dim, nu, seed):
    """The Bartlett draw replaces scipy.stats.wishart (whose import cost each command ~1 s of CPU):
    the same seed gives the same target as before, to the last bit."""
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(dim)
    expected = np.atleast_2d(st.wishart(df=dim + nu, scale=np.eye(dim) / (dim + nu)).rvs(random_state=rng))
    model = target(dim=dim, nu=nu, seed=seed)
    assert np.array_equal(model.mean, mean) and np.array_equal(model.cov, expected)


def test_building_the_target_does_not_import_scipy_stats():
    code = ("import sys; from mcsa_bench.builtin.models.gaussian import GaussianTarget; GaussianTarget(5); "
            "print('scipy.stats' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_same_seed_same_target_and_different_seed_different_target():
    assert np.array_equal(target(seed=7).cov, target(seed=7).cov)
    assert not np.array_equal(target(seed=7).cov, target(seed=8).cov)


def independent_kl(m0, s0, m1, s1):
    inv1 = np.linalg.inv(s1)
    return 0.5 * (np.trace(inv1 @ s0) + (m1 - m0) @ inv1 @ (m1 - m0) - len(m0)
                  + np.linalg.slogdet(s1)[1] - np.linalg.slogdet(s0)[1])


def test_exact_kl_metrics():
    model = target()
    family = MeanFieldGaussian(4)
    params = np.random.default_rng(3).normal(size=8)
    mean, cov = family.moments(params).gaussian_moments()
    metrics = model.evaluate(Approximation(family, params), np.random.default_rng(0))
    assert metrics["kl_inclusive"] == pytest.approx(independent_kl(model.mean, model.cov, mean, cov), rel=1e-10)
    assert metrics["kl_exclusive"] == pytest.approx(independent_kl(mean, cov, model.mean, model.cov), rel=1e-10)
    assert gaussian_kl(model.mean, model.cov, model.mean, model.cov) == pytest.approx(0.0, abs=1e-12)
    # Monte Carlo check of KL(π‖q) = E_π[log π - log q] with exact draws from π
    z = model.sample(np.random.default_rng(4), 200_000)
    terms = model.log_joint(z) - family.log_prob(params, z)
    assert abs(terms.mean() - metrics["kl_inclusive"]) < 4.5 * terms.std() / np.sqrt(len(z))


class OpaqueGaussian(MeanFieldGaussian):
    """A family that does not reveal it is Gaussian: the model must fall back to Monte Carlo."""

    def moments(self, params):
        return None


def test_monte_carlo_kl_for_families_without_closed_form():
    """A Gaussian q through the Monte Carlo path: KL(π‖q) and KL(q‖π) with their standard errors sd/√M, against
    the closed forms (a Gaussian q logs no standard errors) over 100 seeds
    (tests.support.assert_monte_carlo_estimates)."""
    model = target()
    params = np.random.default_rng(3).normal(size=8)
    exact = model.evaluate(Approximation(MeanFieldGaussian(4), params), np.random.default_rng(0))
    assert set(exact) == {"kl_inclusive", "kl_exclusive"}
    opaque = Approximation(OpaqueGaussian(4), params)
    estimates = [model.evaluate(opaque, np.random.default_rng(seed)) for seed in range(100)]
    assert set(estimates[0]) == set(model.metric_specs())
    assert_monte_carlo_estimates(estimates, exact)


def test_artifacts_hold_the_target_moments():
    model = target()
    saved = model.artifacts()["target"]
    assert np.array_equal(saved["mean"], model.mean) and np.array_equal(saved["cov"], model.cov)


@pytest.mark.parametrize("params,match", [({"nu": -1.0}, "nu must be > -1"), ({"dim": 0}, "dim must be >= 1")])
def test_bad_parameters(params, match):
    with pytest.raises(ConfigurationError, match=match):
        target(**params)
