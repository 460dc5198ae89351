"""The accuracy metrics against a reference (mcsa_bench.references.accuracy): the standardized mean and
sd errors, the excess inclusive KL exact for Gaussian families and by Monte Carlo for the Student-t,
the likelihood fit of a family to draws."""

from __future__ import annotations

import numpy as np
import pytest

from mcsa_bench.api import Approximation
from mcsa_bench.builtin.families import FullRankGaussian
from mcsa_bench.builtin.models.gaussian import GaussianTarget, gaussian_kl
from mcsa_bench.plugins import get_registry
from mcsa_bench.references.accuracy import (
    MARGINAL_METRICS,
    MOMENT_DRAWS,
    ReferenceScore,
    fit_family,
    marginal_metrics,
    monte_carlo_marginal_metrics,
)
from tests.support import assert_monte_carlo_estimates

#: independent seeds of the Monte Carlo estimates' check (tests.support.assert_monte_carlo_estimates)
SEEDS = 100


def _gaussian_setup(family_name: str, dim: int = 6, **family_options):
    target = GaussianTarget(dim=dim, nu=2.0, seed=3)
    family = get_registry().build("family", family_name, dim=dim, **family_options)
    return target, family, ReferenceScore(target.reference(), family)


def test_mean_and_sd_errors_are_the_standardized_differences():
    target, family, score = _gaussian_setup("meanfield_gaussian")
    mean, sd = target.mean + 0.3 * target.std, target.std * np.exp(np.linspace(-0.5, 0.2, target.dim))
    q = Approximation(family, family.moment_matched(mean, np.diag(sd**2)))
    metrics = score(q, np.random.default_rng(0))
    assert metrics["ref_mean_error_max"] == pytest.approx(0.3) and metrics["ref_mean_error_rms"] == pytest.approx(0.3)
    assert metrics["ref_log_sd_ratio_max"] == pytest.approx(0.5)
    assert metrics["ref_log_sd_ratio_rms"] == pytest.approx(np.sqrt(np.mean(np.linspace(-0.5, 0.2, target.dim) ** 2)))


def test_without_closed_form_moments_the_marginal_metrics_are_monte_carlo_estimates_with_standard_errors():
    """A full-rank Gaussian q through the Monte Carlo path (its draws, as for a flow): against the closed form,
    each metric within 4 standard errors, unbiased over 100 seeds, and its delta-method standard error the
    estimates' sd over the seeds (tests.support.assert_monte_carlo_estimates). A family without ``moments``
    takes that path in ReferenceScore, one with them the closed form, without standard errors."""
    target, family, score = _gaussian_setup("fullrank_gaussian")
    mean = target.mean + np.linspace(-0.6, 0.3, target.dim) * target.std
    sd_scale = np.exp(np.linspace(-0.4, 0.25, target.dim))
    q = Approximation(family, family.moment_matched(mean, target.cov * np.outer(sd_scale, sd_scale)))
    reference = target.reference()
    exact = marginal_metrics(q, reference, np.random.default_rng(0))
    assert set(exact) == set(MARGINAL_METRICS) and exact == {k: v for k, v in score(q, None).items() if k in exact}
    estimates = [monte_carlo_marginal_metrics(q.sample(np.random.default_rng(seed), MOMENT_DRAWS), reference)
                 for seed in range(SEEDS)]
    assert_monte_carlo_estimates(estimates, exact)
    opaque = Approximation(_OpaqueFullRank(target.dim), q.params)
    assert score(opaque, np.random.default_rng(0)) == pytest.approx(
        estimates[0] | score.excess_inclusive_kl(opaque), rel=1e-12)


class _OpaqueFullRank(FullRankGaussian):
    """The full-rank Gaussian without its moments: the metrics take the Monte Carlo path."""

    def moments(self, params):
        return None


@pytest.mark.parametrize("family_name", ["meanfield_gaussian", "fullrank_gaussian"])
def test_excess_kl_of_gaussian_families_is_exact(family_name):
    """KL(π‖q) − KL(π‖q*) from the closed-form Gaussian KL, q* the moment-matched member: the
    full covariance for full-rank, its diagonal for mean-field."""
    target, family, score = _gaussian_setup(family_name)
    rng = np.random.default_rng(5)
    q = Approximation(family, family.init_params() + 0.2 * rng.standard_normal(family.num_params))
    optimum_cov = target.cov if family_name == "fullrank_gaussian" else np.diag(np.diag(target.cov))
    expected = (gaussian_kl(target.mean, target.cov, *family.moments(q.params).gaussian_moments())
                - gaussian_kl(target.mean, target.cov, target.mean, optimum_cov))
    assert score(q, rng)["excess_inclusive_kl"] == pytest.approx(expected, rel=1e-10)
    optimum = Approximation(family, family.moment_matched(target.mean, target.cov))
    assert score(optimum, rng)["excess_inclusive_kl"] == pytest.approx(0.0, abs=1e-10)


def test_excess_kl_of_student_t_by_monte_carlo_agrees_with_a_long_run():
    """The Student-t family has no moment-matched optimum: the metric fits q* to half the reference's
    draws and averages log q* − log q over the other half. Against the same difference over 10⁵
    fresh exact draws of π (q* the same fit), within 4 standard errors; and the estimate is
    consistent with 0 at q = q*."""
    target, family, score = _gaussian_setup("meanfield_student_t")
    q = Approximation(family, family.init_params())
    metrics = score(q, np.random.default_rng(0))
    fresh = target.sample(np.random.default_rng(9), 100_000)
    optimum = score._optimum
    long_run = np.mean(optimum.log_prob(fresh) - q.log_prob(fresh))
    assert abs(metrics["excess_inclusive_kl"] - long_run) <= 4 * metrics["excess_inclusive_kl_se"]
    at_optimum = score(optimum, np.random.default_rng(0))
    assert abs(at_optimum["excess_inclusive_kl"]) <= 4 * at_optimum["excess_inclusive_kl_se"]


def test_a_family_without_a_unique_fit_gets_no_excess_kl_and_no_fit():
    """A coupling flow's likelihood fit is non-convex (api.VariationalFamily.unique_fit): against a reference with
    draws but no moment-matched optimum for it, the marginal errors are logged and the excess inclusive KL is not."""
    pytest.importorskip("flowjax")
    target = GaussianTarget(dim=2, nu=2.0, seed=3)
    family = get_registry().build("family", "flow", dim=2, layers=2, width=8)
    assert not family.unique_fit and family.moment_matched(target.mean, target.cov) is None
    assert target.reference().draws is not None  # what a fit would use
    score = ReferenceScore(target.reference(), family)
    metrics = score(Approximation(family, family.init_params()), np.random.default_rng(0))
    assert "ref_mean_error_max" in metrics and not any(name.startswith("excess_inclusive_kl") for name in metrics)
    assert score._optimum is None


def test_fit_family_recovers_the_maximum_likelihood_gaussian():
    """For the mean-field Gaussian the likelihood fit is the sample mean and (ddof 0) sd."""
    family = get_registry().build("family", "meanfield_gaussian", dim=3)
    draws = np.random.default_rng(2).standard_normal((500, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -1.0]
    moments = family.moments(fit_family(family, draws))
    mean, sd = moments.mean, moments.sd
    np.testing.assert_allclose(mean, draws.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(sd, draws.std(axis=0), rtol=1e-5)


def test_a_fit_is_computed_once_per_family_and_draws(monkeypatch):
    """fit_family's memo: the same family (an equal one built again) and the same draws give the first fit's λ
    without a second optimization; other draws, or a family of other options, are fitted anew."""
    from mcsa_bench.references import accuracy

    fitted = []
    monkeypatch.setattr(accuracy, "_FITS", {})
    monkeypatch.setattr(accuracy, "_maximize_mean_log_q",
                        lambda family, draws: fitted.append(draws.shape) or np.full(family.num_params, len(fitted)))
    registry = get_registry()
    draws = np.random.default_rng(3).standard_normal((40, 2))
    first = fit_family(registry.build("family", "meanfield_student_t", dim=2), draws)
    again = fit_family(registry.build("family", "meanfield_student_t", dim=2), draws.copy())
    assert len(fitted) == 1 and np.array_equal(first, again)
    fit_family(registry.build("family", "meanfield_student_t", dim=2), draws[:20])
    fit_family(registry.build("family", "meanfield_student_t", dim=2, df=3.0), draws)
    assert len(fitted) == 3


def test_excess_kl_of_a_q_whose_covariance_does_not_factor_again_is_exact():
    """A diverged full-rank q: L with a tiny diagonal under large entries, so L Lᵀ is not positive
    definite in floating point (Cholesky fails). The metric uses q's own log density and matches the
    cross-entropy from L directly, with triangular solves."""
    from scipy.linalg import solve_triangular

    target, family, score = _gaussian_setup("fullrank_gaussian", dim=4, offdiagonal="relative")
    chol = np.tril(np.full((4, 4), 3.0), -1) + np.diag([1e-9, 1e-8, 1e-9, 1e-7])
    params = family.moment_matched(np.zeros(4), np.eye(4))
    params[4:] = (chol / np.diag(chol)[:, None])[np.tril_indices(4)]  # L = diag(L_ii)(I + M)
    params[4:][family._diagonal] = family._scale.inverse(np.diag(chol))
    q = Approximation(family, params)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(family.moments(q.params).gaussian_moments()[1])
    whitened_cov = solve_triangular(chol, np.linalg.cholesky(target.cov), lower=True)
    whitened_mean = solve_triangular(chol, target.mean, lower=True)
    cross_entropy = 0.5 * (4 * np.log(2 * np.pi) + 2 * np.sum(np.log(np.diag(chol))) + np.sum(whitened_cov**2)
                           + whitened_mean @ whitened_mean)
    floor = 0.5 * (4 * np.log(2 * np.pi) + np.linalg.slogdet(target.cov)[1] + 4)
    assert score(q, np.random.default_rng(0))["excess_inclusive_kl"] == pytest.approx(cross_entropy - floor, rel=1e-9)
