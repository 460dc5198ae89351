"""Components written once in JAX (mcsa_bench.autodiff): no hand gradient, no second class, both engines.

- ``eight_schools_jax``: the model of :class:`mcsa_bench_extras.models.EightSchools` in fifteen lines of
  jax.numpy; its gradient (the numpy model's 40 hand-written lines) comes from autodiff.
- ``sinh_arcsinh``: a mean-field sinh-arcsinh family (Jones and Pewsey 2009), each marginal a skewed,
  lighter- or heavier-tailed transform of a standard normal; Gaussian at its starting λ. Its scores, the
  ELBO's reparameterization gradient and its draws come from the two functions below.

JAX is optional: without it this module still imports (the plugin's other components load), and building
either component is one line naming the extra to install. Its ``jax`` and ``jnp`` are mcsa_bench.autodiff's,
imported on first use: a process that never builds these components (a numpy run of another model, a
sweep's launcher) does not pay JAX's import.
"""

from __future__ import annotations

import math

import numpy as np

from mcsa_bench.autodiff import AutodiffFamily, AutodiffModel, jax, jnp
from mcsa_bench.references import find
from mcsa_bench_extras.models import EightSchools

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _normal_log_pdf(x, mean, sd):
    return -0.5 * ((x - mean) / sd) ** 2 - jnp.log(sd) - _HALF_LOG_2PI


class EightSchoolsJax(AutodiffModel):
    """Eight schools as ``eight_schools`` (same latents, same log joint), written once in JAX."""

    def __init__(self, centered: bool = False):
        self.numpy_model = EightSchools(centered)  # the data, the names and the checks live there
        self.centered = self.numpy_model.centered
        super().__init__(self.numpy_model.dim)

    def latent_names(self) -> list[str]:
        return self.numpy_model.latent_names()

    def reference(self):
        """The hand-written model's shipped reference of the same parameterization (it describes this model)."""
        return find("eight_schools", self.numpy_model)

    def log_density(self, z):
        data = self.numpy_model
        mu, log_tau, group = z[0], z[1], z[2:]
        tau = jnp.exp(log_tau)
        # μ ~ N(0, 5²), τ ~ half-Cauchy(0, 5) with the log-Jacobian log τ of τ = exp(log τ)
        log_p = (_normal_log_pdf(mu, 0.0, data.mu_scale) + math.log(2.0 / (math.pi * data.tau_scale))
                 - jnp.log1p((tau / data.tau_scale) ** 2) + log_tau)
        if self.centered:
            theta = group
            log_p += jnp.sum(_normal_log_pdf(theta, mu, tau))
        else:
            theta = mu + tau * group
            log_p += jnp.sum(_normal_log_pdf(group, 0.0, 1.0))
        return log_p + jnp.sum(_normal_log_pdf(data.effects, theta, data.standard_errors))


class SinhArcsinh(AutodiffFamily):
    """Mean-field sinh-arcsinh: z_d = μ_d + σ_d sinh((asinh(ε_d) + s_d) / δ_d), ε ~ N(0, I), with
    λ = (μ, ψ, s, log δ) (4D), σ = softplus(ψ). s skews a marginal, δ < 1 fattens its tails and δ > 1
    thins them; s = 0 and δ = 1 is N(μ, σ²), where λ starts (μ = ``init_mean``, σ = ``init_scale``).

    log q by the change of variables: with x = (z − μ)/σ and u = δ asinh(x) − s (so ε = sinh(u)),
    log q(z) = Σ_d log φ(sinh u) + log cosh u + log δ − ½ log(1 + x²) − log σ."""

    def __init__(self, dim: int, init_mean: float = 0.0, init_scale: float = 1.0):
        super().__init__(dim)
        self.init_mean, self.init_scale = float(init_mean), float(init_scale)

    @property
    def num_params(self) -> int:
        return 4 * self.dim

    def init_params(self) -> np.ndarray:
        psi = self.init_scale + np.log(-np.expm1(-self.init_scale))  # softplus⁻¹
        return np.concatenate([np.full(self.dim, self.init_mean), np.full(self.dim, psi), np.zeros(2 * self.dim)])

    def _unpack(self, params):
        mu, psi, skew, log_tail = jnp.split(params, 4)
        return mu, jax.nn.softplus(psi), skew, log_tail

    def transform(self, params, eps):
        mu, sigma, skew, log_tail = self._unpack(params)
        return mu + sigma * jnp.sinh((jnp.arcsinh(eps) + skew) / jnp.exp(log_tail))

    def log_density(self, params, z):
        mu, sigma, skew, log_tail = self._unpack(params)
        x = (z - mu) / sigma
        u = jnp.exp(log_tail) * jnp.arcsinh(x) - skew
        eps = jnp.sinh(u)
        log_cosh_u = jnp.logaddexp(u, -u) - math.log(2.0)  # log cosh u, without overflow
        return jnp.sum(-0.5 * eps**2 - _HALF_LOG_2PI + log_cosh_u + log_tail
                       - 0.5 * jnp.log1p(x**2) - jnp.log(sigma))
