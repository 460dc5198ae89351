"""log-mean-exp, PSIS k̂ and the posterior-accuracy metrics in JAX: the algorithms of mcsa_bench/metrics.py
and mcsa_bench/references/accuracy.py with fixed shapes, so that they jit and vmap over replicates
(docs/methods.md §7, docs/references.md, "The metrics").

numpy drops the non-finite log weights and sizes the tail, the exceedances and the profile grid from
what is left; here every array keeps the size it has for all weights finite (its largest) and a mask
marks the entries numpy would keep. The arithmetic on the kept entries is numpy's, in its order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from mcsa_bench.references.accuracy import ReferenceScore
from mcsa_bench.references.accuracy import expected_log_prob as expected_log_prob_of


def log_mean_exp(values: jax.Array, axis: int = 0, where: jax.Array | None = None) -> jax.Array:
    """log(mean(exp(values))) along ``axis``, over the entries ``where`` is true (all by default)."""
    peak = jnp.max(values, axis=axis, keepdims=True, where=where, initial=-jnp.inf)
    peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
    return jnp.squeeze(peak, axis=axis) + jnp.log(jnp.mean(jnp.exp(values - peak), axis=axis, where=where))


def _tail_size(n, xp=jnp):
    """M = ⌈min(n/5, 3√n)⌉ of :func:`mcsa_bench.metrics.pareto_khat` for n finite weights (xp: jnp or np)."""
    return xp.ceil(xp.minimum(0.2 * n, 3.0 * xp.sqrt(n))).astype(int)


def _log1p_neg_times(theta: jax.Array, log_y: jax.Array) -> jax.Array:
    """log(1 − θ y) with y = exp(log_y) > 0 (mcsa_bench.metrics._log1p_neg_times), θ (m,) × log_y (M,)."""
    magnitude = jnp.log(jnp.abs(theta))[:, None] + log_y[None, :]
    return jnp.where(theta[:, None] < 0, jnp.logaddexp(0.0, magnitude),
                     jnp.log1p(-jnp.exp(jnp.minimum(magnitude, 0.0))))


def _generalized_pareto_shape(log_exceedances: jax.Array, n: jax.Array) -> jax.Array:
    """Zhang & Stephens' shape fit with Vehtari et al.'s prior (mcsa_bench.metrics._generalized_pareto_shape)
    to the last ``n`` entries of ``log_exceedances`` (ascending; the entries before them are ignored)."""
    size = log_exceedances.shape[0]
    kept = jnp.arange(size) >= size - n
    log_y = log_exceedances - log_exceedances[size - n + jnp.floor(n / 4 + 0.5).astype(int) - 1]
    log_y = jnp.where(kept, log_y, 0.0)  # ignored entries: any finite value
    m = 30 + jnp.floor(jnp.sqrt(n)).astype(int)
    grid = jnp.arange(1, 31 + math.isqrt(size))  # the largest grid, for n = size
    on_grid = grid <= m
    theta = jnp.exp(-log_y[-1]) + (1.0 - jnp.sqrt(m / (grid - 0.5))) / 3.0
    k = -jnp.mean(_log1p_neg_times(theta, log_y), axis=1, where=kept[None, :])
    profile_log_lik = n * (jnp.log(theta / k) + k - 1.0)
    weights = jnp.exp(profile_log_lik - jnp.max(profile_log_lik, where=on_grid, initial=-jnp.inf))
    weights = jnp.where(on_grid, weights, 0.0)
    theta_hat = jnp.sum(theta * weights) / jnp.sum(weights)
    k_hat = jnp.mean(_log1p_neg_times(theta_hat[None], log_y)[0], where=kept)
    return (n * k_hat + 10 * 0.5) / (n + 10)


def pareto_khat(log_weights: jax.Array) -> jax.Array:
    """PSIS k̂ of importance weights given by their logs (n,), as :func:`mcsa_bench.metrics.pareto_khat`:
    a generalized Pareto fit to the M = ⌈min(n/5, 3√n)⌉ largest finite weights in excess of the next
    largest one; NaN when fewer than 5 of them exceed it."""
    size = log_weights.shape[0]
    finite = jnp.isfinite(log_weights)
    n = jnp.sum(finite)
    ordered = jnp.sort(jnp.where(finite, log_weights, -jnp.inf))  # the finite ones last, ascending
    tail = _tail_size(n)
    widest = int(_tail_size(np.float64(size), np))  # the tail when every weight is finite
    if widest + 1 > size:
        return jnp.asarray(jnp.nan, dtype=log_weights.dtype)
    threshold = ordered[size - tail - 1]
    top = ordered[size - widest:]
    above = top > threshold  # the exceedances: a suffix of top, within its last `tail` entries
    count = jnp.sum(above)
    # log(w_i − w_u) = log w_i + log(1 − w_u / w_i), at the exceedances (others: any finite value)
    safe_top = jnp.where(above, top, threshold + 1.0)
    log_exceedances = safe_top + jnp.log1p(-jnp.exp(threshold - safe_top))
    shape = _generalized_pareto_shape(log_exceedances, count)
    return jnp.where((tail >= 5) & (count >= 5), shape, jnp.nan)


def log_z_metrics(log_weights: jax.Array) -> dict[str, jax.Array]:
    """``log_z`` (log-mean-exp of the importance weights) and ``log_z_khat`` (their PSIS k̂), as
    :func:`mcsa_bench.metrics.importance_log_z` from the same log weights."""
    return {"log_z": log_mean_exp(log_weights), "log_z_khat": pareto_khat(log_weights)}


def reference_metrics(score: ReferenceScore) -> Callable[[object], dict[str, jax.Array]]:
    """The metrics of ``score`` (a numpy ReferenceScore: one reference and the run's numpy family) as a
    function of a JaxQ: ``ref_mean_error_*`` and ``ref_log_sd_ratio_*`` from q's marginal moments, and
    ``excess_inclusive_kl`` (with ``_se`` where it is a Monte Carlo average) from q's log density.

    The family's optimum q* is found once, here, by the numpy ReferenceScore; what the metrics need
    of it are constants: E_π[log q*] (exact, for a Gaussian family) or log q* at the reference's
    held-out draws (Monte Carlo)."""
    ref_mean, ref_sd = jnp.asarray(score.reference.mean), jnp.asarray(score.reference.sd)
    score._prepare_optimum()  # ReferenceScore's own choice of the optimum and of the exact or Monte Carlo path
    optimum, cov_factor, test_draws = score._optimum, score._cov_factor, score._test_draws

    def marginal_metrics(q):
        mean, sd = q.marginal_moments()
        mean_error = jnp.abs(mean - ref_mean) / ref_sd
        log_sd_ratio = jnp.abs(jnp.log(sd / ref_sd))
        return {"ref_mean_error_max": jnp.max(mean_error), "ref_mean_error_rms": jnp.sqrt(jnp.mean(mean_error**2)),
                "ref_log_sd_ratio_max": jnp.max(log_sd_ratio),
                "ref_log_sd_ratio_rms": jnp.sqrt(jnp.mean(log_sd_ratio**2))}

    if optimum is None:
        return marginal_metrics
    if cov_factor is not None:
        # E_π[log q] at the 2D + 1 points μ, μ ± a_j (accuracy.expected_log_prob), against q*'s
        mean = np.asarray(score.reference.mean)
        points = jnp.asarray(np.concatenate([mean[None], mean + cov_factor.T, mean - cov_factor.T]))
        optimum_term, dim = expected_log_prob_of(optimum, mean, cov_factor), mean.size

        def excess(q):
            log_q = q.log_prob(points)
            centre, plus, minus = log_q[0], log_q[1 : 1 + dim], log_q[1 + dim :]
            return {"excess_inclusive_kl": optimum_term - (centre + 0.5 * jnp.sum(plus + minus - 2.0 * centre))}
    else:
        draws, optimum_log_prob = jnp.asarray(test_draws), jnp.asarray(optimum.log_prob(test_draws))

        def excess(q):
            differences = optimum_log_prob - q.log_prob(draws)
            return {"excess_inclusive_kl": jnp.mean(differences),
                    "excess_inclusive_kl_se": jnp.std(differences, ddof=1) / math.sqrt(differences.size)}

    return lambda q: marginal_metrics(q) | excess(q)
