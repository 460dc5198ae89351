"""The second samplers of tests/latent_samplers.py where the answer is exact: elliptical slice sampling of a
Gaussian likelihood (a conjugate posterior) and conditional SMC of a short stochastic volatility path (its
posterior by importance sampling from the prior)."""

from __future__ import annotations

import numpy as np

from mcsa_bench.plugins import get_registry
from tests.latent_samplers import (
    elliptical_slice_chains,
    pooled_moments,
    sv_particle_gibbs,
)


def test_elliptical_slice_chains_sample_a_conjugate_gaussian_posterior():
    """Prior N(0, I), likelihood N(y; x, s²) per coordinate: the posterior is N(y/(1 + s²), s²/(1 + s²)). 400
    chains of 60 steps (after 20 of burn-in), pooled: means within 4 and variances within 4 standard errors."""
    y, s2 = np.array([2.0, -1.0, 0.5]), np.array([0.1, 1.0, 4.0])

    def log_likelihood(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return -0.5 * np.sum((x - y) ** 2 / s2, axis=1)

    mean, mean_square, _ = elliptical_slice_chains(log_likelihood, (400, 3), np.random.default_rng(0), 20, 60)
    moments = pooled_moments(mean, mean_square)
    assert np.all(np.abs(moments.mean - y / (1 + s2)) <= 4 * moments.mean_se)
    assert np.all(np.abs(moments.var - s2 / (1 + s2)) <= 4 * moments.var_se)
    assert np.any(np.abs(moments.var - 1.2 * s2 / (1 + s2)) > 4 * moments.var_se)  # it can see a 20 % error


def test_conditional_smc_samples_a_short_volatility_path_given_theta():
    """h | θ, y for T = 6 returns: 500 chains of 40 conditional SMC sweeps (8 particles) against self-normalized
    importance sampling from the AR(1) prior (2^17 draws); means and variances of h_t within 4 standard errors."""
    model = get_registry().build("model", "stochastic_volatility", max_rows=6)
    rng = np.random.default_rng(0)
    theta = np.array([[-9.0, 1.5, -1.0]])
    mu, phi, sigma = theta[0, 0], np.tanh(theta[0, 1]), np.exp(theta[0, 2])

    prior = np.empty((2**17, 6))
    prior[:, 0] = mu + sigma / np.sqrt(1 - phi**2) * rng.standard_normal(len(prior))
    for t in range(1, 6):
        prior[:, t] = mu + phi * (prior[:, t - 1] - mu) + sigma * rng.standard_normal(len(prior))
    log_w = -0.5 * np.sum(prior + np.exp(model._log_y2 - prior), axis=1)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    exact_mean = w @ prior
    exact_var = w @ (prior - exact_mean) ** 2

    chains = 500
    thetas = np.repeat(theta, chains, axis=0)
    h = np.full((chains, 6), mu)
    total, total_sq = 0.0, 0.0
    for sweep in range(50):
        h = sv_particle_gibbs(model, thetas, h, 8, rng)
        if sweep >= 10:
            total, total_sq = total + h / 40, total_sq + h * h / 40
    moments = pooled_moments(total, total_sq - total**2)
    assert np.all(np.abs(moments.mean - exact_mean) <= 4 * moments.mean_se)
    assert np.all(np.abs(moments.var - exact_var) <= 4 * moments.var_se)
    assert np.any(np.abs(moments.var - 1.2 * exact_var) > 4 * moments.var_se)
