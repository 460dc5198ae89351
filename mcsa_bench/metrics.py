"""Evaluation metrics shared by models (reference.md §7)."""

from __future__ import annotations

import math

import numpy as np

from mcsa_bench.api import Approximation, Array, Model

#: draws of q for the importance-sampling log Z estimate (reference.md §7)
LOG_Z_DRAWS = 2**12


def log_mean_exp(values: Array, axis: int = 0) -> Array:
    """log(mean(exp(values))) along ``axis``, stable for large magnitudes."""
    peak = np.max(values, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    return np.squeeze(peak, axis=axis) + np.log(np.mean(np.exp(values - peak), axis=axis))


def _generalized_pareto_shape(exceedances: Array) -> float:
    """Shape k of a generalized Pareto fit to positive ``exceedances`` (ascending).

    Zhang & Stephens (2009) profile-likelihood estimator with the weakly informative prior of
    Vehtari et al. (2024, PSIS, eq. (15)) shrinking k towards 0.5 by 10 pseudo-observations.
    """
    x = exceedances
    n = x.size
    m = 30 + int(math.sqrt(n))
    # Grid over θ = -k/σ, centred on a quartile-based guess.
    theta = 1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    theta = theta / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    k = -np.mean(np.log1p(-theta[:, None] * x[None, :]), axis=1)
    profile_log_lik = n * (np.log(theta / k) + k - 1.0)
    weights = np.exp(profile_log_lik - profile_log_lik.max())  # posterior over the grid
    theta_hat = float(np.sum(theta * weights) / np.sum(weights))
    k_hat = float(np.mean(np.log1p(-theta_hat * x)))  # the usual shape ξ (= -k of Zhang & Stephens)
    return (n * k_hat + 10 * 0.5) / (n + 10)


def pareto_khat(log_weights: Array) -> float:
    """Pareto k̂ of importance weights (PSIS diagnostic; k̂ > 0.7: the estimate is unreliable).

    Fits a generalized Pareto distribution to the M = min(n/5, 3√n) largest weights in excess
    of the next largest one.
    """
    log_weights = np.asarray(log_weights, dtype=float)
    log_weights = log_weights[np.isfinite(log_weights)]
    n = log_weights.size
    tail = int(math.ceil(min(0.2 * n, 3.0 * math.sqrt(n))))
    if tail < 5:
        return float("nan")
    ordered = np.sort(log_weights)
    top = ordered[-1]
    threshold = ordered[-tail - 1]
    exceedances = np.exp(ordered[-tail:] - top) - np.exp(threshold - top)
    exceedances = exceedances[exceedances > 0]
    if exceedances.size < 5:
        return float("nan")
    return _generalized_pareto_shape(exceedances)


def importance_log_z(model: Model, q: Approximation, rng: np.random.Generator, n: int = LOG_Z_DRAWS) -> dict[str, float]:
    """``log_z``: log-mean-exp of p(x, z)/q(z) over ``n`` draws of q, and ``log_z_khat``."""
    z, log_q = q.sample_with_log_prob(rng, n)
    log_w = model.log_joint(z) - log_q
    return {"log_z": float(log_mean_exp(log_w)), "log_z_khat": pareto_khat(log_w)}
