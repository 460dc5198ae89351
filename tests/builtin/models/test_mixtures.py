"""The Gaussian and Student-t mixtures (docs/models.md): densities against scipy.stats, gradients against
finite differences, normalization by quadrature, exact draws against the exact moments and the uniform
component weights, mode assignment, and FAB's table of means drawn again with JAX."""

import math

import numpy as np
import pytest
import scipy.stats as st
from scipy import integrate
from scipy.special import logsumexp

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.mixtures import FAB_UNIT_LOCATIONS
from mcsa_bench.testing import assert_conforms
from tests.support import assert_gradient_matches

SETTINGS = [("gaussian_mixture", {}), ("gaussian_mixture", {"num_modes": 5, "dim": 7, "seed": 3, "scale": 0.7}),
            ("student_t_mixture", {"num_modes": 4, "dim": 6}), ("student_t_mixture", {"dim": 3, "df": 5.0})]


def build(name, params):
    return get_registry().build("model", name, **params)


def scipy_log_density(model, z):
    if model.__class__.__name__ == "GaussianMixture":
        per_component = [st.multivariate_normal(mean, model.scale**2 * np.eye(model.dim)).logpdf(z)
                         for mean in model.locations]
    else:
        per_component = [st.t(model.df, loc, model.scale).logpdf(z).sum(axis=1) for loc in model.locations]
    return logsumexp(np.stack(per_component, axis=1), axis=1) - math.log(model.num_modes)


@pytest.mark.parametrize("name,params", SETTINGS)
def test_log_joint_is_scipys_mixture_density_and_the_gradient_its_derivative(name, params):
    model = build(name, params)
    rng = np.random.default_rng(0)
    z = np.concatenate([model.sample(rng, 4), model.locations[:1] + rng.standard_normal((2, model.dim))])
    np.testing.assert_allclose(model.log_joint(z), np.atleast_1d(scipy_log_density(model, z)), rtol=1e-10)
    assert_gradient_matches(model.log_joint_and_grad, z)


@pytest.mark.parametrize("name,params", SETTINGS)
def test_the_mixtures_conform(name, params):
    assert_conforms("model", name, params)


@pytest.mark.parametrize("name,params", [("gaussian_mixture", {"num_modes": 3, "dim": 1, "loc_scaling": 5.0}),
                                         ("student_t_mixture", {"num_modes": 3, "dim": 1, "df": 2.0})])
def test_the_density_is_normalized(name, params):
    """log Z = 0 (log_normalizer), by adaptive quadrature of exp(log_joint) over the line."""
    model = build(name, params)
    density = lambda x: float(np.exp(model.log_joint(np.array([[x]]))[0]))  # noqa: E731
    points = sorted(model.locations[:, 0])
    total = sum(integrate.quad(density, a, b, limit=400, epsabs=0, epsrel=1e-12)[0]
                for a, b in zip([-np.inf, *points], [*points, np.inf]))
    assert model.log_normalizer() == 0.0
    assert abs(math.log(total)) < 1e-9


def test_the_two_dimensional_default_is_normalized():
    model = build("gaussian_mixture", {})
    # the rectangle rule on a Gaussian of sd 1 errs by ~exp(-2π²/h²) (Poisson summation): nothing at h = 0.25
    step = 0.25
    axis = np.arange(-50.0, 50.0 + step / 2, step)
    grid = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    assert abs(np.exp(model.log_joint(grid)).sum() * step**2 - 1.0) < 1e-9


@pytest.mark.parametrize("name,params", [("gaussian_mixture", {}), ("gaussian_mixture", {"num_modes": 6, "dim": 4}),
                                         ("student_t_mixture", {"num_modes": 5, "dim": 3, "df": 5.0})])
def test_exact_draws_have_the_exact_moments_and_equal_component_shares(name, params):
    model = build(name, params)
    n = 40_000
    z = model.sample(np.random.default_rng(1), n)
    mean, cov = model.moments()
    reference = model.reference()
    np.testing.assert_array_equal(reference.mean, mean)
    np.testing.assert_allclose(reference.sd, np.sqrt(np.diag(cov)))
    assert np.all(np.abs(z.mean(axis=0) - mean) < 4.5 * np.sqrt(np.diag(cov) / n))
    sample_var = z.var(axis=0)
    kurtosis_scale = np.sqrt(np.mean((z - mean) ** 4, axis=0) - np.diag(cov) ** 2)  # sd of (z − μ)² per draw
    assert np.all(np.abs(sample_var - np.diag(cov)) < 4.5 * kurtosis_scale / np.sqrt(n))
    counts = np.bincount(model.assign_modes(z), minlength=model.num_modes)
    assert st.chisquare(counts).pvalue > 1e-3  # equal weights (almost every draw lands in its own component)


def test_assign_modes_finds_the_component_a_draw_came_from():
    model = build("gaussian_mixture", {})
    rng = np.random.default_rng(2)
    component = rng.integers(model.num_modes, size=2000)
    z = model.locations[component] + model.scale * rng.standard_normal((2000, 2))
    agree = np.mean(model.assign_modes(z) == component)
    assert agree > 0.95, agree  # 97.3 % over 2e5 draws: FAB's nearest means are 1.8 sd apart, their draws cross


def test_a_student_t_mixture_without_variance_has_no_moment_reference():
    model = build("student_t_mixture", {"num_modes": 3, "dim": 2, "df": 2.0})
    assert model.reference() is None and model.sample(np.random.default_rng(0), 5).shape == (5, 2)


def test_the_default_is_fabs_mixture():
    model = build("gaussian_mixture", {})
    assert (model.num_modes, model.dim, model.scale) == (40, 2, 1.0)
    np.testing.assert_array_equal(model.locations, 40.0 * FAB_UNIT_LOCATIONS)
    other = build("gaussian_mixture", {"seed": 1})
    assert not np.array_equal(other.locations, model.locations)
    assert np.all(np.abs(other.locations) <= 40.0)


def test_fabs_unit_locations_are_jaxs_draw():
    jax = pytest.importorskip("jax")
    previous = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", False)  # the RNG of the JAX releases both papers used
    try:
        drawn = jax.random.uniform(jax.random.PRNGKey(0), (40, 2), dtype="float32", minval=-1.0, maxval=1.0)
        np.testing.assert_allclose(np.asarray(drawn, dtype=float), FAB_UNIT_LOCATIONS, rtol=0, atol=1e-9)
    finally:
        jax.config.update("jax_threefry_partitionable", previous)


@pytest.mark.parametrize("params", [{"num_modes": 0}, {"dim": 0}, {"scale": -1.0}, {"loc_scaling": 0.0}])
def test_bad_settings_are_refused(params):
    with pytest.raises(ConfigurationError):
        build("gaussian_mixture", params)
    with pytest.raises(ConfigurationError):
        build("student_t_mixture", {"df": 0.0})
