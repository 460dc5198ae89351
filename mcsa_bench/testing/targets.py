"""Gaussian targets with exact answers for the checks: draws from π, E_π of the score, and an
off-target proposal q ≠ π."""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation
from mcsa_bench.builtin.families import MeanFieldGaussian, _sigmoid, _softplus
from mcsa_bench.builtin.models.gaussian import GaussianTarget


def gaussian_target(dim: int) -> GaussianTarget:
    """The checks' target in 1 to 8 dimensions: unequal scales and correlations 0.5^|i-j|."""
    if dim == 1:
        return GaussianTarget.from_moments([0.5], [[1.3**2]])
    scales = np.array([0.5, 1.0, 1.5, 0.8, 2.0, 1.2, 0.7, 1.1])[:dim]
    correlation = 0.5 ** np.abs(np.subtract.outer(np.arange(dim), np.arange(dim)))
    return GaussianTarget.from_moments(np.linspace(-1.0, 1.0, dim), correlation * np.outer(scales, scales))


def offset_proposal(target: GaussianTarget) -> Approximation:
    """A mean-field Gaussian q ≠ π to propose from: shifted by 0.3 standard deviations, 1.3x wider
    (independence kernels accept 20-30% of proposals in 5-D, so the chains do move)."""
    family = MeanFieldGaussian(target.dim)
    mean = target.mean + 0.3 * target.std
    return Approximation(family, np.concatenate([mean, np.log(np.expm1(1.3 * target.std))]))


def poor_proposal(target: GaussianTarget) -> Approximation:
    """A narrow, off-centre mean-field Gaussian q: large importance weights w* = sup π/q."""
    family = MeanFieldGaussian(target.dim)
    return Approximation(family, np.concatenate([np.full(target.dim, 0.5), np.full(target.dim, np.log(np.expm1(0.6)))]))


def exact_score_variance(target: GaussianTarget, q: Approximation) -> float:
    """tr Cov_π[s(λ; z)] for the same q: Var(u)/σ² for the means and Var(u²)(σ'/σ)² for the scales."""
    mu, psi = q.params[: q.dim], q.params[q.dim :]
    sigma = _softplus(psi)
    s2, d = np.diag(target.cov), target.mean - mu
    var_u = s2 / sigma**2
    var_u2 = (2 * s2**2 + 4 * d**2 * s2) / sigma**4
    return float(np.sum(var_u / sigma**2) + np.sum(var_u2 * (_sigmoid(psi) / sigma) ** 2))
