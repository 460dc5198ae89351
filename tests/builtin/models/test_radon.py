"""Radon hierarchical regression (mcsa_bench.builtin.models.radon)."""

from __future__ import annotations

import csv
import functools
import math

import numpy as np
import pytest
from scipy import stats

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.radon import Radon
from mcsa_bench.datasets import dataset_path
from tests.support import assert_every_scheme_runs, assert_gradient_matches, cholesky_rounding_bound, run_scheme


def scipy_log_joint(path, z: np.ndarray, num_counties: int) -> float:
    """log p(x, z) of one unconstrained z, term by term with scipy.stats, reading the CSV itself."""
    k = num_counties
    a1, a2 = z[:k], z[k : 2 * k]
    mu_a1, mu_a2 = z[2 * k], z[2 * k + 1]
    sigma_a1, sigma_a2, sigma_y = np.exp(z[2 * k + 2 :])
    total = 0.0
    for sigma in (sigma_a1, sigma_a2, sigma_y):  # Gamma(1, rate 0.02) plus the log-Jacobian of exp
        total += stats.gamma.logpdf(sigma, a=1.0, scale=1 / 0.02) + np.log(sigma)
    total += stats.norm.logpdf(mu_a1) + stats.norm.logpdf(mu_a2)
    for c in range(k):
        total += stats.norm.logpdf(a1[c], mu_a1, sigma_a1) + stats.norm.logpdf(a2[c], mu_a2, sigma_a2)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            c = int(row["county"]) - 1
            floor = 1.0 - float(row["basement"])
            total += stats.norm.logpdf(float(row["log_radon"]), a1[c] + a2[c] * floor, sigma_y)
    return total


@pytest.fixture(scope="module")
def model():
    return Radon()


@functools.cache
def exact_posterior(model: Radon) -> tuple[np.ndarray, np.ndarray]:
    """The model's exact posterior, computed once per module (it takes seconds)."""
    return model.exact_posterior()


def test_dimension_and_latent_layout(model):
    names = model.latent_names()
    assert model.dim == 175 == len(names)
    assert names[:2] == ["a1[0]", "a1[1]"] and names[85] == "a2[0]"
    assert names[-5:] == ["mu_a1", "mu_a2", "log_sigma_a1", "log_sigma_a2", "log_sigma_y"]


def test_log_joint_matches_scipy_and_rows(model):
    rng = np.random.default_rng(11)
    z = np.concatenate([rng.normal(1.0, 0.5, (2, 170)), rng.normal(0.0, 0.5, (2, 5))], axis=1)
    value = model.log_joint(z)
    expected = [scipy_log_joint(dataset_path("radon"), row, 85) for row in z]
    np.testing.assert_allclose(value, expected, rtol=1e-10)
    rows = np.concatenate([model.log_joint(row[None]) for row in z])
    np.testing.assert_allclose(value, rows, rtol=1e-12)


def test_gradient_matches_finite_differences(model):
    z = np.random.default_rng(12).normal(0.0, 0.7, size=(3, model.dim))
    assert_gradient_matches(model.log_joint_and_grad, z, rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------- non-centred parameterization


@pytest.fixture(scope="module")
def noncentred():
    return Radon(parameterization="noncentred")


def scipy_noncentred_log_joint(path, z: np.ndarray, num_counties: int) -> float:
    """log p of the standardized effects η: the centred joint at a_j = μ_j + σ_aj η_j times the
    Jacobian |∂a/∂η| = σ_a1^K σ_a2^K."""
    k = num_counties
    centred = z.copy()
    centred[:k] = z[2 * k] + np.exp(z[2 * k + 2]) * z[:k]
    centred[k : 2 * k] = z[2 * k + 1] + np.exp(z[2 * k + 3]) * z[k : 2 * k]
    return scipy_log_joint(path, centred, k) + k * (z[2 * k + 2] + z[2 * k + 3])


def test_noncentred_log_joint_matches_scipy(noncentred):
    rng = np.random.default_rng(21)
    z = np.concatenate([rng.normal(0.0, 1.0, (2, 170)), rng.normal(0.0, 0.5, (2, 5))], axis=1)
    expected = [scipy_noncentred_log_joint(dataset_path("radon"), row, 85) for row in z]
    np.testing.assert_allclose(noncentred.log_joint(z), expected, rtol=1e-10)
    names = noncentred.latent_names()
    assert names[0] == "eta1[0]" and names[85] == "eta2[0]" and names[-3:] == ["log_sigma_a1", "log_sigma_a2",
                                                                               "log_sigma_y"]


def test_noncentred_gradient_matches_finite_differences(noncentred):
    z = np.random.default_rng(22).normal(0.0, 0.7, size=(3, noncentred.dim))
    assert_gradient_matches(noncentred.log_joint_and_grad, z, rtol=1e-5, atol=1e-4)


def test_noncentred_log_joint_is_minus_infinity_where_a_scale_overflows(noncentred):
    """Far out (log σ_a2 = 2,500, where HMC with too large a step lands) σ_a2 overflows and a_2c = μ_2 + σ_a2 η_2c
    is not a number; the density there is 0 (the Gamma prior's −0.02 σ), so the log joint is −∞, not NaN."""
    z = np.zeros((2, noncentred.dim))
    z[0, -4] = 2500.0
    value, grad = noncentred.log_joint_and_grad(z)
    assert value[0] == -np.inf and np.isfinite(value[1]) and np.all(np.isfinite(grad))
    assert noncentred.log_joint(z)[0] == -np.inf


def test_both_parameterizations_have_the_same_evidence(model, noncentred):
    """log Z is the posterior's, not its coordinates': with the Jacobian in the log joint, the
    non-centred log p(y, z) integrates to the same evidence (the scales' quadrature is shared)."""
    assert noncentred.exact_log_evidence() == model.exact_log_evidence()


def test_unknown_parameterization_is_one_clear_error():
    with pytest.raises(ConfigurationError, match="parameterization must be one of centred, noncentred, got 'nc'"):
        Radon(parameterization="nc")


def test_user_csv_with_an_empty_county(tmp_path):
    path = tmp_path / "houses.csv"
    path.write_text("county,log_radon,basement,extra\n1,0.5,1,x\n1,1.5,0,y\n3,-0.2,1,z\n")
    model = Radon(str(path))
    assert model.num_counties == 3 and model.dim == 11  # county 2 has no rows: prior only
    z = np.random.default_rng(13).normal(0.0, 0.8, size=(2, model.dim))
    np.testing.assert_allclose(model.log_joint(z), [scipy_log_joint(path, row, 3) for row in z], rtol=1e-10)
    assert_gradient_matches(model.log_joint_and_grad, z)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "log_radon, basement, county"),  # pima: none of the columns
        ("log_radon,basement,county\n1.0,2,1\n", "0/1"),
        ("log_radon,basement,county\n1.0,1,1.5\n", "integer labels"),
        ("log_radon,basement,county\n1.0,1,0\n", "integer labels"),
    ],
)
def test_bad_data_raise_configuration_errors(tmp_path, content, message):
    dataset = "pima"
    if content is not None:
        dataset = str(tmp_path / "bad.csv")
        (tmp_path / "bad.csv").write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        Radon(dataset)


def test_every_scheme_runs(model):
    assert_every_scheme_runs(model)


def test_pmcsa_log_z_lies_below_the_exact_evidence(model):
    """The importance-sampling log Z is biased low (E[Ẑ] = Z, so E[log Ẑ] ≤ log Z by Jensen, and
    heavy-tailed weights make the gap large). Measured at T = 3000, seeds 0-2: −1125.7, −1130.1,
    −1128.1 (k̂ 2.5-2.9) against the exact −1105.56: 20-25 nats below."""
    final = run_scheme(model, "pmcsa", n_iters=3000, seed=0).history[-1]
    assert set(final) >= {"log_z", "log_z_khat"}
    exact = model.exact_log_evidence()
    assert exact - 30.0 < final["log_z"] < exact


# ---------------------------------------------------------------------------------- exact evidence


def dense_conditional(model: Radon, log_sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, precision) of θ = (a1, a2, μ_a1, μ_a2) given y and σ, as a Bayesian linear regression
    written out densely: θ's prior precision from Σ_c (a_jc − μ_j)²/σ_j² + μ_j², and y = Bθ + σ_y ε."""
    k, n = model.num_counties, model.y.size
    var_a1, var_a2, var_y = np.exp(2.0 * log_sigma)
    prior_precision = np.zeros((2 * k + 2, 2 * k + 2))
    for j, var in enumerate((var_a1, var_a2)):
        block = slice(j * k, (j + 1) * k)
        prior_precision[block, block] = np.eye(k) / var
        prior_precision[block, 2 * k + j] = prior_precision[2 * k + j, block] = -1.0 / var
        prior_precision[2 * k + j, 2 * k + j] = 1.0 + k / var
    design = np.zeros((n, 2 * k + 2))
    design[np.arange(n), model.county] = 1.0
    design[np.arange(n), k + model.county] = model.x
    precision = prior_precision + design.T @ design / var_y
    return np.linalg.solve(precision, design.T @ model.y / var_y), precision


def gaussian_log_density(theta: np.ndarray, mean: np.ndarray, precision: np.ndarray) -> float:
    u = theta - mean
    return float(0.5 * np.linalg.slogdet(precision)[1] - 0.5 * u @ precision @ u - 0.5 * len(u) * math.log(2 * math.pi))


@pytest.mark.parametrize("log_sigma", [(-1.2, -1.5, -0.29), (-9.0, 0.5, -0.1), (3.0, -7.0, 1.0)])
def test_evidence_given_scales_is_the_log_joint_with_the_effects_integrated_out(model, log_sigma, tmp_path):
    """For every θ, log p(y, θ, log σ) − log p(θ | y, σ) = log p(y, log σ): the closed form (county
    sums, Woodbury, μ in closed form) against the model's own log joint and a dense Gaussian
    conditional, at the mode's scales and far in the tails (σ_a1 = 1.2e-4; σ_a1 = 20 with σ_a2 = 9e-4), on the
    shipped data and on a file with a county without rows."""
    log_sigma = np.array(log_sigma)
    empty_county = tmp_path / "houses.csv"
    empty_county.write_text("county,log_radon,basement\n1,0.5,1\n1,1.5,0\n3,-0.2,1\n3,0.4,0\n")
    for data in (model, Radon(str(empty_county))):
        mean, precision = dense_conditional(data, log_sigma)
        expected = []
        noise = np.random.default_rng(14).standard_normal((2, mean.size))
        for theta in mean + np.linalg.solve(np.linalg.cholesky(precision).T, noise.T).T:  # draws of p(θ | y, σ)
            z = np.concatenate([theta, log_sigma])[None]
            expected.append(float(data.log_joint(z)[0]) - gaussian_log_density(theta, mean, precision))
        # the dense reference's log det and solve, in nats: at σ_a1 = 1.2e-4 κ(A) is 1.2e8 (κ(P) 6e9):
        # 4.5e-6, where two BLAS builds measured 5e-8 and 1.6e-7; at the mode's scales κ(A) = 73 gives
        # 3e-12, where the difference was 2e-13
        tolerance = cholesky_rounding_bound(precision)
        assert expected[0] == pytest.approx(expected[1], abs=tolerance)  # the identity holds for any θ
        assert float(data.log_evidence_given_scales(log_sigma)) == pytest.approx(expected[0], abs=tolerance)


def test_exact_log_evidence_agrees_with_importance_sampling_over_the_scales(model):
    """The 3-D quadrature against an independent integration of the same integrand: importance
    sampling over log σ from a multivariate Student-t with 3 degrees of freedom at twice the
    Laplace scale (its polynomial tails bound the weights of the integrand's exponential lower
    tails), 2^17 draws. Measured (seeds 15-17): relative standard error 0.53 %, estimates 0.2, 1.4
    and 0.2 standard errors from the quadrature; the bound is 4. The grid itself: step 0.15 and
    the default 0.2 agree to 4e-8. (A one-off check with no shared code: on a 6-row file, scipy's
    nquad over σ of the dense N(y; 0, Σ(σ)) density, 12 million evaluations, agreed to 2e-6.)"""
    from scipy.optimize import minimize

    def log_f(s: np.ndarray) -> float:
        return float(model.log_evidence_given_scales(s))

    exact = model.exact_log_evidence()
    mode = minimize(lambda s: -log_f(s), np.zeros(3), method="Nelder-Mead",
                    options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000}).x
    h, axes = 1e-3, np.eye(3)
    curvature = np.array([[(log_f(mode + h * (a - b)) + log_f(mode - h * (a - b)) - log_f(mode + h * (a + b))
                            - log_f(mode - h * (a + b))) / (4 * h * h) for b in axes] for a in axes])
    proposal = stats.multivariate_t(mode, 4.0 * np.linalg.inv(curvature), df=3, seed=15)
    draws = proposal.rvs(2**17)
    log_f_draws = np.concatenate([model.log_evidence_given_scales(chunk) for chunk in np.split(draws, 32)])  # in cache
    log_w = log_f_draws - proposal.logpdf(draws)
    w = np.exp(log_w - log_w.max())
    estimate = math.log(w.mean()) + log_w.max()
    relative_se = w.std() / w.mean() / math.sqrt(w.size)
    assert relative_se < 0.01
    assert abs(estimate - exact) < 4 * relative_se, (estimate, exact, relative_se)
    assert exact == pytest.approx(-1105.5614, abs=1e-4)
    assert model.exact_log_evidence(step=0.15) == pytest.approx(exact, abs=1e-6)  # the grid has converged


# --------------------------------------------------------------------------- exact posterior moments


@pytest.mark.parametrize("log_sigma", [(-1.2, -1.9, -0.28), (-3.0, 0.5, -0.1)])
def test_conditional_given_scales_is_the_dense_gaussian(model, noncentred, log_sigma, tmp_path):
    """The arrow-shaped elimination of exact_posterior against the dense conditional Gaussian of
    (a1, a2, μ) given σ (precision inverted whole), and in η = (a − μ)/σ_a by the linear map,
    at the posterior's typical scales and away from them, on the shipped data and on a file with
    a county without rows."""
    empty_county = tmp_path / "houses.csv"
    empty_county.write_text("county,log_radon,basement\n1,0.5,1\n1,1.5,0\n3,-0.2,1\n3,0.4,0\n")
    pairs = [(model, noncentred),
             (Radon(str(empty_county)), Radon(str(empty_county), parameterization="noncentred"))]
    for centred_model, noncentred_model in pairs:
        k = centred_model.num_counties
        dense_mean, precision = dense_conditional(centred_model, np.array(log_sigma))
        dense_cov = np.linalg.inv(precision)
        to_eta = np.eye(2 * k + 2)  # η_jc = (a_jc − μ_j)/σ_aj
        for j in range(2):
            block = slice(j * k, (j + 1) * k)
            to_eta[block, 2 * k + j] = -1.0
            to_eta[block] /= math.exp(log_sigma[j])
        for data, linear in ((centred_model, np.eye(2 * k + 2)), (noncentred_model, to_eta)):
            mean, var, cov12, factor, mu_cov = data._conditional_given_scales(np.array([log_sigma]))
            cov = factor[0] @ mu_cov[0] @ factor[0].T
            cov[np.arange(2 * k), np.arange(2 * k)] += var[0]
            cov[np.arange(k), np.arange(k, 2 * k)] += cov12[0]
            cov[np.arange(k, 2 * k), np.arange(k)] += cov12[0]
            expected = linear @ dense_cov @ linear.T
            np.testing.assert_allclose(mean[0], linear @ dense_mean, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(cov, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max())


def test_exact_posterior_of_the_scales_is_exact_scale_moments(model):
    """The three log σ of the full exact posterior are the scales' own quadrature moments (up to the
    grid points of weight < 1e-15 it leaves out), and the covariance is a covariance (symmetric,
    positive definite)."""
    mean, cov = exact_posterior(model)
    scale_mean, scale_sd = model.exact_scale_moments()
    np.testing.assert_allclose(mean[-3:], scale_mean, rtol=1e-10)
    np.testing.assert_allclose(np.sqrt(np.diag(cov))[-3:], scale_sd, rtol=1e-9)
    np.testing.assert_array_equal(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() > 0


@pytest.mark.slow
def test_exact_posterior_has_converged_in_its_grid(model):
    """Step 0.15 against the default 0.2: means agree to 1e-7 and covariances to 1e-6 (measured:
    3e-8 and 1e-7); the trapezoid rule on this smooth, decayed integrand converges geometrically."""
    mean, cov = exact_posterior(model)
    finer_mean, finer_cov = model.exact_posterior(step=0.15)
    assert np.max(np.abs(finer_mean - mean)) < 1e-7
    assert np.max(np.abs(finer_cov - cov)) < 1e-6
