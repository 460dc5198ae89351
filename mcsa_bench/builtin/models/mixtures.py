"""Multimodal targets with known answers, where Gaussian families fail: the 40-mode Gaussian mixture of
FAB (Midgley et al., ICLR 2023) and "Beyond ELBOs" (Blessing et al., ICML 2024), and that benchmark's
mixture of Student-t components (docs/models.md).

Both are normalized (log Z = 0), draw exactly from π, and assign a point to the component of highest
density there (its mode), so that sample-based metrics (mcsa_bench.references.samples) can measure
mode coverage.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp, softmax

from mcsa_bench.api import Array, ConfigurationError, Model
from mcsa_bench.references import EXACT_DRAWS, PosteriorReference, exact

_LOG_2PI = math.log(2.0 * math.pi)

#: the 40 × 2 unit locations of FAB's and "Beyond ELBOs"' 40-mode mixture: jax.random.uniform(PRNGKey(0),
#: (40, 2), minval=-1, maxval=1) in float32 with JAX's threefry as both papers ran it (before JAX 0.5
#: made ``jax_threefry_partitionable`` the default); the means are these times ``loc_scaling`` = 40.
#: tests/builtin/models/test_mixtures.py draws them again with JAX.
FAB_UNIT_LOCATIONS = np.array([
    [-3.939557076e-01, 4.529132843e-01], [-8.702223301e-01, 5.306370258e-01],
    [-5.441284180e-01, 4.973254204e-01], [4.904522896e-01, 5.933628082e-01],
    [1.600456238e-02, -5.387077332e-01], [-3.368258476e-02, 9.475002289e-01],
    [6.323976517e-01, -6.440567970e-01], [3.125824928e-01, -6.548981667e-01],
    [1.721343994e-01, 1.008908749e-01], [1.351833344e-04, -7.189221382e-01],
    [8.307371140e-01, 9.041349888e-01], [3.910109997e-01, -2.986686230e-01],
    [1.498742104e-01, 9.687097073e-01], [-1.255543232e-01, 2.892363071e-01],
    [4.418189526e-01, -1.371920109e-01], [8.892550468e-01, 1.488769054e-01],
    [-9.668231010e-01, 4.924967289e-01], [4.829628468e-01, 5.495929718e-01],
    [5.727009773e-01, -3.684046268e-01], [-9.764778614e-01, -5.520939827e-01],
    [-2.300138474e-01, 6.889290810e-01], [8.875834942e-01, -3.240473270e-01],
    [7.186312675e-01, -3.068807125e-01], [6.521444321e-01, -9.296290874e-01],
    [-9.251880646e-02, 7.508533001e-01], [-4.470500946e-01, 5.362093449e-01],
    [5.630919933e-01, -6.356544495e-01], [-9.587578773e-01, -8.019220829e-01],
    [-8.178260326e-01, 9.545505047e-01], [5.335016251e-01, -8.242845535e-03],
    [2.914359570e-01, 9.384543896e-01], [-1.835310459e-01, 4.510571957e-01],
    [6.867613792e-01, -6.847133636e-01], [5.009539127e-01, -3.411726952e-01],
    [3.183293343e-02, -3.156869411e-01], [-3.663721085e-01, 8.928806782e-01],
    [6.220324039e-01, 4.631602764e-01], [-6.566834450e-02, 2.854394913e-02],
    [2.870395184e-01, 7.121853828e-01], [4.914000034e-01, -2.035419941e-01],
])


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _unit_locations(num_modes: int, dim: int, seed: int) -> Array:
    """Component locations in [-1, 1]^dim: FAB's table for its setting (40 modes, 2-D, seed 0), else
    uniform draws of numpy's generator from ``seed``."""
    if (num_modes, dim, seed) == FAB_UNIT_LOCATIONS.shape + (0,):
        return FAB_UNIT_LOCATIONS.copy()
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (num_modes, dim))


class _Mixture(Model):
    """π(z) = (1/K) Σ_k p_k(z) with product components p_k(z) = Π_d f((z_d − μ_kd)/s)/s, equally weighted.

    Subclasses give the standardized log density f and its derivative (``_log_f``), a draw of it
    (``_standard_draws``) and the component variance (``_component_variance``, inf when it has none).
    """

    def __init__(self, num_modes: int, dim: int, locations: Array, scale: float):
        if int(num_modes) < 1 or int(dim) < 1:
            raise ConfigurationError(f"num_modes and dim must be >= 1, got num_modes={num_modes}, dim={dim}")
        self.num_modes, self.dim = int(num_modes), int(dim)
        self.locations = np.asarray(locations, dtype=float)
        self.scale = scale

    def _log_f(self, u: Array) -> tuple[Array, Array]:
        """(log f(u), d log f / du) elementwise for standardized u."""
        raise NotImplementedError

    def _standard_draws(self, rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
        raise NotImplementedError

    def _component_variance(self) -> float:
        raise NotImplementedError

    def component_log_densities(self, z: Array) -> tuple[Array, Array]:
        """(log p_k(z) (B, K), d log p_k / dz (B, K, D))."""
        u = (z[:, None, :] - self.locations[None]) / self.scale
        log_f, slope = self._log_f(u)
        return log_f.sum(axis=2) - self.dim * math.log(self.scale), slope / self.scale

    def log_joint(self, z: Array) -> Array:
        return logsumexp(self.component_log_densities(z)[0], axis=1) - math.log(self.num_modes)

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        log_p, grad = self.component_log_densities(z)
        # ∇ log Σ_k p_k = Σ_k r_k ∇ log p_k, with responsibilities r = softmax_k log p_k
        return logsumexp(log_p, axis=1) - math.log(self.num_modes), np.einsum("bk,bkd->bd", softmax(log_p, axis=1),
                                                                                grad)

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        """Exact draws from π, shape (n, D): a uniform component, then its product distribution."""
        component = rng.integers(self.num_modes, size=n)
        return self.locations[component] + self.scale * self._standard_draws(rng, (n, self.dim))

    def log_normalizer(self) -> float:
        return 0.0

    def assign_modes(self, z: Array) -> Array:
        """The component of highest density at each point (as "Beyond ELBOs"' entropic mode coverage)."""
        return np.argmax(self.component_log_densities(z)[0], axis=1)

    def moments(self) -> tuple[Array, Array]:
        """π's mean and covariance: the locations' mean, and the component variance plus the locations'
        covariance (law of total covariance, weights 1/K)."""
        mean = self.locations.mean(axis=0)
        centred = self.locations - mean
        return mean, self._component_variance() * np.eye(self.dim) + centred.T @ centred / self.num_modes

    def _exact_reference(self, name: str, params: dict) -> PosteriorReference:
        mean, cov = self.moments()
        return exact(name, name, params, self.latent_names(), mean, cov,
                     self.sample(np.random.default_rng(0), EXACT_DRAWS), source=f"the {name} in closed form")


class GaussianMixture(_Mixture):
    """An equally weighted mixture of K isotropic Gaussians N(μ_k, scale² I) in D dimensions,
    μ_k = loc_scaling · U(-1, 1)^D.

    The default is the 40-mode 2-D mixture of FAB and "Beyond ELBOs" (their means, seed 0; scale 1 as
    "Beyond ELBOs", FAB's is softplus(1) = 1.3133: ``scale=1.3133``). Other settings draw the
    locations from ``seed`` with numpy's generator. Exact mean and covariance (:meth:`reference`).
    """

    def __init__(self, num_modes: int = 40, dim: int = 2, loc_scaling: float = 40.0, scale: float = 1.0,
                 seed: int = 0):
        self.loc_scaling, self.seed = _positive("loc_scaling", loc_scaling), int(seed)
        super().__init__(num_modes, dim, self.loc_scaling * _unit_locations(int(num_modes), int(dim), self.seed),
                         _positive("scale", scale))

    def _log_f(self, u: Array) -> tuple[Array, Array]:
        return -0.5 * (u * u + _LOG_2PI), -u

    def _standard_draws(self, rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
        return rng.standard_normal(shape)

    def _component_variance(self) -> float:
        return self.scale**2

    def reference(self) -> PosteriorReference:
        return self._exact_reference("gaussian_mixture", {"num_modes": self.num_modes, "dim": self.dim,
                                                          "loc_scaling": self.loc_scaling, "scale": self.scale,
                                                          "seed": self.seed})


class StudentTMixture(_Mixture):
    """"Beyond ELBOs"' mixture of Student-t components (MoS): K equally weighted products of D
    independent Student-t(df, μ_kd, scale), μ_kd ~ U(-loc_range, loc_range) from ``seed`` (numpy's
    generator; the paper: 10 components, df 2, unit scale, locations in [-10, 10]).

    With df ≤ 2 the components have no variance, so there is no moment reference (:meth:`reference` is
    None; the sample-based metrics use exact draws all the same); with df ≤ 1 no mean either.
    """

    def __init__(self, num_modes: int = 10, dim: int = 50, df: float = 2.0, loc_range: float = 10.0,
                 scale: float = 1.0, seed: int = 0):
        self.df, self.loc_range, self.seed = _positive("df", df), _positive("loc_range", loc_range), int(seed)
        super().__init__(num_modes, dim, self.loc_range * _unit_locations(int(num_modes), int(dim), self.seed),
                         _positive("scale", scale))
        df = self.df
        self._log_norm_1d = float(gammaln(0.5 * (df + 1.0)) - gammaln(0.5 * df) - 0.5 * math.log(df * math.pi))

    def _log_f(self, u: Array) -> tuple[Array, Array]:
        df = self.df
        return (self._log_norm_1d - 0.5 * (df + 1.0) * np.log1p(u * u / df), -(df + 1.0) * u / (df + u * u))

    def _standard_draws(self, rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
        return rng.standard_t(self.df, shape)

    def _component_variance(self) -> float:
        return self.scale**2 * self.df / (self.df - 2.0) if self.df > 2.0 else math.inf

    def reference(self) -> PosteriorReference | None:
        if not self.df > 2.0:
            return None
        return self._exact_reference("student_t_mixture", {"num_modes": self.num_modes, "dim": self.dim,
                                                           "df": self.df, "loc_range": self.loc_range,
                                                           "scale": self.scale, "seed": self.seed})
