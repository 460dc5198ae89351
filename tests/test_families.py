"""Variational families: densities against scipy.stats, scores and reparameterization against
finite differences, sample moments against the parameters."""

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from tests.support import central_differences

DIM = 4


@pytest.fixture(params=["softplus", "exp"])
def family(request):
    return get_registry().build("family", "meanfield_gaussian", dim=DIM, scale=request.param)


@pytest.fixture
def params(family):
    rng = np.random.default_rng(1)
    return np.concatenate([rng.normal(size=DIM), rng.normal(scale=0.5, size=DIM)])


def test_log_prob_and_entropy_match_scipy(family, params):
    mean, std = family.summary(params)["mean"], family.summary(params)["std"]
    z = np.random.default_rng(2).normal(size=(6, DIM))
    expected = st.norm(mean, std).logpdf(z).sum(axis=1)
    np.testing.assert_allclose(family.log_prob(params, z), expected, rtol=1e-12)
    np.testing.assert_allclose(family.entropy(params), st.norm(mean, std).entropy().sum(), rtol=1e-12)


def test_sample_with_log_prob_agrees_with_log_prob(family, params):
    z, log_q = family.sample_with_log_prob(params, np.random.default_rng(3), 5)
    np.testing.assert_allclose(log_q, family.log_prob(params, z), rtol=1e-12)


def test_score_equals_finite_differences_of_log_prob(family, params):
    z = np.random.default_rng(4).normal(size=(5, DIM)) * 2
    analytic = family.score(params, z)
    numeric = central_differences(lambda p: family.log_prob(p[0], z)[None, :], params[None, :])[0].T
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_grad_log_prob_in_z_equals_finite_differences(family, params):
    z = np.random.default_rng(5).normal(size=(5, DIM))
    np.testing.assert_allclose(
        family.grad_log_prob(params, z),
        central_differences(lambda x: family.log_prob(params, x), z),
        rtol=1e-6, atol=1e-8,
    )


def test_reparameterization_and_its_vjp(family, params):
    rng = np.random.default_rng(6)
    eps = family.base_noise(rng, 3)
    z = family.reparameterize(params, eps)
    mean, std = family.summary(params)["mean"], family.summary(params)["std"]
    np.testing.assert_allclose(z, mean + std * eps)
    cotangent = rng.normal(size=z.shape)
    # d/dλ <v_b, T(ε_b; λ)> by finite differences, one row at a time
    for b in range(3):
        numeric = central_differences(
            lambda p: family.reparameterize(p[0], eps[b : b + 1]) @ cotangent[b], params[None, :]
        )[0]
        np.testing.assert_allclose(family.reparameterize_vjp(params, eps, cotangent)[b], numeric, rtol=1e-6, atol=1e-8)


def test_sample_moments_match_parameters(family, params):
    n = 200_000
    z = family.sample(params, np.random.default_rng(7), n)
    mean, std = family.summary(params)["mean"], family.summary(params)["std"]
    # standard errors of the sample mean and of the sample variance of a Gaussian
    assert np.all(np.abs(z.mean(axis=0) - mean) < 4.5 * std / np.sqrt(n))
    assert np.all(np.abs(z.var(axis=0) - std**2) < 4.5 * np.sqrt(2.0 / n) * std**2)


def test_init_params_give_the_requested_start():
    family = get_registry().build("family", "meanfield_gaussian", dim=3, init_mean=0.5, init_std=2.0)
    summary = family.summary(family.init_params())
    np.testing.assert_allclose(summary["mean"], 0.5)
    np.testing.assert_allclose(summary["std"], 2.0)
    mean, cov = family.gaussian_moments(family.init_params())
    np.testing.assert_allclose(cov, 4.0 * np.eye(3))


def test_bad_family_parameters_are_clear_errors():
    with pytest.raises(ConfigurationError, match="softplus, exp"):
        get_registry().build("family", "meanfield_gaussian", dim=3, scale="square")
    with pytest.raises(ConfigurationError, match="init_std"):
        get_registry().build("family", "meanfield_gaussian", dim=3, init_std=0.0)
