"""A mean-field Laplace family: heavier (exponential) tails than the Gaussian, with a closed-form
score, entropy and an inverse-CDF reparameterization."""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Moments, VariationalFamily

_LOG_2 = float(np.log(2.0))


def _softplus(psi: Array) -> Array:
    return np.logaddexp(0.0, psi)


def _sigmoid(psi: Array) -> Array:
    return np.exp(-np.logaddexp(0.0, -psi))


class MeanFieldLaplace(VariationalFamily):
    """Mean-field Laplace q(z) = ∏_d exp(-|z_d - μ_d|/b_d) / (2 b_d), λ = (μ, ψ), b = softplus(ψ).

    λ starts at μ = ``init_mean`` and b = ``init_scale`` in every coordinate. The variance of a
    coordinate is 2b². Reparameterization by the inverse CDF: ε ~ Uniform(0, 1),
    z = μ - b sign(ε - ½) log(1 - 2|ε - ½|).
    """

    reparameterizable = True

    def __init__(self, dim: int, init_mean: float = 0.0, init_scale: float = 1.0):
        super().__init__(dim)
        if not init_scale > 0:
            raise ConfigurationError(f"init_scale must be positive, got {init_scale}")
        self.init_mean = float(init_mean)
        self.init_scale = float(init_scale)

    @property
    def num_params(self) -> int:
        return 2 * self.dim

    def init_params(self) -> Array:
        psi = self.init_scale + np.log(-np.expm1(-self.init_scale))  # softplus⁻¹
        return np.concatenate([np.full(self.dim, self.init_mean), np.full(self.dim, psi)])

    def _location_scale(self, params: Array) -> tuple[Array, Array]:
        """(μ, b), each of shape (D,)."""
        return params[: self.dim], _softplus(params[self.dim :])

    def moments(self, params: Array) -> Moments:
        """Location μ and scale b; the sd is √2 b."""
        mu, b = self._location_scale(params)
        return Moments(mu, b, sd=np.sqrt(2.0) * b)

    def sample(self, params: Array, rng: np.random.Generator, n: int) -> Array:
        return self.reparameterize(params, self.base_noise(rng, n))

    def log_prob(self, params: Array, z: Array) -> Array:
        mu, b = self._location_scale(params)
        return -(np.abs(z - mu) / b).sum(axis=1) - (np.log(b).sum() + self.dim * _LOG_2)

    def score(self, params: Array, z: Array) -> Array:
        # ∂/∂μ = sign(z-μ)/b;  ∂/∂b = (|z-μ|/b - 1)/b;  chain rule ∂b/∂ψ = sigmoid(ψ).
        mu, psi = params[: self.dim], params[self.dim :]
        b = _softplus(psi)
        r = z - mu
        return np.concatenate([np.sign(r) / b, (np.abs(r) / b - 1.0) * (_sigmoid(psi) / b)], axis=1)

    def entropy(self, params: Array) -> float:
        _, b = self._location_scale(params)
        return float(np.sum(1.0 + _LOG_2 + np.log(b)))

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        # Uniform on the open interval (0, 1): the midpoints of 2^53 equal cells, never 0 or 1.
        return (rng.integers(0, 2**53, size=(n, self.dim)) + 0.5) * 2.0**-53

    @staticmethod
    def _standard(eps: Array) -> Array:
        """The standard Laplace quantile at ε: -sign(ε - ½) log(1 - 2|ε - ½|)."""
        centred = eps - 0.5
        return -np.sign(centred) * np.log1p(-2.0 * np.abs(centred))

    def reparameterize(self, params: Array, eps: Array) -> Array:
        mu, b = self._location_scale(params)
        return mu + b * self._standard(eps)

    def reparameterize_vjp(self, params: Array, eps: Array, cotangent: Array) -> Array:
        # z = μ + b(ψ) L(ε):  ∂z/∂μ = I,  ∂z/∂ψ = diag(L(ε) sigmoid(ψ)).
        psi = params[self.dim :]
        return np.concatenate([cotangent, cotangent * self._standard(eps) * _sigmoid(psi)], axis=1)

    def grad_log_prob(self, params: Array, z: Array) -> Array:
        mu, b = self._location_scale(params)
        return -np.sign(z - mu) / b
