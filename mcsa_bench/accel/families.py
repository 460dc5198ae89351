"""Variational families in JAX (mean-field and full-rank Gaussian, mean-field Student-t), twins of
mcsa_bench/builtin/families.py with the same λ layout
(a λ of one is a λ of the other), built from the numpy family object so that its options
(scale transform, off-diagonal form, init) live once.

A family is static (dimension, options); :meth:`bind` makes the :class:`~mcsa_bench.accel.models.JaxQ`
q(·; λ) for a λ, inside a traced function. Scores are not written out: every scheme's gradient is
the gradient of a weighted sum of log q(z_n; λ) with respect to λ, which JAX takes by reverse
mode in one pass (cheaper than the (B, P) matrix of scores), and :func:`score` gives the matrix
for the checks against numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from mcsa_bench.builtin import families as numpy_families

_LOG_2PI = math.log(2.0 * math.pi)

# name -> σ(ψ), as in numpy_families.SCALE_TRANSFORMS
_SCALES = {"softplus": jax.nn.softplus, "exp": jnp.exp}


class Family:
    """A JAX family: ``dim``, ``num_params``, ``init_params()`` and ``bind(params) -> JaxQ``, the twin
    of a numpy family whose size and initial λ it shares."""

    def __init__(self, numpy_family):
        self.numpy_family = numpy_family
        self.dim, self.num_params = numpy_family.dim, numpy_family.num_params

    def init_params(self) -> jnp.ndarray:
        return jnp.asarray(self.numpy_family.init_params())

    def bind(self, params):
        raise NotImplementedError


@dataclass(frozen=True)
class _LocationScaleQ:
    """q(·; λ) of a Gaussian z = μ + L ε with L given as a diagonal (D,) or a lower triangle (D, D)."""

    mu: jnp.ndarray
    scale: jnp.ndarray  # σ (D,) for mean-field, L (D, D) for full-rank
    log_norm: jnp.ndarray  # Σ log L_ii + D/2 log 2π

    @property
    def diagonal(self) -> bool:
        return self.scale.ndim == 1

    def base_noise(self, key, n):
        """ε of the reparameterization z = μ + L ε (standard normal rows)."""
        return jax.random.normal(key, (n, self.mu.shape[0]), dtype=self.mu.dtype)

    def transform(self, eps):
        return self.mu + (eps * self.scale if self.diagonal else eps @ self.scale.T)

    def whiten(self, z):
        if self.diagonal:
            return (z - self.mu) / self.scale
        return jax.scipy.linalg.solve_triangular(self.scale, (z - self.mu).T, lower=True).T

    def sample_with_log_prob(self, key, n):
        eps = self.base_noise(key, n)
        return self.transform(eps), -0.5 * jnp.sum(eps * eps, axis=1) - self.log_norm

    def sample(self, key, n):
        return self.sample_with_log_prob(key, n)[0]

    def log_prob(self, z):
        u = self.whiten(z)
        return -0.5 * jnp.sum(u * u, axis=1) - self.log_norm

    def moments(self):
        cov = jnp.diag(self.scale**2) if self.diagonal else self.scale @ self.scale.T
        return self.mu, cov

    def marginal_moments(self):
        sd = self.scale if self.diagonal else jnp.sqrt(jnp.sum(self.scale**2, axis=1))
        return self.mu, sd

    def location_scale(self):
        """(location, scale) of the marginals, api.Moments' (HMC's diagonal mass): (μ, sd) here."""
        return self.marginal_moments()


@dataclass(frozen=True)
class _StudentTQ:
    """q(·; λ) of the mean-field Student-t: z = μ + σ t, t_d ~ t_ν_d."""

    mu: jnp.ndarray
    sigma: jnp.ndarray
    df: jnp.ndarray
    log_norm: jnp.ndarray  # Σ_d log σ + ½ log(νπ) + log Γ(ν/2) - log Γ((ν+1)/2)

    def base_noise(self, key, n):
        return jax.random.t(key, self.df, (n, self.mu.shape[0]), dtype=self.mu.dtype)

    def transform(self, eps):
        return self.mu + self.sigma * eps

    def _log_kernel(self, u):
        return jnp.sum(0.5 * (self.df + 1.0) * jnp.log1p(u * u / self.df), axis=1)

    def sample_with_log_prob(self, key, n):
        t = self.base_noise(key, n)
        return self.transform(t), -self._log_kernel(t) - self.log_norm

    def sample(self, key, n):
        return self.sample_with_log_prob(key, n)[0]

    def log_prob(self, z):
        return -self._log_kernel((z - self.mu) / self.sigma) - self.log_norm

    def moments(self):
        """None: q is not Gaussian; the Gaussian target's twin then estimates its KLs by Monte Carlo,
        as the numpy model does."""
        return None

    def marginal_moments(self):
        """Mean μ (NaN where ν ≤ 1) and sd σ √(ν/(ν−2)) (∞ where ν ≤ 2), as the numpy family."""
        sd = jnp.where(self.df > 2.0, self.sigma * jnp.sqrt(self.df / jnp.maximum(self.df - 2.0, 1e-300)), jnp.inf)
        return jnp.where(self.df > 1.0, self.mu, jnp.nan), sd

    def location_scale(self):
        """(μ, σ), api.Moments' location and scale (HMC's diagonal mass), not the mean and sd."""
        return self.mu, self.sigma


class MeanFieldGaussian(Family):
    """Twin of :class:`mcsa_bench.builtin.families.MeanFieldGaussian`: λ = (μ, ψ), σ = scale(ψ)."""

    def __init__(self, numpy_family: numpy_families.MeanFieldGaussian):
        super().__init__(numpy_family)
        self._sigma = _SCALES[numpy_family.scale]

    def bind(self, params):
        sigma = self._sigma(params[self.dim:])
        return _LocationScaleQ(params[: self.dim], sigma, jnp.sum(jnp.log(sigma)) + 0.5 * self.dim * _LOG_2PI)


class FullRankGaussian(Family):
    """Twin of :class:`mcsa_bench.builtin.families.FullRankGaussian`: λ = (μ, the lower triangle of L
    row-major), the diagonal through the scale map, the entries below it in the numpy family's
    ``offdiagonal`` form (relative multiples of the row's diagonal, fan_in-scaled, or absolute)."""

    def __init__(self, numpy_family: numpy_families.FullRankGaussian):
        super().__init__(numpy_family)
        self._sigma = _SCALES[numpy_family.scale]
        self._rows, self._cols = numpy_family._rows, numpy_family._cols
        self._diagonal = numpy_family._diagonal
        factor = numpy_family._stored_factor
        self._stored_factor = None if factor is None else jnp.asarray(factor)
        self._relative = numpy_family.relative

    def bind(self, params):
        d = self.dim
        tril = params[d:]
        diagonal = self._sigma(tril[self._diagonal])
        stored = tril if self._stored_factor is None else tril * self._stored_factor
        chol = jnp.zeros((d, d), dtype=params.dtype).at[self._rows, self._cols].set(stored)
        if self._relative:  # L = diag(L_ii)(I + M)
            chol = chol * diagonal[:, None]
        chol = chol.at[np.arange(d), np.arange(d)].set(diagonal)
        return _LocationScaleQ(params[:d], chol, jnp.sum(jnp.log(diagonal)) + 0.5 * d * _LOG_2PI)


class MeanFieldStudentT(Family):
    """Twin of :class:`mcsa_bench.builtin.families.MeanFieldStudentT`: λ = (μ, ψ) with σ = scale(ψ)
    and every ν_d = df fixed, or λ = (μ, ψ, ρ) with ν = scale(ρ) when ``learn_df``."""

    def __init__(self, numpy_family: numpy_families.MeanFieldStudentT):
        super().__init__(numpy_family)
        self._positive = _SCALES[numpy_family.scale]

    def bind(self, params):
        d = self.dim
        sigma = self._positive(params[d: 2 * d])
        df = self._positive(params[2 * d:]) if self.numpy_family.learn_df else jnp.full(d, self.numpy_family.df,
                                                                                          params.dtype)
        lgamma = jax.scipy.special.gammaln
        log_norm = jnp.sum(jnp.log(sigma) + 0.5 * jnp.log(df * math.pi) + lgamma(0.5 * df) - lgamma(0.5 * (df + 1.0)))
        return _StudentTQ(params[:d], sigma, df, log_norm)


def score(family: Family, params, z):
    """∇_λ log q(z_b; λ) per row, shape (B, P): for checks against the numpy family's ``score``."""
    return jax.jacrev(lambda p: family.bind(p).log_prob(z))(params)
