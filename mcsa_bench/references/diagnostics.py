"""Convergence diagnostics of MCMC draws: rank-normalized split R-hat, bulk ESS and the Monte Carlo
standard error of the mean (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021, "Rank-normalization,
folding, and localization: an improved R-hat", Bayesian Analysis 16(2), §3 and §4; the estimators
Stan, ArviZ and NumPyro report). Every function takes draws of shape (chains, draws, D) and returns
one value per coordinate, shape (D,).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

Array = np.ndarray


def average_ranks(values: Array) -> Array:
    """Ranks 1..S of each column of (S, D) values, ties given their average rank (``scipy.stats.rankdata``'s
    default; written out so that a run, which scores its health with these, does not import scipy.stats: 1 s of
    CPU at start-up)."""
    ranks = np.empty(values.shape, dtype=float)
    for column in range(values.shape[1]):
        _, position, counts = np.unique(values[:, column], return_inverse=True, return_counts=True)
        last = np.cumsum(counts)  # the rank of each distinct value's last copy
        ranks[:, column] = (last - (counts - 1) / 2)[position]
    return ranks


def _split_chains(draws: Array) -> Array:
    """(2M, ⌊n/2⌋, D): each chain's first and second half as separate chains (a middle draw of an odd n dropped)."""
    half = draws.shape[1] // 2
    return np.concatenate([draws[:, :half], draws[:, draws.shape[1] - half:]], axis=0)


def _rank_normalize(draws: Array) -> Array:
    """z-scores of the fractional ranks over all chains: Φ⁻¹((r − 3/8) / (S + 1/4)) (Vehtari et al. eq. 14)."""
    chains, n, dim = draws.shape
    ranks = average_ranks(draws.reshape(chains * n, dim))
    return ndtri((ranks - 0.375) / (chains * n + 0.25)).reshape(chains, n, dim)


def _rhat(draws: Array) -> Array:
    """Classic R-hat of (chains, n, D) draws: sqrt(var⁺ / W) with var⁺ = (n−1)/n W + B/n."""
    n = draws.shape[1]
    within = draws.var(axis=1, ddof=1).mean(axis=0)
    between = n * draws.mean(axis=1).var(axis=0, ddof=1)
    return np.sqrt(((n - 1) / n * within + between / n) / within)


def rhat(draws: Array) -> Array:
    """Rank-normalized split R-hat: the larger of the bulk and the folded (tail) value (Vehtari et al. §4.2)."""
    split = _split_chains(draws)
    folded = np.abs(split - np.median(split, axis=(0, 1)))
    return np.maximum(_rhat(_rank_normalize(split)), _rhat(_rank_normalize(folded)))


def _autocovariance(draws: Array) -> Array:
    """Autocovariances of every chain at lags 0..n−1, shape (chains, n, D), by FFT (biased, divided by n)."""
    n = draws.shape[1]
    centred = draws - draws.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * n)))
    spectrum = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :n] / n


def ess(draws: Array) -> Array:
    """Effective sample size of the mean, from all chains' autocorrelations with Geyer's initial
    monotone sequence (Vehtari et al. eqs. 10–13, as Stan computes it)."""
    chains, n, dim = draws.shape
    acov = _autocovariance(draws)
    chain_var = acov[:, 0] * n / (n - 1)
    within = chain_var.mean(axis=0)
    var_plus = within * (n - 1) / n
    if chains > 1:
        var_plus = var_plus + draws.mean(axis=1).var(axis=0, ddof=1)
    rho = 1.0 - (within - acov.mean(axis=0)) / var_plus  # (n, D): combined autocorrelations
    rho[0] = 1.0
    # Geyer: sums of adjacent pairs Γ_k = ρ_2k + ρ_2k+1, truncated at the first negative one and
    # made monotone non-increasing.
    pairs = rho[: 2 * (n // 2)].reshape(n // 2, 2, dim).sum(axis=1)
    positive = np.cumprod(pairs > 0.0, axis=0).astype(bool)
    pairs = np.minimum.accumulate(np.where(positive, pairs, 0.0), axis=0)
    tau = -1.0 + 2.0 * pairs.sum(axis=0)
    return chains * n / np.maximum(tau, 1.0 / np.log10(chains * n))


def bulk_ess(draws: Array) -> Array:
    """Bulk ESS: :func:`ess` of the rank-normalized split chains (Vehtari et al. §4.3)."""
    return ess(_rank_normalize(_split_chains(draws)))


def mean_mcse(draws: Array) -> Array:
    """Monte Carlo standard error of the posterior mean: sd / sqrt(ESS), with the ESS of the draws themselves."""
    flat = draws.reshape(-1, draws.shape[-1])
    return flat.std(axis=0, ddof=1) / np.sqrt(ess(draws))
