"""The chain diagnostics (mcsa_bench.references.diagnostics) against closed forms: the ESS and MCSE of
AR(1) chains, the ranks against scipy's, R-hat on mixed and stuck chains."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mcsa_bench.references.diagnostics import average_ranks, bulk_ess, ess, mean_mcse, rhat


def _ar1(rng: np.random.Generator, rho: float, chains: int, n: int, dim: int) -> np.ndarray:
    """Stationary AR(1) chains x_t = ρ x_{t−1} + √(1 − ρ²) ε_t, shape (chains, n, dim)."""
    x = np.empty((chains, n, dim))
    x[:, 0] = rng.standard_normal((chains, dim))
    noise = math.sqrt(1.0 - rho**2) * rng.standard_normal((chains, n, dim))
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_ess_of_ar1_chains_matches_the_closed_form(rho):
    """ESS of the mean of an AR(1) chain is S (1 − ρ)/(1 + ρ); over 50 coordinates the estimate's
    mean lies within 4 % of it (its sampling sd per coordinate is ~ 5 % at these lengths)."""
    draws = _ar1(np.random.default_rng(0), rho, chains=4, n=4000, dim=50)
    exact = draws.shape[0] * draws.shape[1] * (1 - rho) / (1 + rho)
    assert np.mean(ess(draws)) == pytest.approx(exact, rel=0.04)
    assert np.mean(bulk_ess(draws)) == pytest.approx(exact, rel=0.05)  # ranks of a Gaussian: nearly the same
    # the MCSE is sd/√ESS: its mean matches the closed form sd √((1 + ρ)/(S (1 − ρ)))
    assert np.mean(mean_mcse(draws)) == pytest.approx(1.0 / math.sqrt(exact), rel=0.04)


def test_average_ranks_are_scipys_rankdata_with_ties():
    """diagnostics' own ranks (a run does not import scipy.stats) equal scipy's average ranks, ties included."""
    rng = np.random.default_rng(3)
    values = np.column_stack([rng.standard_normal(200), rng.integers(0, 7, 200), np.zeros(200)])
    assert np.array_equal(average_ranks(values), stats.rankdata(values, axis=0))


def test_rhat_is_one_for_mixed_chains_and_flags_a_stuck_chain():
    draws = _ar1(np.random.default_rng(1), 0.5, chains=4, n=2000, dim=20)
    assert np.max(rhat(draws)) < 1.01
    shifted = draws.copy()
    shifted[0] += 0.5  # one chain in another place: the between-chain variance shows it
    assert np.min(rhat(shifted)) > 1.01
    wide = draws.copy()
    wide[0] *= 3.0  # same mean, other scale: only the folded (tail) R-hat sees it
    assert np.min(rhat(wide)) > 1.05
