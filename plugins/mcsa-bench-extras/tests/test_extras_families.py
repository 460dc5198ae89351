"""The mean-field Laplace family: density, entropy and moments against scipy.stats, and
conformance (normalization, sampling, score, reparameterization and ∇_z log q by finite differences)."""

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench.api import ConfigurationError
from mcsa_bench.testing import assert_conforms
from mcsa_bench_extras.families import MeanFieldLaplace


def test_log_prob_entropy_and_moments_match_scipy():
    family = MeanFieldLaplace(3, init_mean=0.5, init_scale=2.0)
    params = family.init_params() + np.array([0.1, -0.2, 0.3, 0.2, -0.4, 0.1])
    moments = family.moments(params)
    mu, b = moments.location, moments.scale
    z = np.random.default_rng(0).normal(size=(6, 3)) * 3
    np.testing.assert_allclose(family.log_prob(params, z), st.laplace(mu, b).logpdf(z).sum(axis=1), rtol=1e-12)
    assert family.entropy(params) == pytest.approx(st.laplace(mu, b).entropy().sum(), rel=1e-12)
    np.testing.assert_allclose(moments.sd, st.laplace(mu, b).std(), rtol=1e-15)
    np.testing.assert_array_equal(moments.mean, mu)
    np.testing.assert_allclose(family.moments(family.init_params()).scale, 2.0)


def test_inverse_cdf_reparameterization_is_the_laplace_quantile():
    family = MeanFieldLaplace(2)
    params = np.array([1.0, -1.0, 0.3, -0.5])
    mu, b = family.moments(params).location, family.moments(params).scale
    eps = np.array([[0.1, 0.5], [0.75, 0.999]])
    np.testing.assert_allclose(family.reparameterize(params, eps), st.laplace(mu, b).ppf(eps), rtol=1e-12)
    noise = family.base_noise(np.random.default_rng(1), 10_000)
    assert noise.min() > 0 and noise.max() < 1


def test_laplace_conforms():
    assert_conforms("family", "meanfield_laplace", {"init_scale": 0.7})


def test_bad_scale_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="init_scale must be positive"):
        MeanFieldLaplace(2, init_scale=0.0)
