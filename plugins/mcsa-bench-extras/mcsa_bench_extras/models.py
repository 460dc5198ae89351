"""Two standard hierarchical targets: eight schools (Rubin 1981) and Neal's funnel (Neal 2003).

Both have analytic gradients (for MALA, HMC and the ELBO baseline) and a known answer: the
exact log evidence of eight schools by one-dimensional quadrature, the exact inclusive KL of any
Gaussian q for the funnel.
"""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.metrics import KL_INCLUSIVE, LOG_Z_METRICS, importance_log_z
from mcsa_bench.references import EXACT_DRAWS, PosteriorReference, exact

_LOG_2PI = float(np.log(2.0 * np.pi))
_MONTE_CARLO_DRAWS = 4096


def _normal_log_pdf(x: Array, mean: Array | float, sd: Array | float) -> Array:
    return -0.5 * ((x - mean) / sd) ** 2 - np.log(sd) - 0.5 * _LOG_2PI


class EightSchools(Model):
    """Eight schools: y_j ~ N(θ_j, σ_j²), θ_j ~ N(μ, τ²), μ ~ N(0, 5²), τ ~ half-Cauchy(0, 5).

    Latents z = (μ, log τ, θ_1..θ_8) when ``centered``, else (μ, log τ, η_1..η_8) with
    θ_j = μ + τ η_j, η_j ~ N(0, 1) (non-centred: the geometry samplers prefer). The log joint
    includes the log-Jacobian log τ of τ = exp(log τ). Both parameterizations have the same
    evidence p(y), computed exactly by :meth:`exact_log_evidence`. Metrics: ``log_z`` and
    ``log_z_khat`` (importance sampling with q, docs/models.md).
    """

    #: treatment effects y_j and their standard errors σ_j (Rubin 1981)
    effects = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    standard_errors = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    mu_scale = 5.0
    tau_scale = 5.0

    def __init__(self, centered: bool = False):
        if not isinstance(centered, bool):
            raise ConfigurationError(f"centered must be true or false, got {centered!r}")
        self.centered = centered
        self.dim = 2 + self.effects.size

    def latent_names(self) -> list[str]:
        group = "theta" if self.centered else "eta"
        return ["mu", "log_tau"] + [f"{group}[{j}]" for j in range(self.effects.size)]

    def log_joint(self, z: Array) -> Array:
        return self.log_joint_and_grad(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        mu, log_tau, group = z[:, 0], z[:, 1], z[:, 2:]
        tau = np.exp(log_tau)
        y, sigma, s_mu, s_tau = self.effects, self.standard_errors, self.mu_scale, self.tau_scale
        # priors of μ and τ (half-Cauchy density 2/(π s (1 + τ²/s²))) plus the log-Jacobian log τ
        log_p = (_normal_log_pdf(mu, 0.0, s_mu) + np.log(2.0 / (np.pi * s_tau)) - np.log1p((tau / s_tau) ** 2)
                 + log_tau)
        grad = np.empty_like(z)
        grad[:, 0] = -mu / s_mu**2
        grad[:, 1] = 1.0 - 2.0 * tau**2 / (s_tau**2 + tau**2)
        if self.centered:
            theta = group
            deviation = theta - mu[:, None]
            log_p += _normal_log_pdf(theta, mu[:, None], tau[:, None]).sum(axis=1)
            grad[:, 0] += deviation.sum(axis=1) / tau**2
            grad[:, 1] += -self.effects.size + (deviation**2).sum(axis=1) / tau**2
            grad[:, 2:] = -deviation / tau[:, None] ** 2 + (y - theta) / sigma**2
        else:
            eta = group
            theta = mu[:, None] + tau[:, None] * eta
            residual = (y - theta) / sigma**2  # ∂/∂θ of the likelihood
            log_p += _normal_log_pdf(eta, 0.0, 1.0).sum(axis=1)
            grad[:, 0] += residual.sum(axis=1)
            grad[:, 1] += tau * (residual * eta).sum(axis=1)
            grad[:, 2:] = -eta + tau[:, None] * residual
        log_p += _normal_log_pdf(y, theta, sigma).sum(axis=1)
        return log_p, grad

    def log_evidence_given_tau(self, tau: Array) -> Array:
        """log p(y | τ) with θ and μ integrated out: y ~ N(0, diag(σ² + τ²) + s_μ² 11ᵀ)."""
        v = self.standard_errors**2 + np.asarray(tau, dtype=float)[..., None] ** 2
        c = self.mu_scale**2
        precision_sum = (1.0 / v).sum(axis=-1)
        weighted = (self.effects / v).sum(axis=-1)
        # matrix determinant lemma and Sherman-Morrison for the rank-one term c 11ᵀ
        log_det = np.log(v).sum(axis=-1) + np.log1p(c * precision_sum)
        quadratic = (self.effects**2 / v).sum(axis=-1) - c * weighted**2 / (1.0 + c * precision_sum)
        return -0.5 * (self.effects.size * _LOG_2PI + log_det + quadratic)

    def exact_log_evidence(self) -> float:
        """log p(y) = log ∫ half-Cauchy(τ) p(y | τ) dτ by adaptive quadrature (the same for both
        parameterizations: η ↦ θ = μ + τη has Jacobian τ^8, which the centred prior absorbs)."""
        from scipy import integrate  # imported here: it would double the start-up of every command

        shift = float(self.log_evidence_given_tau(self.tau_scale))

        def integrand(tau: float) -> float:
            half_cauchy = 2.0 / (np.pi * self.tau_scale * (1.0 + (tau / self.tau_scale) ** 2))
            return half_cauchy * float(np.exp(self.log_evidence_given_tau(tau) - shift))

        value = integrate.quad(integrand, 0.0, 50.0, limit=200)[0] + integrate.quad(integrand, 50.0, np.inf)[0]
        return shift + float(np.log(value))

    def metric_specs(self) -> dict[str, MetricSpec]:
        return dict(LOG_Z_METRICS)

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        return importance_log_z(self, q, rng)


class Funnel(Model):
    """Neal's funnel: v ~ N(0, scale²), x_i | v ~ N(0, e^v) for i = 1..dim-1; z = (v, x).

    The density is normalized (log Z = 0: ``log_normalizer``), with exact draws (``sample``), so the
    sample-based accuracy metrics score it. Exact marginals: v ~ N(0, scale²); x_i has mean 0 and
    variance E[e^v] = exp(scale²/2) (e^{4.5} ≈ 90 for scale 3); all coordinates are uncorrelated.
    Metrics: ``kl_inclusive`` = KL(π‖q), exact for a Gaussian q (Monte Carlo with exact draws of π
    otherwise), and ``kl_inclusive_excess`` = KL(π‖q) - (dim-1)·scale²/4, its excess over
    the best Gaussian (moment matching: mean 0, covariance Cov_π), the optimum of inclusive-KL
    variational inference with Gaussian families.
    """

    def __init__(self, dim: int = 10, scale: float = 3.0):
        if int(dim) < 2 or not scale > 0:
            raise ConfigurationError(f"funnel needs dim >= 2 and scale > 0, got dim={dim}, scale={scale}")
        self.dim, self.scale = int(dim), float(scale)

    def latent_names(self) -> list[str]:
        return ["v"] + [f"x[{i}]" for i in range(self.dim - 1)]

    def reference(self) -> PosteriorReference:
        """The exact marginal moments (diagonal covariance) and exact draws (seed 0)."""
        variances = np.concatenate([[self.scale**2], np.full(self.dim - 1, np.exp(self.scale**2 / 2.0))])
        rng = np.random.default_rng(0)
        v = self.scale * rng.standard_normal(EXACT_DRAWS)
        draws = np.column_stack([v, np.exp(v / 2.0)[:, None] * rng.standard_normal((EXACT_DRAWS, self.dim - 1))])
        return exact("funnel", "funnel", {"dim": self.dim, "scale": self.scale}, self.latent_names(),
                     np.zeros(self.dim), np.diag(variances), draws, source="Neal's funnel in closed form")

    def log_joint(self, z: Array) -> Array:
        return self.log_joint_and_grad(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        v, x = z[:, 0], z[:, 1:]
        k = self.dim - 1
        precision = np.exp(-v)
        squares = np.einsum("bi,bi->b", x, x)
        log_p = _normal_log_pdf(v, 0.0, self.scale) - 0.5 * k * (v + _LOG_2PI) - 0.5 * precision * squares
        grad = np.empty_like(z)
        grad[:, 0] = -v / self.scale**2 - 0.5 * k + 0.5 * precision * squares
        grad[:, 1:] = -precision[:, None] * x
        return log_p, grad

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        """Exact draws from π, shape (n, dim)."""
        v = self.scale * rng.standard_normal(n)
        return np.column_stack([v, np.exp(0.5 * v)[:, None] * rng.standard_normal((n, self.dim - 1))])

    def log_normalizer(self) -> float:
        return 0.0  # the density is normalized

    def moments(self) -> tuple[Array, Array]:
        """(mean, variance) of every coordinate under π; the covariance is diagonal."""
        variance = np.full(self.dim, np.exp(0.5 * self.scale**2))
        variance[0] = self.scale**2
        return np.zeros(self.dim), variance

    def entropy(self) -> float:
        """H[π] = H[v] + E_v H[x | v] = ½ log(2πe scale²) + (dim-1)/2 · log(2πe), as E[v] = 0."""
        return 0.5 * (np.log(2.0 * np.pi * np.e * self.scale**2) + (self.dim - 1) * np.log(2.0 * np.pi * np.e))

    def best_gaussian_kl(self) -> float:
        """min over Gaussian q of KL(π‖q) = ½ log det(2πe Cov_π) - H[π] = (dim-1)·scale²/4."""
        return (self.dim - 1) * self.scale**2 / 4.0

    def inclusive_kl_gaussian(self, mean: Array, cov: Array) -> float:
        """KL(π‖N(mean, cov)) = -H[π] + ½ log det(2π cov) + ½ (tr(cov⁻¹ Cov_π) + meanᵀ cov⁻¹ mean)."""
        chol = np.linalg.cholesky(cov)
        _, variance = self.moments()
        solved_sd = np.linalg.solve(chol, np.diag(np.sqrt(variance)))  # L⁻¹ Cov_π^{1/2}
        solved_mean = np.linalg.solve(chol, mean)
        log_det = 2.0 * np.log(np.diag(chol)).sum()
        return float(-self.entropy() + 0.5 * (self.dim * _LOG_2PI + log_det + np.sum(solved_sd**2)
                                              + solved_mean @ solved_mean))

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"kl_inclusive": KL_INCLUSIVE,
                "kl_inclusive_excess": MetricSpec("result", "lower", "KL(π‖q) above the best Gaussian's", "nats")}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        moments = q.gaussian_moments()
        if moments is not None:
            kl = self.inclusive_kl_gaussian(*moments)
        else:
            z = self.sample(rng, _MONTE_CARLO_DRAWS)
            kl = float(np.mean(self.log_joint(z) - q.log_prob(z)))
        return {"kl_inclusive": kl, "kl_inclusive_excess": kl - self.best_gaussian_kl()}
