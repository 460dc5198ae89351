"""FAB's many-well target (Midgley et al., ICLR 2023, §4.2; from Wu et al.'s double well): a product of
D/2 independent two-dimensional double wells, 2^(D/2) modes (docs/models.md).

Each pair (x, y) = (z_2i, z_2i+1) has the energy E(x, y) = a x + b x² + c x⁴ + y²/2 with a = −0.5,
b = −6, c = 1: x has two wells near −1.7 and +1.7 (the right one e^{1.7} ≈ 5.6 times heavier) and y is
standard normal. The log density −Σ_i E(x_i, y_i) is not normalized; its log Z = (D/2) (log Z_x +
½ log 2π) with Z_x = ∫ exp(−(a x + b x² + c x⁴)) dx by one-dimensional quadrature (FAB: Z_x =
11784.50927). Exact draws: y ~ N(0, 1) and x by rejection from a two-Gaussian envelope.
"""

from __future__ import annotations

import math

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Model
from mcsa_bench.references import EXACT_DRAWS, PosteriorReference, exact

#: the double well's coefficients (FAB's): E(x) = A x + B x² + C x⁴
A, B, C = -0.5, -6.0, 1.0
#: the quadrature grid of the x marginal: log f(±6) = −1,125, so nothing beyond it counts; the trapezoid
#: rule converges geometrically for this analytic, super-exponentially decaying integrand (at 24,001 nodes
#: Z_x agrees with adaptive quadrature to 1e-13, tests/builtin/models/test_many_well.py)
_GRID = np.linspace(-6.0, 6.0, 24_001)
#: the rejection sampler's envelope: N(±1.7, 0.5²) with the wells' quadrature masses as weights
_ENVELOPE_CENTRE, _ENVELOPE_SD = 1.7, 0.5


def well_log_density(x: Array) -> Array:
    """log f(x) = −(A x + B x² + C x⁴), the x marginal's unnormalized log density."""
    x2 = x * x
    return -(A * x + B * x2 + C * x2 * x2)


class ManyWell(Model):
    """FAB's many-well target in ``dim`` (even) dimensions: D/2 double wells, 2^(D/2) modes (the sign of
    each x_i); exact log Z, exact moments and exact draws."""

    def __init__(self, dim: int = 32):
        if int(dim) < 2 or int(dim) % 2:
            raise ConfigurationError(f"many_well needs an even dim >= 2, got {dim}")
        self.dim = int(dim)
        self.num_wells = self.dim // 2
        log_f = well_log_density(_GRID)
        peak = log_f.max()
        weights = np.exp(log_f - peak)  # trapezoid weights: the ends are 0 to double precision
        step = _GRID[1] - _GRID[0]
        mass = weights.sum() * step
        self.log_z_x = float(peak + math.log(mass))
        self.x_mean = float((_GRID * weights).sum() * step / mass)
        self.x_var = float(((_GRID - self.x_mean) ** 2 * weights).sum() * step / mass)
        right = float(weights[_GRID > 0].sum() * step / mass)
        self._envelope_weights = np.array([1.0 - right, right])  # left well, right well
        self._log_bound = float(np.max(log_f - self._envelope_log_density(_GRID))) + 1e-6

    def latent_names(self) -> list[str]:
        return [f"{name}[{i}]" for i in range(self.num_wells) for name in ("x", "y")]

    def log_joint(self, z: Array) -> Array:
        x, y = z[:, 0::2], z[:, 1::2]
        return np.sum(well_log_density(x), axis=1) - 0.5 * np.einsum("bi,bi->b", y, y)

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        x, y = z[:, 0::2], z[:, 1::2]
        grad = np.empty_like(z)
        grad[:, 0::2] = -(A + 2.0 * B * x + 4.0 * C * x**3)
        grad[:, 1::2] = -y
        return self.log_joint(z), grad

    def log_normalizer(self) -> float:
        return self.num_wells * (self.log_z_x + 0.5 * math.log(2.0 * math.pi))

    def _envelope_log_density(self, x: Array) -> Array:
        centres = np.array([-_ENVELOPE_CENTRE, _ENVELOPE_CENTRE])
        u = (np.asarray(x)[..., None] - centres) / _ENVELOPE_SD
        log_components = np.log(self._envelope_weights) - 0.5 * u * u - math.log(_ENVELOPE_SD * math.sqrt(2 * math.pi))
        return np.logaddexp(log_components[..., 0], log_components[..., 1])

    def sample_wells(self, rng: np.random.Generator, n: int) -> Array:
        """n exact draws of the x marginal by rejection: x ~ the envelope g, kept with probability
        f(x) / (M g(x)), M = max f/g on the quadrature grid (its ends' tails fall faster than g's)."""
        kept = np.empty(0)
        while kept.size < n:
            count = 2 * (n - kept.size) + 16  # about half are kept
            side = rng.random(count) < self._envelope_weights[1]
            x = np.where(side, _ENVELOPE_CENTRE, -_ENVELOPE_CENTRE) + _ENVELOPE_SD * rng.standard_normal(count)
            log_ratio = well_log_density(x) - self._envelope_log_density(x) - self._log_bound
            kept = np.concatenate([kept, x[np.log(rng.random(count)) < log_ratio]])
        return kept[:n]

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        """Exact draws from π, shape (n, D)."""
        z = np.empty((n, self.dim))
        z[:, 0::2] = self.sample_wells(rng, n * self.num_wells).reshape(n, self.num_wells)
        z[:, 1::2] = rng.standard_normal((n, self.num_wells))
        return z

    def reference(self) -> PosteriorReference:
        """Exact moments (a product: diagonal covariance, x's by quadrature) and exact draws (seed 0)."""
        mean = np.zeros(self.dim)
        mean[0::2] = self.x_mean
        variance = np.ones(self.dim)
        variance[0::2] = self.x_var
        return exact("many_well", "many_well", {"dim": self.dim}, self.latent_names(), mean, np.diag(variance),
                     self.sample(np.random.default_rng(0), EXACT_DRAWS), source="quadrature of the double well")
