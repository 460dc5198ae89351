"""Evaluation metrics shared by models (docs/methods.md §7)."""

from __future__ import annotations

import math

import numpy as np

from mcsa_bench.api import Approximation, Array, MetricSpec, Model

#: declarations of the metrics models share (``Model.metric_specs``)
TEST_LPD = MetricSpec("result", "higher", "test log predictive density", "nats per point")
TEST_ACCURACY = MetricSpec("result", "higher", "test accuracy")
TEST_RMSE = MetricSpec("result", "lower", "test RMSE", "units of the target")
KL_INCLUSIVE = MetricSpec("result", "lower", "KL(π‖q)", "nats")
KL_EXCLUSIVE = MetricSpec("result", "lower", "KL(q‖π)", "nats")
#: the Monte Carlo standard errors of the exact KLs, logged where q has no Gaussian moments (:func:`mean_with_se`)
KL_STANDARD_ERRORS = {f"{name}_se": MetricSpec("diagnostic", None, f"Monte Carlo standard error of {label}", "nats")
                      for name, label in (("kl_inclusive", "KL(π‖q)"), ("kl_exclusive", "KL(q‖π)"))}
#: what :func:`importance_log_z` returns
LOG_Z_METRICS = {"log_z": MetricSpec("result", "higher", "log marginal likelihood estimate", "nats"),
                 "log_z_khat": MetricSpec("diagnostic", "lower", "Pareto k̂ of the log Z weights")}

#: draws of q for the importance-sampling log Z estimate (docs/methods.md §7)
LOG_Z_DRAWS = 2**12
#: draws per block in :func:`importance_log_z`: the draws of q and a model's temporaries for all 2^12
#: draws at once (e.g. 82 MB per array on stochastic volatility, 30 MB on radon) are fresh memory,
#: page-faulted in on every evaluation; in blocks of 256 they stay small and are reused
LOG_Z_BLOCK = 256


def mean_with_se(name: str, values: Array) -> dict[str, float]:
    """``name``: the mean of M independent draws' ``values``, and ``<name>_se`` its standard error sd/√M
    (e.g. KL(π‖q) from exact draws of π: values log π − log q)."""
    return {name: float(np.mean(values)), f"{name}_se": float(np.std(values, ddof=1) / math.sqrt(values.size))}


def log_mean_exp(values: Array, axis: int = 0) -> Array:
    """log(mean(exp(values))) along ``axis``, stable for large magnitudes."""
    peak = np.max(values, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):  # all -inf: log(0) = -inf is the answer
        return np.squeeze(peak, axis=axis) + np.log(np.mean(np.exp(values - peak), axis=axis))


def _log1p_neg_times(theta: Array, log_y: Array) -> Array:
    """log(1 - θ y) with y = exp(log_y) > 0, for θ < 1/max(y), without forming θ y."""
    magnitude = np.log(np.abs(theta))[:, None] + log_y[None, :]
    heavy = theta[:, None] < 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(heavy, np.logaddexp(0.0, magnitude), np.log1p(-np.exp(np.minimum(magnitude, 0.0))))


def _generalized_pareto_shape(log_exceedances: Array) -> float:
    """Shape k of a generalized Pareto fit to exceedances given by their logs (ascending).

    Zhang & Stephens (2009) profile-likelihood estimator with the weakly informative prior of
    Vehtari et al. (2024, PSIS, eq. (15)) shrinking k towards 0.5 by 10 pseudo-observations. The
    shape is scale-invariant, so the fit runs on y = x / x_quartile in log space: exceedances may
    span any number of nats without under- or overflow.
    """
    n = log_exceedances.size
    m = 30 + int(math.sqrt(n))
    log_y = log_exceedances - log_exceedances[int(n / 4 + 0.5) - 1]
    # Grid over θ = -k/σ (in units of 1/x_quartile), centred on the quartile-based guess.
    theta = np.exp(-log_y[-1]) + (1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))) / 3.0
    k = -np.mean(_log1p_neg_times(theta, log_y), axis=1)
    profile_log_lik = n * (np.log(theta / k) + k - 1.0)
    weights = np.exp(profile_log_lik - profile_log_lik.max())  # posterior over the grid
    theta_hat = np.array([np.sum(theta * weights) / np.sum(weights)])
    k_hat = float(np.mean(_log1p_neg_times(theta_hat, log_y)))  # the usual shape ξ (= -k of Zhang & Stephens)
    return (n * k_hat + 10 * 0.5) / (n + 10)


def pareto_khat(log_weights: Array) -> float:
    """Pareto k̂ of importance weights (PSIS diagnostic; k̂ > 0.7: the estimate is unreliable).

    Fits a generalized Pareto distribution to the M = min(n/5, 3√n) largest weights in excess
    of the next largest one, in log space (finite however degenerate the weights). NaN when
    there are too few distinct weights to fit.
    """
    log_weights = np.asarray(log_weights, dtype=float)
    log_weights = np.sort(log_weights[np.isfinite(log_weights)])
    tail = pareto_tail_size(log_weights.size)
    if tail < 5:
        return float("nan")
    threshold, top = log_weights[-tail - 1], log_weights[-tail:]
    above = top[top > threshold]  # ties with the threshold carry no tail information
    if above.size < 5:
        return float("nan")
    # log(w_i - w_u) = log w_i + log(1 - w_u / w_i)
    return _generalized_pareto_shape(above + np.log1p(-np.exp(threshold - above)))


def pareto_tail_size(draws: int) -> int:
    """M = min(S/5, 3√S): how many of S weights PSIS fits its generalized Pareto tail to."""
    return int(math.ceil(min(0.2 * draws, 3.0 * math.sqrt(draws))))


def khat_standard_error(khat: float, draws: int) -> float:
    """Asymptotic standard error of a generalized Pareto shape k fitted to M tail draws, (1 + k)/√M
    (the maximum-likelihood estimate's, for k > −1/2): at S = 2^12 about 0.12 near k = 0.7."""
    return (1.0 + khat) / math.sqrt(pareto_tail_size(draws))


def importance_log_weights(model: Model, q: Approximation, rng: np.random.Generator, n: int) -> Array:
    """log p(x, z)/q(z) of ``n`` draws of q, made block by block from ``rng``: for the built-in families
    (rows of standard normal or t variates filled in order) the draws of one call for all n, so that a
    second call continues the first's stream."""
    def block(size: int) -> Array:
        z, log_q = q.sample_with_log_prob(rng, size)
        return model.log_joint(z) - log_q

    return np.concatenate([block(min(LOG_Z_BLOCK, n - start)) for start in range(0, n, LOG_Z_BLOCK)])


def importance_log_z(
    model: Model, q: Approximation, rng: np.random.Generator, n: int = LOG_Z_DRAWS
) -> dict[str, float]:
    """``log_z``: log-mean-exp of p(x, z)/q(z) over ``n`` draws of q (:func:`importance_log_weights`),
    and ``log_z_khat``."""
    log_w = importance_log_weights(model, q, rng, n)
    return {"log_z": float(log_mean_exp(log_w)), "log_z_khat": pareto_khat(log_w)}


def khat_threshold(draws: int) -> float:
    """The Pareto k̂ above which an importance-sampling estimate from ``draws`` draws is unreliable:
    min(1 − 1/log10 S, 0.7) (Vehtari, Simpson, Gelman, Yao & Gabry 2024, "Pareto smoothed importance
    sampling", JMLR 25, §3.2.4)."""
    return min(1.0 - 1.0 / math.log10(draws), 0.7)
