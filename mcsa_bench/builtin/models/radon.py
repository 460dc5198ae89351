"""Radon hierarchical regression with partial pooling (docs/methods.md §6; the AISTATS draft App. B.3).

    σ_a1, σ_a2, σ_y ~ Gamma(shape 1, rate 0.02),   μ_a1, μ_a2 ~ N(0, 1),
    a1_c ~ N(μ_a1, σ_a1²),  a2_c ~ N(μ_a2, σ_a2²)   (c = 1..K),
    y_i ~ N(a1_{c_i} + a2_{c_i} x_i, σ_y²)

with x = floor = 1 − basement and y = log radon (Gelman & Hill 2007; K = 85 Minnesota counties).
Unconstrained latents z = (a1_1..a1_K, a2_1..a2_K, μ_a1, μ_a2, log σ_a1, log σ_a2, log σ_y),
D = 2K + 5 (175), in the papers' centred parameterization; the log-Jacobians of σ = exp(log σ)
are part of the log joint. ``parameterization="noncentred"`` has the standardized effects
η_jc = (a_jc − μ_j)/σ_aj in place of a_jc (the same posterior; log-Jacobian K(log σ_a1 + log σ_a2)).

Given the three scales the model is linear-Gaussian, so its evidence log Z = log p(y) is a 3-D
integral (:meth:`Radon.exact_log_evidence`): the reference the importance-sampling ``log_z`` of
every method is measured against. The posterior's mean and covariance are 3-D integrals of the
conditional Gaussian's likewise (:meth:`Radon.exact_posterior`): the shipped references' moments.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, logsumexp

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.datasets import check_max_rows, load_columns, row_subset
from mcsa_bench.metrics import LOG_Z_METRICS, importance_log_z

_HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
_LOG_MAX_FLOAT = float(np.log(np.finfo(float).max))
#: Gamma(shape, rate) prior of the three scales σ_a1, σ_a2, σ_y
SCALE_SHAPE, SCALE_RATE = 1.0, 0.02
#: the CSV columns the model reads
COLUMNS = ("log_radon", "basement", "county")
#: exact_log_evidence's grid: trapezoid step in the sinh-stretched coordinate, and how far (in nats
#: below the peak of log p(y, log σ)) each axis extends; both checked in tests/builtin/models/test_radon.py
EVIDENCE_STEP, EVIDENCE_DEPTH = 0.2, 60.0
#: the latent coordinates of the county effects: the papers' a_jc, or η_jc = (a_jc − μ_j)/σ_aj
PARAMETERIZATIONS = ("centred", "noncentred")


def _read_radon(dataset: str) -> tuple[Array, Array, Array]:
    """(y = log_radon, x = 1 − basement, county index 0..K−1) from a shipped name or a CSV path."""
    columns = load_columns(dataset)
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise ConfigurationError(
            f"dataset {dataset!r} lacks column(s) {', '.join(missing)}"
            f"; the radon model needs numeric columns {', '.join(COLUMNS)}"
        )
    if any(columns[name].dtype.kind != "f" for name in COLUMNS):
        raise ConfigurationError(f"dataset {dataset!r}: columns {', '.join(COLUMNS)} must be numeric")
    basement, county = columns["basement"], columns["county"]
    if not np.isin(basement, (0.0, 1.0)).all():
        raise ConfigurationError(f"dataset {dataset!r}: column 'basement' must hold 0/1 indicators")
    if np.any(county != np.round(county)) or county.min() < 1:
        raise ConfigurationError(f"dataset {dataset!r}: column 'county' must hold integer labels 1..K")
    return columns["log_radon"], 1.0 - basement, county.astype(int) - 1


class Radon(Model):
    """Radon hierarchical regression; the metric is the importance-sampling log Z (and its k̂).

    ``dataset``: ``radon`` (the shipped Minnesota data) or a CSV path with numeric columns
    ``log_radon`` (the response), ``basement`` (0/1) and ``county`` (integer labels 1..K; K is the
    largest label, and counties without rows keep their prior). Every row is used (no split),
    or a seeded random subset of ``max_rows`` rows (a smoke test); nothing is standardized.
    ``parameterization``: ``centred`` (the papers' latents a_jc) or ``noncentred`` (η_jc).
    """

    def __init__(self, dataset: str = "radon", max_rows: int | None = None, parameterization: str = "centred"):
        if parameterization not in PARAMETERIZATIONS:
            raise ConfigurationError(
                f"parameterization must be one of {', '.join(PARAMETERIZATIONS)}, got {parameterization!r}"
            )
        self.parameterization = parameterization
        if not isinstance(dataset, str):
            raise ConfigurationError(
                f"dataset must be 'radon' or a CSV path with columns {', '.join(COLUMNS)}, got {dataset!r}"
            )
        y, x, county = _read_radon(dataset)
        self.num_counties = int(county.max()) + 1  # of the whole file, whatever rows are kept
        rows = row_subset(y.size, check_max_rows(max_rows), seed=0)
        self.y, self.x, self.county = y[rows], x[rows], county[rows]
        self.dim = 2 * self.num_counties + 5
        # (n, K) one-hot membership: sums residuals per county in one matmul for the gradient.
        self._membership = np.zeros((self.y.size, self.num_counties))
        self._membership[np.arange(self.y.size), self.county] = 1.0

    def _unpack(self, z: Array) -> tuple[Array, Array, Array, Array]:
        """(a1 (B, K), a2 (B, K), μ (B, 2), log σ (B, 3) ordered a1, a2, y)."""
        k = self.num_counties
        return z[:, :k], z[:, k : 2 * k], z[:, 2 * k : 2 * k + 2], z[:, 2 * k + 2 :]

    def _terms(self, z: Array) -> tuple[Array, Array, Array, Array, Array]:
        """The log joint (B,) and the intermediates its gradient reuses."""
        a1, a2, mu, log_sigma = self._unpack(z)
        sigma = np.exp(log_sigma)
        inv_sigma = np.exp(-log_sigma)
        k, n = self.num_counties, self.y.size
        # Standardized residuals of the county effects, (B, K) each, and of the data, (B, n).
        u1 = (a1 - mu[:, :1]) * inv_sigma[:, :1]
        u2 = (a2 - mu[:, 1:]) * inv_sigma[:, 1:2]
        residual = (self.y - a1[:, self.county] - a2[:, self.county] * self.x) * inv_sigma[:, 2:]
        log_lik = -n * (_HALF_LOG_2PI + log_sigma[:, 2]) - 0.5 * np.sum(residual**2, axis=1)
        log_prior_effects = (
            -k * (2.0 * _HALF_LOG_2PI + log_sigma[:, 0] + log_sigma[:, 1])
            - 0.5 * (np.sum(u1**2, axis=1) + np.sum(u2**2, axis=1))
        )
        log_prior_mu = -2.0 * _HALF_LOG_2PI - 0.5 * np.sum(mu**2, axis=1)
        # Gamma(shape, rate) density of σ, plus the log-Jacobian log σ.
        log_prior_scales = np.sum(
            SCALE_SHAPE * np.log(SCALE_RATE) - gammaln(SCALE_SHAPE) + SCALE_SHAPE * log_sigma - SCALE_RATE * sigma,
            axis=1,
        )
        value = log_lik + log_prior_effects + log_prior_mu + log_prior_scales
        return value, u1, u2, residual, sigma

    @property
    def noncentred(self) -> bool:
        return self.parameterization == "noncentred"

    def _centred(self, z: Array) -> Array:
        """The centred latents of non-centred ones: a_jc = μ_j + σ_aj η_jc."""
        k = self.num_counties
        eta1, eta2, mu, log_sigma = self._unpack(z)
        centred = z.copy()
        centred[:, :k] = mu[:, :1] + np.exp(log_sigma[:, :1]) * eta1
        centred[:, k : 2 * k] = mu[:, 1:] + np.exp(log_sigma[:, 1:2]) * eta2
        return centred

    def log_joint(self, z: Array) -> Array:
        if not self.noncentred:
            return self._terms(z)[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = self._terms(self._centred(z))[0] + self.num_counties * (z[:, -3] + z[:, -2])
        return np.where(self._scale_overflows(z), -np.inf, value)

    def _scale_overflows(self, z: Array) -> Array:
        """Rows where σ_a1 or σ_a2 = exp(log σ) overflows: there a_jc = μ_j + σ_aj η_jc is not a number,
        and the log density is −∞ (the Gamma prior's −rate·σ)."""
        return np.any(z[:, -5:-3] > _LOG_MAX_FLOAT, axis=1)

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        if not self.noncentred:
            return self._centred_log_joint_and_grad(z)
        # The chain rule through a_jc = μ_j + σ_aj η_jc, plus the log-Jacobian K(log σ_a1 + log σ_a2).
        k = self.num_counties
        with np.errstate(invalid="ignore", over="ignore"):
            value, centred_grad = self._centred_log_joint_and_grad(self._centred(z))
        grad = centred_grad.copy()
        for j, effects in enumerate((slice(0, k), slice(k, 2 * k))):
            sigma = np.exp(z[:, 2 * k + 2 + j])
            grad[:, effects] = sigma[:, None] * centred_grad[:, effects]
            grad[:, 2 * k + j] += centred_grad[:, effects].sum(axis=1)
            grad[:, 2 * k + 2 + j] += sigma * np.sum(centred_grad[:, effects] * z[:, effects], axis=1) + k
        overflows = self._scale_overflows(z)
        grad[overflows] = 0.0
        return np.where(overflows, -np.inf, value + k * (z[:, -3] + z[:, -2])), grad

    def _centred_log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        value, u1, u2, residual, sigma = self._terms(z)
        _, _, mu, _ = self._unpack(z)
        k = self.num_counties
        # ∂ log lik / ∂(mean of y_i) = r_i / σ_y, with r the standardized residual.
        scaled = residual / sigma[:, 2:]
        grad = np.empty_like(z)
        grad[:, :k] = scaled @ self._membership - u1 / sigma[:, :1]
        grad[:, k : 2 * k] = (scaled * self.x) @ self._membership - u2 / sigma[:, 1:2]
        grad[:, 2 * k] = np.sum(u1, axis=1) / sigma[:, 0] - mu[:, 0]
        grad[:, 2 * k + 1] = np.sum(u2, axis=1) / sigma[:, 1] - mu[:, 1]
        # ∂/∂ log σ: −(count) + Σ (standardized residual)² from the normals, shape − rate·σ from
        # the Gamma prior with its Jacobian.
        gamma_part = SCALE_SHAPE - SCALE_RATE * sigma
        grad[:, 2 * k + 2] = -k + np.sum(u1**2, axis=1) + gamma_part[:, 0]
        grad[:, 2 * k + 3] = -k + np.sum(u2**2, axis=1) + gamma_part[:, 1]
        grad[:, 2 * k + 4] = -self.y.size + np.sum(residual**2, axis=1) + gamma_part[:, 2]
        return value, grad

    def latent_names(self) -> list[str]:
        k = self.num_counties
        first, second = ("eta1", "eta2") if self.noncentred else ("a1", "a2")
        return (
            [f"{first}[{c}]" for c in range(k)]
            + [f"{second}[{c}]" for c in range(k)]
            + ["mu_a1", "mu_a2", "log_sigma_a1", "log_sigma_a2", "log_sigma_y"]
        )

    def metric_specs(self) -> dict[str, MetricSpec]:
        return dict(LOG_Z_METRICS)

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """``log_z`` (importance sampling with 2^12 draws of q) and ``log_z_khat``."""
        return importance_log_z(self, q, rng)

    # ------------------------------------------------------------------ exact evidence

    def log_evidence_given_scales(self, log_sigma: Array) -> Array:
        """log p(y, log σ) = log p(y | σ) + log p(log σ) for log σ of shape (..., 3) (order a1, a2, y),
        with a1, a2, μ_a1, μ_a2 integrated out analytically.

        Given μ, county c's rows are independent of the others' with y_c ~ N(U_c μ, Σ_c), U_c =
        [1, x_c], Σ_c = σ_y² (I + U_c P U_cᵀ), P = diag(ρ1, ρ2), ρ_j = σ_aj²/σ_y². With G_c = U_cᵀU_c
        (x is 0/1: [[n_c, m_c], [m_c, m_c]], m_c = Σx) and C_c = (P⁻¹ + G_c)⁻¹, Woodbury gives
        U_cᵀΣ_c⁻¹U_c = (G_c − G_c C_c G_c)/σ_y², U_cᵀΣ_c⁻¹y_c = (h_c − G_c C_c h_c)/σ_y² (h_c =
        (Σy, Σxy)), y_cᵀΣ_c⁻¹y_c = (Σy² − h_cᵀC_c h_c)/σ_y² and det Σ_c = σ_y^(2 n_c) δ_c with
        δ_c = det(I + P G_c): county sums are all it needs. The prior μ ~ N(0, I) is then integrated
        in closed form. The 2×2 algebra is written in ρ and as sums of non-negative terms where
        they exist, so it stays finite and accurate far into the tails (σ_a → 0 is ρ → 0).
        """
        s = np.asarray(log_sigma, dtype=float)
        n_c, m_c, sum_y, sum_xy, sum_yy = self._county_sums()
        s_y = s[..., 2:3]
        rho1, rho2, var_y = np.exp(2.0 * (s[..., 0:1] - s_y)), np.exp(2.0 * (s[..., 1:2] - s_y)), np.exp(2.0 * s_y)
        rho12 = rho1 * rho2
        delta = 1.0 + n_c * rho1 + m_c * rho2 + m_c * (n_c - m_c) * rho12
        scale = delta * var_y
        # F_c = U_cᵀΣ_c⁻¹U_c and b_c = U_cᵀΣ_c⁻¹y_c, entry by entry
        f11 = (n_c + m_c * (n_c - m_c) * rho2) / scale
        f12 = m_c / scale
        f22 = m_c * (1.0 + (n_c - m_c) * rho1) / scale
        b1 = (sum_y + m_c * rho2 * (sum_y - sum_xy)) / scale
        b2 = (sum_xy + rho1 * (n_c * sum_xy - m_c * sum_y)) / scale
        h_c_h = ((rho1 + m_c * rho12) * sum_y**2 - 2.0 * m_c * rho12 * sum_y * sum_xy
                 + (rho2 + n_c * rho12) * sum_xy**2) / delta
        quadratic_y = (sum_yy - h_c_h) / var_y
        log_det = 2.0 * n_c * s_y + np.log(delta)
        # μ: ∫ exp(−½ μᵀHμ + gᵀμ) N(μ; 0, I) dμ with H = I + Σ_c F_c, g = Σ_c b_c.
        h11, h12, h22 = 1.0 + f11.sum(-1), f12.sum(-1), 1.0 + f22.sum(-1)
        g1, g2 = b1.sum(-1), b2.sum(-1)
        det_h = h11 * h22 - h12**2
        quadratic_mu = (h22 * g1**2 - 2.0 * h12 * g1 * g2 + h11 * g2**2) / det_h
        log_likelihood = (-self.y.size * _HALF_LOG_2PI - 0.5 * (log_det.sum(-1) + quadratic_y.sum(-1))
                          - 0.5 * np.log(det_h) + 0.5 * quadratic_mu)
        log_prior = np.sum(SCALE_SHAPE * np.log(SCALE_RATE) - gammaln(SCALE_SHAPE) + SCALE_SHAPE * s
                           - SCALE_RATE * np.exp(s), axis=-1)
        return log_likelihood + log_prior

    def _county_sums(self) -> tuple[Array, Array, Array, Array, Array]:
        """(n_c, Σx, Σy, Σxy, Σy²) of the counties with rows (the others integrate to 1)."""
        k = self.num_counties
        sums = [np.bincount(self.county, weights=w, minlength=k)
                for w in (None, self.x, self.y, self.x * self.y, self.y**2)]
        with_rows = sums[0] > 0
        return tuple(column[with_rows] for column in sums)

    def scale_quadrature(self, step: float = EVIDENCE_STEP, depth: float = EVIDENCE_DEPTH) -> tuple[Array, Array]:
        """(grid of log σ (n1, n2, n3, 3), log of integrand × weight there): the 3-D product trapezoid rule
        of ∫ p(y, log σ) d(log σ) (:meth:`log_evidence_given_scales`).

        Each axis j is centred at the mode ŝ of log p(y, log σ) and stretched by
        s_j = ŝ_j + a_j sinh(t) (a_j: the Laplace standard deviation), with t on a uniform grid of
        ``step``: points cluster at the mode and thin out in the tails, where the integrand falls
        only like σ_a (the Gamma prior's Jacobian) as σ_a → 0. Each axis extends until the
        integrand, along that axis, is ``depth`` nats below its peak. The trapezoid rule on a
        smooth integrand that has decayed at both ends converges faster than any power of the
        step: on the shipped data, step 0.2 and 0.1 agree to 4e-8 (tests/builtin/models/test_radon.py).
        """
        from scipy.optimize import minimize  # here: loading the registry, which imports this module, skips it (0.4 s)

        def negative(s: Array) -> float:
            return -float(self.log_evidence_given_scales(s))

        found = minimize(negative, np.zeros(3), method="BFGS")
        mode, peak = found.x, -found.fun
        spread = np.sqrt(np.diag(np.linalg.inv(_hessian(negative, mode))))
        axes, log_weights = [], []
        for j, direction in enumerate(np.eye(3)):
            reach = [_reach(lambda offset: peak - float(self.log_evidence_given_scales(mode + offset * direction)),
                            sign * spread[j], depth) for sign in (-1.0, 1.0)]
            t = np.arange(np.arcsinh(reach[0] / spread[j]), np.arcsinh(reach[1] / spread[j]) + step / 2, step)
            axes.append(mode[j] + spread[j] * np.sinh(t))
            log_weights.append(np.log(spread[j] * np.cosh(t) * step))  # ds_j = a_j cosh(t) dt
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
        values = np.stack([self.log_evidence_given_scales(plane) for plane in grid])  # one σ_a1 at a time
        weights = log_weights[0][:, None, None] + log_weights[1][None, :, None] + log_weights[2][None, None, :]
        return grid, values + weights

    def exact_log_evidence(self, step: float = EVIDENCE_STEP, depth: float = EVIDENCE_DEPTH) -> float:
        """log Z = log ∫ p(y, log σ) d(log σ) by the trapezoid rule of :meth:`scale_quadrature`."""
        return float(logsumexp(self.scale_quadrature(step, depth)[1]))

    def exact_scale_moments(self, step: float = EVIDENCE_STEP, depth: float = EVIDENCE_DEPTH) -> tuple[Array, Array]:
        """(posterior mean (3,), sd (3,)) of (log σ_a1, log σ_a2, log σ_y) by the same quadrature: the
        exact moments the NUTS reference of these three coordinates is tested against."""
        grid, log_weights = self.scale_quadrature(step, depth)
        weights = np.exp(log_weights - logsumexp(log_weights)).ravel()
        points = grid.reshape(-1, 3)
        mean = weights @ points
        return mean, np.sqrt(weights @ (points - mean) ** 2)

    def exact_posterior(self, step: float = EVIDENCE_STEP, depth: float = EVIDENCE_DEPTH,
                        negligible: float = 1e-15) -> tuple[Array, Array]:
        """(mean (D,), covariance (D, D)) of the posterior in the model's latents, by the quadrature of
        :meth:`scale_quadrature` over the three log σ of the conditional Gaussian of the rest: the law
        of total covariance, Σ = E_s[Cov(z | s)] + Cov_s(E[z | s]). Grid points whose normalized
        weight is below ``negligible`` are left out (their total is under 1e-10 on the shipped data).

        Given s = log σ, (a, μ) has the arrow-shaped precision of :meth:`_conditional_given_scales`;
        the non-centred η_j = (a_j − μ_j)/σ_aj is a linear map of it, so is Gaussian too.
        """
        grid, log_weights = self.scale_quadrature(step, depth)
        weights = np.exp(log_weights - logsumexp(log_weights)).ravel()
        keep = weights >= negligible
        points, weights = grid.reshape(-1, 3)[keep], weights[keep] / weights[keep].sum()
        k = self.num_counties
        first_moment, second_moment = np.zeros(self.dim), np.zeros((self.dim, self.dim))
        for chunk in np.array_split(np.arange(len(points)), max(1, len(points) // 2048)):
            mean, block_var, block_cov, factor, mu_cov = self._conditional_given_scales(points[chunk])
            w = weights[chunk]
            full_mean = np.concatenate([mean, points[chunk]], axis=1)  # (B, D)
            first_moment += w @ full_mean
            rooted = np.sqrt(w)[:, None] * full_mean
            second_moment += rooted.T @ rooted
            # Cov(a, μ | s) = W S⁻¹ Wᵀ + the per-county 2×2 blocks: the first as one product of
            # (2K + 2, 2B) factors W chol(S⁻¹) √w, the blocks on three diagonals
            low_rank = np.sqrt(w)[:, None, None] * (factor @ np.linalg.cholesky(mu_cov))
            low_rank = low_rank.transpose(1, 0, 2).reshape(2 * k + 2, -1)
            second_moment[: 2 * k + 2, : 2 * k + 2] += low_rank @ low_rank.T
            effects = np.arange(2 * k)
            second_moment[effects, effects] += w @ block_var
            second_moment[effects[:k], effects[k:]] += w @ block_cov
            second_moment[effects[k:], effects[:k]] += w @ block_cov
        return first_moment, second_moment - np.outer(first_moment, first_moment)

    def _conditional_given_scales(self, s: Array) -> tuple[Array, Array, Array, Array, Array]:
        """The Gaussian of the effects and μ (in the model's coordinates) given log σ = s (B, 3).

        Given s the log joint in (a, μ) is −½ Σ_i (y_i − a1_c − a2_c x_i)²/σ_y² − ½ Σ_jc (a_jc − μ_j)²/σ_aj²
        − ½|μ|²: precision [[A, B], [Bᵀ, M]] with A = blockdiag_c A_c, A_c = G_c/σ_y² + P⁻¹ (G_c as in
        :meth:`log_evidence_given_scales`, P = diag(σ_a1², σ_a2²)), each county's B block −P⁻¹ and
        M = K P⁻¹ + I; linear term b_c = h_c/σ_y², 0 for μ. Eliminating a: μ has precision
        S = M − Σ_c P⁻¹A_c⁻¹P⁻¹ and mean S⁻¹ Σ_c P⁻¹A_c⁻¹b_c; then a_c = A_c⁻¹(b_c + P⁻¹μ) + N(0, A_c⁻¹), so
        Cov(a, μ) = blockdiag(A_c⁻¹, 0) + W S⁻¹ Wᵀ with W's county rows G̃_c = A_c⁻¹P⁻¹ and μ's rows I.
        Non-centred, η_jc = (a_jc − μ_j)/σ_aj: W's county rows become (G̃_c − I)/σ_aj and the blocks
        A_c⁻¹ are scaled by 1/(σ_ai σ_aj).

        Returns (mean (B, 2K + 2) ordered a1, a2, μ; Var of a1_c and a2_c given μ (B, 2K);
        their covariance (B, K); W (B, 2K + 2, 2); S⁻¹ (B, 2, 2)).
        """
        k = self.num_counties
        n_c, m_c, sum_y, sum_xy = (np.bincount(self.county, weights=w, minlength=k)
                                   for w in (None, self.x, self.y, self.x * self.y))
        inv_var = np.exp(-2.0 * s)  # (B, 3): 1/σ_a1², 1/σ_a2², 1/σ_y²
        p1, p2, py = inv_var[:, :1], inv_var[:, 1:2], inv_var[:, 2:]
        # A_c = [[n py + p1, m py], [m py, m py + p2]]; every quantity below is written as sums of
        # non-negative terms where one exists, so that it stays accurate as σ_a → 0 (p → ∞), where
        # A_c → P⁻¹ and differences such as I − A_c⁻¹P⁻¹ would cancel
        det = m_c * (n_c - m_c) * py**2 + n_c * py * p2 + m_c * py * p1 + p1 * p2
        i11, i12, i22 = (m_c * py + p2) / det, -m_c * py / det, (n_c * py + p1) / det
        b1, b2 = sum_y * py, sum_xy * py
        # G̃_c = A_c⁻¹P⁻¹ and E_c = I − G̃_c = A_c⁻¹(A_c − P⁻¹), entry by entry
        g11, g12, g21, g22 = i11 * p1, i12 * p2, i12 * p1, i22 * p2
        e11 = (m_c * (n_c - m_c) * py + n_c * p2) * py / det
        e12 = m_c * py * p2 / det  # = e21 p2/p1: S is symmetric
        e22 = m_c * py * ((n_c - m_c) * py + p1) / det
        # S = M − Σ_c P⁻¹A_c⁻¹P⁻¹ = I + Σ_c P⁻¹E_c; its linear term Σ_c P⁻¹A_c⁻¹b_c
        s11, s12, s22 = 1.0 + np.sum(p1 * e11, axis=1), np.sum(p1 * e12, axis=1), 1.0 + np.sum(p2 * e22, axis=1)
        h1 = np.sum(p1 * (m_c * py * (b1 - b2) + p2 * b1) / det, axis=1)
        h2 = np.sum(p2 * (py * (n_c * b2 - m_c * b1) + p1 * b2) / det, axis=1)
        det_s = s11 * s22 - s12**2
        mu_cov = np.stack([np.stack([s22, -s12], -1), np.stack([-s12, s11], -1)], -2) / det_s[:, None, None]
        mu = np.einsum("bij,bj->bi", mu_cov, np.stack([h1, h2], -1))
        a1 = i11 * b1 + i12 * b2 + g11 * mu[:, :1] + g12 * mu[:, 1:]
        a2 = i12 * b1 + i22 * b2 + g21 * mu[:, :1] + g22 * mu[:, 1:]
        rows1, rows2 = np.stack([g11, g12], -1), np.stack([g21, g22], -1)  # W's county rows (B, K, 2)
        var1, var2, cov12 = i11, i22, i12
        if self.noncentred:
            sigma1, sigma2 = np.exp(s[:, :1]), np.exp(s[:, 1:2])
            # η_jc − its conditional mean given μ: (a_jc − μ_j)/σ_aj, whose rows in W are −E_c's / σ_aj
            a1 = (i11 * b1 + i12 * b2 - e11 * mu[:, :1] + g12 * mu[:, 1:]) / sigma1
            a2 = (i12 * b1 + i22 * b2 + g21 * mu[:, :1] - e22 * mu[:, 1:]) / sigma2
            rows1 = np.stack([-e11, g12], -1) / sigma1[:, :, None]
            rows2 = np.stack([g21, -e22], -1) / sigma2[:, :, None]
            var1, var2, cov12 = var1 / sigma1**2, var2 / sigma2**2, cov12 / (sigma1 * sigma2)
        factor = np.concatenate([rows1, rows2, np.broadcast_to(np.eye(2), (len(s), 2, 2))], axis=1)
        return (np.concatenate([a1, a2, mu], axis=1), np.concatenate([var1, var2], axis=1), cov12, factor,
                mu_cov)


def _hessian(f, x: Array, eps: float = 1e-4) -> Array:
    """Central second differences of a scalar function of a few variables."""
    shifts = np.eye(len(x)) * eps
    return np.array([[(f(x + si + sj) - f(x + si - sj) - f(x - si + sj) + f(x - si - sj)) / (4 * eps * eps)
                      for sj in shifts] for si in shifts])


def _reach(drop, first: float, depth: float, doublings: int = 64) -> float:
    """The first offset 2^k · ``first`` (k = 0, 1, ...) at which ``drop(offset)`` reaches ``depth`` nats."""
    offset = first
    for _ in range(doublings):
        if drop(offset) >= depth:
            return offset
        offset *= 2.0
    raise ValueError(f"log p(y, log σ) does not fall by {depth} nats within {offset:g} of its mode")
