"""FAB's many-well target (docs/models.md): the density, its gradient, log Z by quadrature against FAB's
value and a two-dimensional integral, the exact moments, and the rejection sampler against the exact
distribution of a well (Kolmogorov–Smirnov)."""

import math

import numpy as np
import pytest
import scipy.stats as st
from scipy import integrate

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.many_well import well_log_density
from mcsa_bench.testing import assert_conforms
from tests.support import assert_gradient_matches


def build(dim=32):
    return get_registry().build("model", "many_well", dim=dim)


def test_log_joint_is_the_sum_of_the_double_well_energies():
    model = build(6)
    z = np.random.default_rng(0).normal(size=(5, 6)) * 1.5
    x, y = z[:, 0::2], z[:, 1::2]
    energy = (-0.5 * x - 6.0 * x**2 + x**4).sum(axis=1) + 0.5 * (y**2).sum(axis=1)
    np.testing.assert_allclose(model.log_joint(z), -energy, rtol=1e-12)
    assert_gradient_matches(model.log_joint_and_grad, z)
    assert model.latent_names()[:3] == ["x[0]", "y[0]", "x[1]"]


def test_many_well_conforms():
    assert_conforms("model", "many_well", {"dim": 32})


def test_log_z_is_fabs_and_adaptive_quadratures():
    model = build()
    well = integrate.quad(lambda x: math.exp(well_log_density(x)), -np.inf, np.inf, epsabs=0, epsrel=1e-13,
                          limit=200)[0]
    assert model.log_z_x == pytest.approx(math.log(well), abs=1e-12)
    assert math.exp(model.log_z_x) == pytest.approx(11784.50927, rel=1e-9)  # FAB's value, to its 10 digits
    assert model.log_normalizer() == pytest.approx(16 * (math.log(well) + 0.5 * math.log(2 * math.pi)), rel=1e-13)


def test_log_z_of_one_pair_is_its_two_dimensional_integral():
    model = build(2)
    shift = model.log_z_x  # integrate exp(log p − log Z_x) to keep the numbers near 1
    total = integrate.dblquad(lambda y, x: math.exp(model.log_joint(np.array([[x, y]]))[0] - shift),
                              -7, 7, -12, 12, epsabs=0, epsrel=1e-11)[0]
    assert math.log(total) + shift == pytest.approx(model.log_normalizer(), abs=1e-9)


def well_cdf(model):
    """The x marginal's CDF by adaptive quadrature (independent of the model's grid)."""
    def cdf(x):
        return integrate.quad(lambda t: math.exp(well_log_density(t) - model.log_z_x), -np.inf, x,
                              epsabs=1e-13, limit=200)[0]
    return np.vectorize(cdf)


def test_the_rejection_sampler_draws_the_exact_well():
    model = build()
    x = model.sample_wells(np.random.default_rng(0), 20_000)
    grid = np.linspace(-3, 3, 61)
    empirical = np.searchsorted(np.sort(x), grid) / x.size
    distance = np.max(np.abs(empirical - well_cdf(model)(grid)))
    assert distance < 1.63 / math.sqrt(x.size)  # the KS statistic's 1 % point: the sampler passes at 1 %


def test_the_ks_check_catches_a_wrong_well():
    """The same check on draws of the envelope alone (no rejection) fails: it can fail."""
    model = build()
    rng = np.random.default_rng(0)
    side = rng.random(20_000) < model._envelope_weights[1]
    x = np.where(side, 1.7, -1.7) + 0.5 * rng.standard_normal(20_000)
    grid = np.linspace(-3, 3, 61)
    distance = np.max(np.abs(np.searchsorted(np.sort(x), grid) / x.size - well_cdf(model)(grid)))
    assert distance > 1.63 / math.sqrt(x.size)


def test_exact_draws_have_the_exact_moments():
    model = build(4)
    z = model.sample(np.random.default_rng(1), 50_000)
    reference = model.reference()
    sd = reference.sd
    assert np.all(np.abs(z.mean(axis=0) - reference.mean) < 4.5 * sd / math.sqrt(z.shape[0]))
    np.testing.assert_allclose(z.std(axis=0), sd, rtol=0.02)
    x_moments = integrate.quad(lambda t: t * math.exp(well_log_density(t) - model.log_z_x), -np.inf, np.inf)[0]
    assert reference.mean[0] == pytest.approx(x_moments, abs=1e-10)
    assert st.pearsonr(z[:, 0], z[:, 2]).pvalue > 1e-3  # the wells are independent


@pytest.mark.parametrize("dim", [0, 3])
def test_an_odd_or_empty_dimension_is_refused(dim):
    with pytest.raises(ConfigurationError, match="even dim"):
        build(dim)
