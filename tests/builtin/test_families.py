"""Variational families: densities against scipy.stats, scores and reparameterization against
finite differences, sample moments against the parameters, per-λ quantities prepared once."""

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.assembly import assemble
from mcsa_bench.builtin.families import MeanFieldGaussian
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
    mean, std = family.moments(params).mean, family.moments(params).sd
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
    mean, std = family.moments(params).mean, family.moments(params).sd
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
    mean, std = family.moments(params).mean, family.moments(params).sd
    # standard errors of the sample mean and of the sample variance of a Gaussian
    assert np.all(np.abs(z.mean(axis=0) - mean) < 4.5 * std / np.sqrt(n))
    assert np.all(np.abs(z.var(axis=0) - std**2) < 4.5 * np.sqrt(2.0 / n) * std**2)


def test_init_params_give_the_requested_start():
    family = get_registry().build("family", "meanfield_gaussian", dim=3, init_mean=0.5, init_std=2.0)
    summary = family.moments(family.init_params()).summary()
    assert set(summary) == {"mean", "std"}
    np.testing.assert_allclose(summary["mean"], 0.5)
    np.testing.assert_allclose(summary["std"], 2.0)
    mean, cov = family.moments(family.init_params()).gaussian_moments()
    np.testing.assert_allclose(cov, 4.0 * np.eye(3))


def test_bad_family_parameters_are_clear_errors():
    with pytest.raises(ConfigurationError, match="softplus, exp"):
        get_registry().build("family", "meanfield_gaussian", dim=3, scale="square")
    with pytest.raises(ConfigurationError, match="init_std"):
        get_registry().build("family", "meanfield_gaussian", dim=3, init_std=0.0)


# --- every family: scores and reparameterization against finite differences ---------------

FAMILY_CASES = {
    "meanfield_gaussian": {},
    "meanfield_gaussian_exp": {"scale": "exp"},
    "fullrank_gaussian": {},  # the default form, fan_in
    "fullrank_gaussian_exp": {"scale": "exp"},
    "fullrank_gaussian_relative": {"offdiagonal": "relative"},
    "fullrank_gaussian_relative_exp": {"offdiagonal": "relative", "scale": "exp"},
    "fullrank_gaussian_absolute": {"offdiagonal": "absolute"},
    "fullrank_gaussian_absolute_exp": {"offdiagonal": "absolute", "scale": "exp"},
    "meanfield_student_t": {"df": 4.0},
    "meanfield_student_t_learned_df": {"df": 3.0, "learn_df": True},
    "meanfield_student_t_learned_df_exp": {"df": 7.0, "learn_df": True, "scale": "exp"},
}


def build_family(case, dim=DIM):
    name = next(n for n in ("meanfield_gaussian", "fullrank_gaussian", "meanfield_student_t") if case.startswith(n))
    return get_registry().build("family", name, dim=dim, **FAMILY_CASES[case])


@pytest.fixture(params=list(FAMILY_CASES))
def any_family(request):
    family = build_family(request.param)
    params = family.init_params() + np.random.default_rng(11).normal(scale=0.4, size=family.num_params)
    return family, params


def test_score_of_every_family_equals_finite_differences(any_family):
    family, params = any_family
    z = family.sample(params, np.random.default_rng(4), 6) * 1.5
    numeric = central_differences(lambda p: family.log_prob(p[0], z)[None, :], params[None, :])[0].T
    np.testing.assert_allclose(family.score(params, z), numeric, rtol=1e-6, atol=1e-7)


def test_grad_log_prob_of_every_family_equals_finite_differences(any_family):
    family, params = any_family
    z = family.sample(params, np.random.default_rng(5), 6)
    numeric = central_differences(lambda x: family.log_prob(params, x), z)
    np.testing.assert_allclose(family.grad_log_prob(params, z), numeric, rtol=1e-6, atol=1e-7)


def test_sample_with_log_prob_of_every_family_agrees_with_log_prob(any_family):
    family, params = any_family
    z, log_q = family.sample_with_log_prob(params, np.random.default_rng(3), 7)
    assert z.shape == (7, DIM)
    np.testing.assert_allclose(log_q, family.log_prob(params, z), rtol=1e-12)


def test_prepared_parameters_give_the_same_results_as_raw_ones(any_family):
    family, params = any_family
    prepared = family.prepare(params)
    assert family.prepare(prepared) is prepared
    z = family.sample(params, np.random.default_rng(8), 5)
    for method in (family.log_prob, family.score, family.grad_log_prob):
        np.testing.assert_array_equal(method(prepared, z), method(params, z))
    np.testing.assert_array_equal(family.sample(prepared, np.random.default_rng(1), 3),
                                  family.sample(params, np.random.default_rng(1), 3))
    assert family.entropy(prepared) == family.entropy(params)


@pytest.mark.parametrize("case", [c for c in FAMILY_CASES if "student" not in c])
def test_gaussian_marginal_moments_equal_those_of_the_covariance(case):
    """The families' own marginal (μ, sd) against √diag of the covariance of gaussian_moments(): bit
    for bit for the mean-field σ (√(σ²) = σ, at scales over 20 decades), to 1e-12 for L's row norms."""
    family = build_family(case, dim=300)
    rng = np.random.default_rng(13)
    params = family.init_params() + rng.normal(scale=0.4, size=family.num_params)
    if case.startswith("meanfield"):
        params[family.dim:] = rng.uniform(-23.0, 23.0, size=family.dim)  # ψ: σ over 20 decades
    moments = family.moments(params)
    mean, sd = moments.mean, moments.sd
    default_mean, cov = moments.gaussian_moments()
    default_sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_equal(mean, default_mean)
    if case.startswith("meanfield"):
        np.testing.assert_array_equal(sd, default_sd)
    else:
        np.testing.assert_allclose(sd, default_sd, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", [c for c in FAMILY_CASES if "learned" not in c])
def test_reparameterization_vjp_of_every_family_equals_finite_differences(case):
    family = build_family(case)
    params = family.init_params() + np.random.default_rng(12).normal(scale=0.4, size=family.num_params)
    rng = np.random.default_rng(6)
    eps = family.base_noise(rng, 3)
    cotangent = rng.normal(size=eps.shape)
    vjp = family.reparameterize_vjp(params, eps, cotangent)
    for b in range(3):
        numeric = central_differences(
            lambda p: family.reparameterize(p[0], eps[b : b + 1]) @ cotangent[b], params[None, :]
        )[0]
        np.testing.assert_allclose(vjp[b], numeric, rtol=1e-6, atol=1e-8)
    # and the reparameterized noise is a draw from q: same law as sample (checked on its log density)
    z = family.reparameterize(params, eps)
    np.testing.assert_allclose(family.log_prob(params, z), family.log_prob(family.prepare(params), z))


def test_approximation_prepares_the_family_once_per_parameter_vector():
    from mcsa_bench.api import Approximation

    family = get_registry().build("family", "meanfield_gaussian", dim=DIM)
    calls = []
    forward = family._scale.forward
    family._scale.forward = lambda psi: calls.append(1) or forward(psi)
    q = Approximation(family, family.init_params())
    rng = np.random.default_rng(0)
    z, _ = q.sample_with_log_prob(rng, 4)
    q.log_prob(z), q.score(z), q.sample(rng, 2)
    assert len(calls) == 1  # σ(ψ) computed once for the four calls
    family.log_prob(q.params, z)
    assert len(calls) == 2  # the raw λ is still accepted, and prepared on the spot


# --- full-rank Gaussian ---------------------------------------------------------------------


@pytest.fixture(params=[("softplus", "relative"), ("exp", "relative"), ("softplus", "fan_in"), ("softplus", "absolute"),
                        ("exp", "absolute")])
def fullrank(request):
    scale, offdiagonal = request.param
    family = get_registry().build("family", "fullrank_gaussian", dim=DIM, scale=scale, offdiagonal=offdiagonal)
    params = family.init_params() + np.random.default_rng(21).normal(scale=0.5, size=family.num_params)
    return family, params


def test_fullrank_parameter_layout_is_mean_then_the_lower_triangle_row_major():
    family = get_registry().build("family", "fullrank_gaussian", dim=3, scale="exp", offdiagonal="absolute")
    assert family.num_params == 3 + 6
    params = np.array([1.0, 2.0, 3.0, np.log(2.0), 0.5, np.log(3.0), -0.25, 0.75, np.log(4.0)])
    mean, cov = family.moments(params).gaussian_moments()
    chol = np.array([[2.0, 0.0, 0.0], [0.5, 3.0, 0.0], [-0.25, 0.75, 4.0]])
    np.testing.assert_allclose(mean, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(cov, chol @ chol.T, rtol=1e-14)
    np.testing.assert_allclose(family.moments(params).summary()["scale_tril"], chol, rtol=1e-14)
    started = get_registry().build("family", "fullrank_gaussian", dim=3, init_mean=0.5, init_std=2.0)
    mean, cov = started.moments(started.init_params()).gaussian_moments()
    np.testing.assert_allclose(mean, 0.5)
    np.testing.assert_allclose(cov, 4.0 * np.eye(3))


def test_fan_in_stores_each_relative_multiplier_times_the_square_root_of_its_rows_fan_in():
    """Row i of L has i entries left of the diagonal: fan_in stores θ_ij = √i m_ij where relative
    stores m_ij, so the same θ·(1/√i) gives the same q, and both forms moment-match to the same q."""
    relative, fan_in = (get_registry().build("family", "fullrank_gaussian", dim=4, offdiagonal=form)
                        for form in ("relative", "fan_in"))
    params = relative.init_params() + np.random.default_rng(5).normal(scale=0.5, size=relative.num_params)
    stored = params.copy()
    rows, cols = np.tril_indices(4)
    below = rows != cols
    stored[4:][below] *= np.sqrt(rows[below])
    np.testing.assert_allclose(
        fan_in.moments(stored).gaussian_moments()[1], relative.moments(params).gaussian_moments()[1], rtol=1e-14
    )
    np.testing.assert_allclose(fan_in.moment_matched(*relative.moments(params).gaussian_moments()), stored, rtol=1e-12)


def test_fullrank_log_prob_and_entropy_match_scipy(fullrank):
    family, params = fullrank
    mean, cov = family.moments(params).gaussian_moments()
    z = np.random.default_rng(2).normal(size=(6, DIM))
    reference = st.multivariate_normal(mean, cov)
    np.testing.assert_allclose(family.log_prob(params, z), reference.logpdf(z), rtol=1e-10)
    np.testing.assert_allclose(family.entropy(params), reference.entropy(), rtol=1e-12)
    np.testing.assert_allclose(family.moments(params).summary()["std"], np.sqrt(np.diag(cov)), rtol=1e-12)


def test_fullrank_sample_moments_match_parameters(fullrank):
    family, params = fullrank
    n = 100_000
    mean, cov = family.moments(params).gaussian_moments()
    z = family.sample(params, np.random.default_rng(7), n)
    std = np.sqrt(np.diag(cov))
    assert np.all(np.abs(z.mean(axis=0) - mean) < 4.5 * std / np.sqrt(n))
    # Var[(z_i - m_i)(z_j - m_j)] = Σ_ii Σ_jj + Σ_ij² for a Gaussian
    standard_error = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(np.cov(z.T) - cov) < 4.5 * standard_error)


# --- mean-field Student-t --------------------------------------------------------------------


@pytest.fixture(params=[False, True], ids=["fixed_df", "learned_df"])
def student_t(request):
    family = get_registry().build("family", "meanfield_student_t", dim=DIM, df=5.0, learn_df=request.param)
    rng = np.random.default_rng(31)
    blocks = [rng.normal(size=DIM), rng.normal(scale=0.5, size=DIM)]
    if request.param:
        blocks.append(family.init_params()[2 * DIM :] + rng.normal(scale=0.5, size=DIM))
    return family, np.concatenate(blocks)


def student_t_marginals(family, params):
    """(ν, μ, σ) per coordinate: the degrees of freedom of the prepared λ, the location and scale of
    the family's moments."""
    moments = family.moments(params)
    return family.prepare(params).df, moments.location, moments.scale


def test_student_t_log_prob_entropy_and_moments_match_scipy(student_t):
    family, params = student_t
    df, loc, scale = student_t_marginals(family, params)
    reference = st.t(df, loc, scale)
    z = np.random.default_rng(2).normal(size=(6, DIM)) * 3
    np.testing.assert_allclose(family.log_prob(params, z), reference.logpdf(z).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(family.entropy(params), reference.entropy().sum(), rtol=1e-12)
    moments = family.moments(params)
    assert moments.gaussian_moments() is None and set(moments.summary()) == {"mean", "std", "location", "scale", "df"}
    np.testing.assert_array_equal(moments.summary()["df"], np.broadcast_to(df, (DIM,)))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(moments.mean, reference.mean(), rtol=1e-14)  # NaN where ν <= 1
        np.testing.assert_allclose(moments.sd, reference.std(), rtol=1e-13)  # inf where ν <= 2


def test_student_t_samples_follow_the_t_distribution(student_t):
    family, params = student_t
    df, loc, scale = student_t_marginals(family, params)
    n = 50_000
    z = family.sample(params, np.random.default_rng(9), n)
    critical = 1.95 / np.sqrt(n)  # Kolmogorov-Smirnov at level 0.001
    for d in range(DIM):
        assert st.kstest(z[:, d], st.t(df[d], loc[d], scale[d]).cdf).statistic < critical, d
    # the test detects the wrong law: a Gaussian with the same location and scale (negative control)
    assert st.kstest(z[:, 0], st.norm(loc[0], scale[0]).cdf).statistic > critical
    finite_variance = df > 2
    sd = scale * np.sqrt(df / np.maximum(df - 2, 1e-9))
    error = np.abs(z.mean(axis=0) - loc)
    assert np.all(error[finite_variance] < 4.5 * sd[finite_variance] / np.sqrt(n))


def test_student_t_with_learned_df_is_not_reparameterizable():
    family = get_registry().build("family", "meanfield_student_t", dim=2, learn_df=True)
    with pytest.raises(ConfigurationError, match="learn_df=true is not reparameterizable.*learn_df=false"):
        family.base_noise(np.random.default_rng(0), 3)
    with pytest.raises(ConfigurationError, match="not reparameterizable"):
        family.reparameterize(family.init_params(), np.zeros((1, 2)))


def test_student_t_parameters_and_start():
    family = get_registry().build(
        "family", "meanfield_student_t", dim=3, df=4.0, learn_df=True, init_std=2.0, init_mean=1.0
    )
    assert family.num_params == 9
    df, loc, scale = student_t_marginals(family, family.init_params())
    np.testing.assert_allclose(loc, 1.0)
    np.testing.assert_allclose(scale, 2.0)
    np.testing.assert_allclose(df, 4.0)
    with pytest.raises(ConfigurationError, match="df .* must be positive"):
        get_registry().build("family", "meanfield_student_t", dim=3, df=0.0)
    with pytest.raises(ConfigurationError, match="softplus, exp"):
        get_registry().build("family", "fullrank_gaussian", dim=3, scale="square")


def test_a_family_that_defines_a_method_moments_replaced_is_told_so():
    with pytest.warns(FutureWarning, match=r"Old defines gaussian_moments, location_scale, which mcsa-bench no longer "
                                           r"calls: describe q's marginals with moments\(\)"):
        class Old(MeanFieldGaussian):
            def gaussian_moments(self, params):
                return None

            def location_scale(self, params):
                return None


def test_student_t_serves_kernels_that_centre_and_scale_with_qs_marginals():
    # location and scale come from moments(): a defensive mixture and HMC's diagonal mass accept it
    for kernel in (("imh", {"defensive": 0.1}), ("hmc", {"mass": "diagonal"})):
        parts = assemble(get_registry(), model=("gaussian", {"dim": 2}), family="meanfield_student_t",
                         estimator="pmcsa", kernel=kernel, n_samples=4)
        assert parts.kernel.model_incompatibility(parts.model, parts.family) is None
