"""Gaussian-process models (mcsa_bench.builtin.models.gp)."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
from scipy import integrate, linalg, stats
from scipy.spatial.distance import cdist
from scipy.special import expit

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation, ConfigurationError
from mcsa_bench.builtin.models.gp import (
    JITTER,
    GPClassification,
    GPRegression,
    batched_cholesky,
    batched_solve_lower,
    cholesky_adjoint,
    gp_covariance,
    logistic_normal_log_probs,
    student_t_normal_log_density,
)
from mcsa_bench.datasets import load_supervised
from tests.support import (
    EPS,
    assert_every_scheme_runs,
    assert_gradient_matches,
    assert_standardized,
    assert_within,
    cholesky_rounding_bound,
)

CASES = {  # data set -> (model class, D = n_train + d + 2 (classification) or + 4 (regression))
    "sonar": (GPClassification, 249),
    "ionosphere": (GPClassification, 351),
    "breast": (GPClassification, 544),
    "boston": (GPRegression, 472),
    "concrete": (GPRegression, 939),
}
_MODELS: dict[str, GPClassification | GPRegression] = {}


def model_for(dataset: str):
    """One model per data set for the whole module (building them is cheap, but not free)."""
    if dataset not in _MODELS:
        _MODELS[dataset] = CASES[dataset][0](dataset)
    return _MODELS[dataset]


def random_latents(model, rows: int, seed: int, scale: float = 0.5) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, size=(rows, model.dim))


def matern_covariance(x, amp, noise, ell):
    """K = amp² Matérn-5/2(r) + (noise² + δ) I with r the ℓ-scaled Euclidean distance (scipy cdist)."""
    r = cdist(x / ell, x / ell)
    return amp**2 * (1 + math.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-math.sqrt(5) * r) + (noise**2 + JITTER) * np.eye(
        len(x)
    )


def gaussian_q(model, seed: int, scale: float = 0.3) -> Approximation:
    family = get_registry().build("family", "meanfield_gaussian", dim=model.dim)
    return Approximation(family, np.random.default_rng(seed).normal(0.0, scale, size=family.num_params))


def scipy_log_joint(model, z: np.ndarray) -> float:
    """log p(x, z) of one unconstrained z, term by term with scipy.stats (docs/methods.md §6)."""
    n, d = model.num_train, model.num_features
    u, h = z[:n], z[n:]
    amp, noise, ell = np.exp(h[0]), np.exp(h[1]), np.exp(h[2 : 2 + d])
    f = linalg.cholesky(matern_covariance(model.data.x_train, amp, noise, ell), lower=True) @ u
    total = stats.norm.logpdf(u).sum()
    y = model.data.y_train
    if isinstance(model, GPClassification):
        total += stats.norm.logpdf(h).sum()
        total += stats.bernoulli.logpmf(y, expit(f)).sum()
    else:
        sigma_y, nu = np.exp(h[-2]), np.exp(h[-1])
        total += stats.norm.logpdf(h[:2], 0.0, 4.0).sum() + stats.norm.logpdf(h[2 : 2 + d], 0.0, 0.2).sum()
        total += stats.norm.logpdf(h[-2], 0.0, 4.0)
        total += stats.gamma.logpdf(nu, a=4.0, scale=10.0) + h[-1]  # + log-Jacobian of ν = exp(log ν)
        total += stats.t.logpdf(y, nu, loc=f, scale=sigma_y).sum()
    return total


def log_joint_rounding_bound(model, z: np.ndarray) -> np.ndarray:
    """First-order bound, in nats, on the rounding error of the log joint at each row of z, for any
    order of its operations: f = L u with L = chol(K) is off by at most ‖δL‖ ‖u‖, ‖δL‖ ≤ n·eps·κ(A) ‖L‖
    (cholesky_rounding_bound), which the likelihood turns into ‖∇_f log p(y | f)‖ times that; the
    sums over the n rows add n·eps·|log p|. Where K is nearly singular (long length-scales, a large
    amplitude over the noise: κ(A) = 1.2e3 at sonar's extreme row) this is far above 1e-12 relative."""
    n, d = model.num_train, model.num_features
    bounds = []
    for row in z:
        u, h = row[:n], row[n:]
        covariance = matern_covariance(model.data.x_train, np.exp(h[0]), np.exp(h[1]), np.exp(h[2 : 2 + d]))
        chol = np.linalg.cholesky(covariance)
        _, grad_f, _ = model._log_likelihood((chol @ u)[None], h[None, 2 + d :])
        f_error = cholesky_rounding_bound(covariance) * np.linalg.norm(chol, 2) * np.linalg.norm(u)
        bounds.append(np.linalg.norm(grad_f) * f_error + n * EPS * abs(float(model.log_joint(row[None])[0])))
    return np.array(bounds)


def previous_log_joint_and_grad(model, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The implementation before the speed-up, as the reference: the kernel on all n² pairs, the full
    covariance, numpy's batched Cholesky, and ∂/∂log a through K − (b² + δ) I."""
    n, d, x = model.num_train, model.num_features, model.data.x_train
    u, h = z[:, :n], z[:, n:]
    sqdiff = ((x[:, None, :] - x[None, :, :]) ** 2).reshape(-1, d)
    weights = 5.0 * np.exp(-2.0 * h[:, 2 : 2 + d])
    s2 = (weights @ sqdiff.T).reshape(-1, n, n)
    decay = np.exp(-np.sqrt(s2))
    p = (1.0 + np.sqrt(s2)) * decay
    amp2, noise2 = np.exp(2.0 * h[:, 0]), np.exp(2.0 * h[:, 1])
    k = amp2[:, None, None] * (p + s2 / 3.0 * decay) + (noise2 + JITTER)[:, None, None] * np.eye(n)
    chol = np.linalg.cholesky(k)
    log_lik, grad_f, grad_lik = model._log_likelihood((chol @ u[..., None])[..., 0], h[:, 2 + d :])
    log_prior, grad_prior = model._log_prior(h)
    value = log_lik + log_prior - 0.5 * np.sum(u * u, axis=1) - 0.5 * n * math.log(2.0 * math.pi)
    lt_g = (grad_f[:, None, :] @ chol)[:, 0]
    kbar = cholesky_adjoint(chol, lt_g[:, :, None] * u[:, None, :])
    trace = np.trace(kbar, axis1=1, axis2=2)
    grad = np.empty_like(z)
    grad[:, :n] = lt_g - u
    grad[:, n] = 2.0 * (np.einsum("bij,bij->b", kbar, k) - (noise2 + JITTER) * trace)
    grad[:, n + 1] = 2.0 * noise2 * trace
    grad[:, n + 2 : n + 2 + d] = (amp2 / 3.0)[:, None] * weights * ((kbar * p).reshape(len(z), -1) @ sqdiff)
    grad[:, n + 2 + d :] = grad_lik
    grad[:, n:] += grad_prior
    return value, grad


# --------------------------------------------------------------------------------------------
# Shared numerics
# --------------------------------------------------------------------------------------------


def test_matern_covariance_matches_independent_formula():
    model = model_for("sonar")
    d = model.num_features
    h = np.random.default_rng(0).normal(0.0, 0.7, size=(3, 2 + d))
    k, offdiag, _, _ = gp_covariance(model._pairs, h[:, 0], h[:, 1], h[:, 2:])
    rows, cols = np.tril_indices(model.num_train, -1)
    for row, lower, pairs in zip(h, k, offdiag):
        reference = matern_covariance(model.data.x_train, np.exp(row[0]), np.exp(row[1]), np.exp(row[2:]))
        np.testing.assert_allclose(lower, np.tril(reference), rtol=1e-12, atol=1e-14)  # the upper triangle is zero
        np.testing.assert_allclose(pairs, reference[rows, cols], rtol=1e-12, atol=1e-14)


def test_cholesky_adjoint_matches_finite_differences():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 6, 6))
    k = a @ a.transpose(0, 2, 1) + 6 * np.eye(6)
    weights = rng.standard_normal((2, 6, 6))  # F(K) = Σ weights ∘ chol(K), so L̄ = weights

    def objective(matrix):
        return np.sum(weights * np.tril(np.linalg.cholesky(matrix)), axis=(1, 2))

    chol = np.linalg.cholesky(k)
    kbar = cholesky_adjoint(chol, chol.transpose(0, 2, 1) @ np.tril(weights))
    np.testing.assert_allclose(kbar, kbar.transpose(0, 2, 1), atol=1e-14)
    for _ in range(5):
        e = rng.standard_normal((2, 6, 6))
        e = e + e.transpose(0, 2, 1)  # covariances move symmetrically
        step = 1e-6
        numeric = (objective(k + step * e) - objective(k - step * e)) / (2 * step)
        np.testing.assert_allclose(np.sum(kbar * e, axis=(1, 2)), numeric, rtol=1e-7, atol=1e-9)


def test_batched_cholesky_flags_failed_rows_only():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 5, 5))
    k = a @ a.transpose(0, 2, 1) + np.eye(5)
    k[1] = -np.eye(5)  # not positive definite: the batched call raises
    k[3, 0, 0] = np.nan  # NaN does not raise in LAPACK but must be caught
    chol, ok = batched_cholesky(k.copy())
    np.testing.assert_array_equal(ok, [True, False, True, False])
    for b in (0, 2):
        np.testing.assert_allclose(chol[b], np.linalg.cholesky(k[b]), rtol=1e-14)
    assert np.isfinite(chol).all()


@pytest.mark.parametrize("y, mean, var, nu, scale", [
    (0.3, 0.0, 1.0, 40.0, 0.05),  # a Student-t much narrower than the Gaussian
    (1.0, 0.5, 0.3, 4.0, 0.3),
    (5.0, 0.0, 0.01, 3.0, 0.1),  # an outlier explained by the heavy tail
    (0.0, 0.0, 1e-6, 1.0, 1.0),
])
def test_student_t_normal_density_matches_adaptive_quadrature(y, mean, var, nu, scale):
    def integrand(f):
        return np.exp(stats.t.logpdf(y, nu, loc=f, scale=scale) + stats.norm.logpdf(f, mean, math.sqrt(var)))

    lo, hi = mean - 40 * math.sqrt(var), mean + 40 * math.sqrt(var)  # the Gaussian has the lighter tails
    points = [y] if lo < y < hi else None  # where the Student-t peaks
    reference = integrate.quad(integrand, lo, hi, points=points, epsabs=0, epsrel=1e-12, limit=500)[0]
    value = student_t_normal_log_density(np.array([y]), np.array([mean]), np.array([var]), nu, scale)
    assert value[0] == pytest.approx(math.log(reference), abs=1e-8)


@pytest.mark.parametrize("mean, var", [(0.0, 1.0), (2.0, 0.3), (-3.0, 4.0), (0.5, 1e-6)])
def test_logistic_normal_probabilities_match_quadrature(mean, var):
    sd = math.sqrt(var)
    reference = integrate.quad(
        lambda f: expit(f) * stats.norm.pdf(f, mean, sd), mean - 12 * sd, mean + 12 * sd, epsabs=1e-13
    )[0]
    one, zero = logistic_normal_log_probs(np.array([mean]), np.array([var]))
    assert math.exp(one[0]) == pytest.approx(reference, rel=1e-7)
    assert math.exp(one[0]) + math.exp(zero[0]) == pytest.approx(1.0, rel=1e-12)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", list(CASES))
def test_dimension_and_latent_names(dataset):
    model = model_for(dataset)
    names = model.latent_names()
    n, d = model.num_train, model.num_features
    assert (
        model.dim
        == CASES[dataset][1]
        == len(names)
        == n + d + (2 if dataset in ("sonar", "ionosphere", "breast") else 4)
    )
    assert names[0] == "u[0]" and names[n - 1] == f"u[{n - 1}]" and names[n + 2] == "log_ell[0]"
    if isinstance(model, GPClassification):
        assert names[n : n + 2] == ["log_alpha", "log_sigma"] and names[-1] == f"log_ell[{d - 1}]"
    else:
        assert names[n : n + 2] == ["log_sigma_f", "log_epsilon"] and names[-2:] == ["log_sigma_y", "log_nu"]


@pytest.mark.parametrize("dataset", list(CASES))
def test_log_joint_matches_scipy_and_rows(dataset):
    model = model_for(dataset)
    z = random_latents(model, 3, seed=3)
    value, bound = model.log_joint(z), log_joint_rounding_bound(model, z)
    assert_within(value, [scipy_log_joint(model, row) for row in z], bound)
    rows = np.concatenate([model.log_joint(row[None]) for row in z])  # a batch of one: gemv where B rows take gemm
    assert_within(value, rows, bound)
    np.testing.assert_array_equal(model.log_joint_and_grad(z)[0], value)


@pytest.mark.parametrize("dataset", list(CASES))
def test_gradient_matches_finite_differences(dataset):
    model = model_for(dataset)
    z = random_latents(model, 2, seed=4)
    # All coordinates, along random directions ...
    assert_gradient_matches(model.log_joint_and_grad, z, n_directions=3, rtol=1e-5, atol=1e-5)
    # ... and along random directions of the hyperparameters alone, which would hide among the n u's.
    n = model.num_train

    def hyper_value_and_grad(h):
        value, grad = model.log_joint_and_grad(np.concatenate([z[:, :n], h], axis=1))
        return value, grad[:, n:]

    assert_gradient_matches(hyper_value_and_grad, z[:, n:], n_directions=5, rtol=1e-5, atol=1e-5, seed=1)


@pytest.mark.parametrize("dataset", ["sonar", "boston"])
def test_log_joint_and_gradient_equal_the_previous_implementation(dataset):
    model = model_for(dataset)
    n = model.num_train
    z = random_latents(model, 5, seed=9)
    z[0, n:] += 3.0  # large amplitude and length-scales
    z[1, n + 2 :] -= 3.0  # short length-scales: nearly uncorrelated points
    z[2, n + 1] = 4.0  # noise far above the amplitude
    z[3, n] = -4.0  # amplitude far below the noise
    value, grad = model.log_joint_and_grad(z)
    reference_value, reference_grad = previous_log_joint_and_grad(model, z)
    assert_within(value, reference_value, log_joint_rounding_bound(model, z))
    # Relative to each row's gradient scale. Where b² ≫ a², ∂/∂log a is O(1) while the previous
    # 2 (Σ K̄∘K − (b² + δ) tr K̄) cancelled terms of the size of ∂/∂log b (~10³): there they differ
    # by ~10⁻¹¹ absolute, the previous formula's rounding error.
    error = np.abs(grad - reference_grad) / np.abs(reference_grad).max(axis=1, keepdims=True)
    assert error.max() < 1e-12, error.max()


@pytest.mark.parametrize("dataset", ["sonar", "boston"])
def test_extreme_hyperparameters_give_minus_inf_rows_without_breaking_the_batch(dataset):
    model = model_for(dataset)
    n = model.num_train
    z = random_latents(model, 4, seed=5)
    z[1, n] = 400.0  # a² overflows: an infinite covariance
    z[2, n + 2 :] = -800.0  # 1/ℓ² overflows: NaN covariance (and likelihood parameters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the model handles these rows without numpy warnings
        value, grad = model.log_joint_and_grad(z)
    assert np.isneginf(value[1:3]).all() and np.isfinite(value[[0, 3]]).all()
    assert np.isfinite(grad).all() and not grad[1:3].any()
    assert_within(value[[0, 3]], model.log_joint(z[[0, 3]]), log_joint_rounding_bound(model, z[[0, 3]]))


def test_reused_work_arrays_leave_results_alone():
    model = GPClassification("sonar")
    n = model.num_train
    z = random_latents(model, 3, seed=11)
    value, grad = model.log_joint_and_grad(z)
    kept = value.copy(), grad.copy()
    failing = z.copy()
    failing[1, n] = 400.0  # a failed factorization leaves L = I in the reused buffer
    model.log_joint(failing)
    model.log_joint(z[:2])  # another shape
    np.testing.assert_array_equal(value, kept[0])
    np.testing.assert_array_equal(grad, kept[1])
    again = model.log_joint_and_grad(z)
    np.testing.assert_array_equal(again[0], kept[0])
    np.testing.assert_array_equal(again[1], kept[1])


@pytest.mark.parametrize("model_class, dataset", [(GPClassification, "sonar"), (GPRegression, "boston")])
def test_split_is_reproducible_disjoint_and_standardized_on_training_rows(model_class, dataset):
    first, again, other = (model_class(dataset, split_seed=s).data for s in (3, 3, 4))
    np.testing.assert_array_equal(first.test_index, again.test_index)
    np.testing.assert_array_equal(first.x_train, again.x_train)
    assert np.intersect1d(first.train_index, first.test_index).size == 0
    assert not np.array_equal(first.test_index, other.test_index)
    task = "regression" if model_class is GPRegression else "classification"
    raw = load_supervised(dataset, task=task, test_fraction=0.0, standardize_features=False).x_train
    assert_standardized(first.x_train, raw[first.train_index])
    assert np.abs(first.x_test.mean(axis=0)).max() > 0.05  # test rows do not enter the statistics
    if model_class is GPRegression:
        assert first.y_train.mean() == pytest.approx(0.0, abs=1e-12) and first.y_train.std() == pytest.approx(1.0)
        assert abs(first.y_test.mean()) > 1e-3


def test_classification_evaluate_matches_direct_computation():
    model = GPClassification("sonar")
    model.predictive_draws = 4
    q = gaussian_q(model, seed=6)
    metrics = model.evaluate(q, np.random.default_rng(7))

    z = q.sample(np.random.default_rng(7), 4)  # the same draws
    n = model.num_train
    x, x_test, y = model.data.x_train, model.data.x_test, model.data.y_test
    likelihoods = []  # p(y*_i | z_s), by the GP conditional and adaptive quadrature
    for row in z:
        amp, noise, ell = np.exp(row[n]), np.exp(row[n + 1]), np.exp(row[n + 2 :])
        k = matern_covariance(x, amp, noise, ell)
        r = cdist(x / ell, x_test / ell)
        cross = amp**2 * (1 + math.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-math.sqrt(5) * r)
        f = linalg.cholesky(k, lower=True) @ row[:n]
        mean = cross.T @ linalg.solve(k, f, assume_a="pos")
        var = amp**2 + noise**2 + JITTER - np.sum(cross * linalg.solve(k, cross, assume_a="pos"), axis=0)
        p_one = [integrate.quad(lambda t: expit(t) * stats.norm.pdf(t, m, math.sqrt(v)), m - 12 * math.sqrt(v),
                                m + 12 * math.sqrt(v), epsabs=1e-13)[0] for m, v in zip(mean, var)]
        likelihoods.append(np.where(y == 1.0, p_one, 1.0 - np.array(p_one)))
    likelihoods = np.array(likelihoods)
    assert metrics["test_lpd"] == pytest.approx(np.mean(np.log(likelihoods.mean(axis=0))), rel=1e-6)
    p_mean = np.where(y == 1.0, likelihoods, 1.0 - likelihoods).mean(axis=0)
    assert metrics["test_accuracy"] == pytest.approx(np.mean((p_mean >= 0.5) == (y == 1.0)))


def test_regression_evaluate_matches_direct_computation():
    model = model_for("boston")
    q = gaussian_q(model, seed=8)
    metrics = model.evaluate(q, np.random.default_rng(0))

    n, d = model.num_train, model.num_features
    mean_z, std_z = q.family.mean_std(q.params)
    h = mean_z[n:]  # hyperparameters at the mode of q
    amp, noise, ell, sigma_y, nu = np.exp(h[0]), np.exp(h[1]), np.exp(h[2 : 2 + d]), np.exp(h[-2]), np.exp(h[-1])
    x, x_test = model.data.x_train, model.data.x_test
    r = cdist(x / ell, x_test / ell)
    cross = amp**2 * (1 + math.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-math.sqrt(5) * r)
    chol = linalg.cholesky(matern_covariance(x, amp, noise, ell), lower=True)
    a = linalg.solve_triangular(chol, cross, lower=True)  # f* = aᵀ u + independent GP noise
    mean = a.T @ mean_z[:n]
    var = amp**2 + noise**2 + JITTER - np.sum(a**2, axis=0) + np.sum((a * std_z[:n, None]) ** 2, axis=0)
    densities = [
        integrate.quad(
            lambda f: stats.t.pdf(y_i, nu, loc=f, scale=sigma_y) * stats.norm.pdf(f, m, math.sqrt(v)),
            m - 12 * math.sqrt(v),
            m + 12 * math.sqrt(v),
            points=[y_i],
            epsabs=0,
            epsrel=1e-11,
            limit=200,
        )[0]
        for y_i, m, v in zip(model.data.y_test, mean, var)
    ]
    y_std = model.data.y_scale.std
    assert metrics["test_lpd"] == pytest.approx(np.mean(np.log(densities)) - math.log(y_std), rel=1e-8)
    # RMSE on the original scale, from un-standardized predictions and targets
    y_true = model.data.y_test * y_std + model.data.y_scale.mean
    assert metrics["test_rmse"] == pytest.approx(
        np.sqrt(np.mean((mean * y_std + model.data.y_scale.mean - y_true) ** 2)), rel=1e-10
    )


def test_regression_evaluate_without_gaussian_moments_uses_draws():
    class NoMoments(type(gaussian_q(model_for("boston"), 0).family)):
        def moments(self, params):
            return None

    model = model_for("boston")
    q = gaussian_q(model, seed=9)
    exact = model.evaluate(q, np.random.default_rng(0))
    family = NoMoments(model.dim)
    approximate = model.evaluate(Approximation(family, q.params), np.random.default_rng(0))
    assert approximate["test_lpd"] == pytest.approx(exact["test_lpd"], abs=0.05)
    assert approximate["test_rmse"] == pytest.approx(exact["test_rmse"], rel=0.05)
    assert approximate["test_lpd"] != exact["test_lpd"]


def test_predictive_draws_follow_the_cost_budget():
    assert [model_for(name).predictive_draws for name in ("sonar", "ionosphere", "breast")] == [1000, 475, 128]


def test_no_test_rows_no_metrics():
    for model in (GPClassification("sonar", test_fraction=0.0), GPRegression("boston", test_fraction=0.0)):
        assert model.evaluate(gaussian_q(model, seed=0), np.random.default_rng(0)) == {}


@pytest.mark.parametrize("model_class, kwargs, message", [
    (GPClassification, {"dataset": "nope"}, "available"),
    (GPClassification, {"dataset": "boston"}, "0/1"),
    (GPRegression, {"test_fraction": 1.0}, "[0, 1)"),
    (GPRegression, {"split_seed": -1}, "non-negative integer"),
])
def test_bad_arguments_raise_configuration_errors(model_class, kwargs, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        model_class(**kwargs)


@pytest.mark.parametrize("dataset", list(CASES))
def test_every_scheme_runs(dataset):
    # a 60-row slice: what is under test is that every scheme runs, not the GP's cost at full size
    model = CASES[dataset][0](dataset, max_rows=60)
    assert model.num_train == 54
    results = assert_every_scheme_runs(model, n_iters=50)
    assert {"test_lpd"} <= set(results["pmcsa"].history[-1])


@pytest.mark.parametrize("transpose", [False, True])
def test_batched_solve_lower_is_scipys_triangular_solve(transpose):
    rng = np.random.default_rng(3)
    chol = np.tril(rng.standard_normal((4, 9, 9))) + 3 * np.eye(9)
    rhs = rng.standard_normal((4, 9, 5))
    expected = linalg.solve_triangular(chol, rhs, lower=True, trans="T" if transpose else "N")
    np.testing.assert_allclose(batched_solve_lower(chol, rhs, transpose), expected, rtol=1e-13, atol=0)
    assert not np.allclose(batched_solve_lower(chol, rhs, not transpose), expected)
