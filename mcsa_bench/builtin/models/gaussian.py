"""The Gaussian target of the papers' simulations (docs/methods.md §6, NeurIPS paper §6.2)."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.metrics import KL_EXCLUSIVE, KL_INCLUSIVE, KL_STANDARD_ERRORS, mean_with_se
from mcsa_bench.references import EXACT_DRAWS, PosteriorReference, exact

_LOG_2PI = float(np.log(2.0 * np.pi))
_MONTE_CARLO_DRAWS = 4096


def gaussian_kl(mean0: Array, cov0: Array, mean1: Array, cov1: Array) -> float:
    """KL(N(mean0, cov0) ‖ N(mean1, cov1)) in closed form (Cholesky, no inverses)."""
    chol1 = np.linalg.cholesky(cov1)
    solved_cov = np.linalg.solve(chol1, np.linalg.cholesky(cov0))  # L1⁻¹ L0
    solved_mean = np.linalg.solve(chol1, mean1 - mean0)
    logdet0 = 2.0 * np.log(np.diag(np.linalg.cholesky(cov0))).sum()
    logdet1 = 2.0 * np.log(np.diag(chol1)).sum()
    trace = np.sum(solved_cov**2)  # tr(Σ1⁻¹ Σ0)
    return float(0.5 * (trace + solved_mean @ solved_mean - mean0.size + logdet1 - logdet0))


class GaussianTarget(Model):
    """Gaussian target π = N(m, Σ), m ~ N(0, I), Σ ~ Wishart(df = D + ν, scale = I/(D + ν)).

    ``seed`` draws m and Σ; ``dim`` is D. Exact metrics: ``kl_inclusive`` = KL(π‖q) and
    ``kl_exclusive`` = KL(q‖π), in closed form when q is Gaussian, else Monte Carlo averages over
    4096 exact draws of π and of q with ``kl_inclusive_se`` and ``kl_exclusive_se`` their standard errors; the exact
    gradient of KL(π‖q) when q is Gaussian (:meth:`exact_inclusive_gradient`).
    """

    def __init__(self, dim: int = 10, nu: float = 50.0, seed: int = 0):
        if int(dim) < 1:
            raise ConfigurationError(f"dim must be >= 1, got {dim}")
        if not nu > -1:
            raise ConfigurationError(f"nu must be > -1 (Wishart df = dim + nu > dim - 1), got {nu}")
        self.nu = float(nu)
        rng = np.random.default_rng(seed)
        df = int(dim) + self.nu
        mean = rng.standard_normal(int(dim))
        self._set_moments(mean, _wishart_scaled_identity(rng, int(dim), df))

    @classmethod
    def from_moments(cls, mean: Array, cov: Array) -> GaussianTarget:
        """π = N(mean, cov) given explicitly (tests and conformance checks use chosen targets)."""
        target = cls.__new__(cls)
        target.nu = float("nan")
        target._set_moments(mean, cov)
        return target

    def _set_moments(self, mean: Array, cov: Array) -> None:
        self.mean = np.atleast_1d(np.asarray(mean, dtype=float))
        self.dim = self.mean.size
        self.cov = np.atleast_2d(np.asarray(cov, dtype=float))
        chol = np.linalg.cholesky(self.cov)
        # Σ⁻¹ once, from the Cholesky factor: log_joint is then one matmul per batch.
        self.precision = cho_solve((chol, True), np.eye(self.dim))
        self._chol = chol
        self._log_norm = -np.log(np.diag(chol)).sum() - 0.5 * self.dim * _LOG_2PI

    @property
    def std(self) -> Array:
        """Marginal standard deviations sqrt(diag Σ)."""
        return np.sqrt(np.diag(self.cov))

    def log_joint(self, z: Array) -> Array:
        r = z - self.mean
        return self._log_norm - 0.5 * np.einsum("bi,bi->b", r @ self.precision, r)

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        r = z - self.mean
        pr = r @ self.precision
        return self._log_norm - 0.5 * np.einsum("bi,bi->b", pr, r), -pr

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        """Exact draws from π, shape (n, D)."""
        return self.mean + rng.standard_normal((n, self.dim)) @ self._chol.T

    def log_normalizer(self) -> float:
        return 0.0  # the density is normalized

    def exact_inclusive_gradient(self, q: Approximation) -> Array | None:
        """∇_λ KL(π‖q) = -E_π[s(λ; z)], exact when q is Gaussian (None otherwise).

        log q(z; λ) of a Gaussian q is a quadratic in z whatever its parameterization, so the score
        is a polynomial of degree <= 2 in z. The symmetric sigma points m ± √D L e_i (L Lᵀ = Σ,
        weights 1/(2D)) match the moments of N(m, Σ) up to degree 3 (odd ones vanish by symmetry,
        the second is (1/2D) Σ_i 2D L e_i e_iᵀ Lᵀ = Σ), so their mean of the score is E_π[s] exactly.
        """
        if q.gaussian_moments() is None:
            return None
        spread = np.sqrt(self.dim) * self._chol.T  # row i: √D L e_i
        points = np.concatenate([self.mean + spread, self.mean - spread])
        return -q.score(points).mean(axis=0)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"kl_inclusive": KL_INCLUSIVE, "kl_exclusive": KL_EXCLUSIVE, **KL_STANDARD_ERRORS}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        moments = q.gaussian_moments()
        if moments is not None:
            mean, cov = moments
            return {
                "kl_inclusive": gaussian_kl(self.mean, self.cov, mean, cov),
                "kl_exclusive": gaussian_kl(mean, cov, self.mean, self.cov),
            }
        z_pi = self.sample(rng, _MONTE_CARLO_DRAWS)
        z_q = q.sample(rng, _MONTE_CARLO_DRAWS)
        return (mean_with_se("kl_inclusive", self.log_joint(z_pi) - q.log_prob(z_pi))
                | mean_with_se("kl_exclusive", q.log_prob(z_q) - self.log_joint(z_q)))

    def reference(self) -> PosteriorReference:
        """π itself: its mean and covariance, and exact draws (seed 0) for Monte Carlo metrics."""
        draws = self.sample(np.random.default_rng(0), EXACT_DRAWS)
        return exact("gaussian", "gaussian", {"dim": self.dim, "nu": self.nu}, self.latent_names(), self.mean,
                     self.cov, draws, source="the target's own mean and covariance (closed form)")

    def artifacts(self) -> dict[str, dict[str, Array]]:
        return {"target": {"mean": self.mean, "cov": self.cov}}


def _wishart_scaled_identity(rng: np.random.Generator, dim: int, df: float) -> Array:
    """A draw of W ~ Wishart(df, I/df) (mean I) by Bartlett's decomposition: W = (A/√df)(A/√df)ᵀ with
    A lower triangular, A_ij ~ N(0, 1) below the diagonal and A_ii² ~ χ²(df − i), i = 0…dim−1.

    The draws come in scipy.stats.wishart's order (the normals, then the χ² one by one), so a seed
    gives the target it gave before; importing scipy.stats instead cost every command ~1 s of CPU.
    """
    lower = np.zeros((dim, dim))
    lower[np.tril_indices(dim, k=-1)] = rng.normal(size=dim * (dim - 1) // 2)
    lower[np.diag_indices(dim)] = [rng.chisquare(df - i, size=1)[0] ** 0.5 for i in range(dim)]
    lower *= math.sqrt(1.0 / df)
    return lower @ lower.T
