"""Built-in variational families (docs/methods.md §4): mean-field Gaussian, full-rank Gaussian,
mean-field Student-t.

Each family computes its per-λ quantities (σ(ψ), log-normalizer, Cholesky factor, ...) once in
:meth:`prepare`; every method accepts the raw λ or that prepared form (see
:class:`mcsa_bench.api.VariationalFamily`). Scores are closed forms, batched over points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.linalg.blas import dtrsm
from scipy.special import betaln, digamma, gammaln

from mcsa_bench.api import Array, ConfigurationError, Moments, VariationalFamily
from mcsa_bench.hookspecs import hookimpl

_LOG_2PI = float(np.log(2.0 * np.pi))


def _softplus(psi: Array) -> Array:
    return np.logaddexp(0.0, psi)


def _sigmoid(psi: Array) -> Array:
    return np.exp(-np.logaddexp(0.0, -psi))


def _softplus_inverse(sigma: Array) -> Array:
    return sigma + np.log(-np.expm1(-sigma))


def _softplus_derivative(psi: Array, sigma: Array) -> Array:
    """softplus'(ψ) = sigmoid(ψ) from σ = softplus(ψ) already at hand: log sigmoid(ψ) = ψ - softplus(ψ),
    one exp instead of sigmoid's own logaddexp (relative error below 2e-16 · max(|ψ|, 1))."""
    return np.exp(psi - sigma)


# name -> (σ(ψ), dσ/dψ as a function of (ψ, σ), ψ(σ))
SCALE_TRANSFORMS = {
    "softplus": (_softplus, _softplus_derivative, _softplus_inverse),
    "exp": (np.exp, lambda psi, sigma: sigma, np.log),
}
ScaleTransform = Literal["softplus", "exp"]  # run --help lists them
#: how the full-rank family stores the entries of L below the diagonal
OFFDIAGONAL_FORMS = ("relative", "fan_in", "absolute")


class _PositiveTransform:
    """The map ψ -> σ > 0 chosen by a family's ``scale`` option, with its derivative and inverse."""

    def __init__(self, scale: str):
        if scale not in SCALE_TRANSFORMS:
            raise ConfigurationError(f"unknown scale transform {scale!r}; allowed: {', '.join(SCALE_TRANSFORMS)}")
        self.name = scale
        self.forward, self.derivative, self.inverse = SCALE_TRANSFORMS[scale]


def _check_positive(name: str, value: float) -> float:
    if not value > 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return float(value)


# --------------------------------------------------------------------------------------------
# Mean-field Gaussian
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MeanFieldParams:
    """Per-λ quantities of a mean-field location-scale family."""

    mu: Array
    sigma: Array
    dsigma: Array  # dσ/dψ
    log_norm: float  # log Z in log q = -(kernel) - log Z: Σ log σ plus the family's constant


class MeanFieldGaussian(VariationalFamily):
    """Mean-field Gaussian q(z) = ∏_d N(z_d; μ_d, σ_d²) with λ = (μ, ψ) and σ = softplus(ψ).

    ``scale`` chooses the map ψ -> σ: ``softplus`` (default) or ``exp``. λ starts at
    μ = ``init_mean`` and σ = ``init_std`` in every coordinate.
    """

    reparameterizable = True

    def __init__(self, dim: int, scale: ScaleTransform = "softplus", init_mean: float = 0.0, init_std: float = 1.0):
        super().__init__(dim)
        self._scale = _PositiveTransform(scale)
        self.scale = scale
        self.init_mean = float(init_mean)
        self.init_std = _check_positive("init_std", init_std)

    @property
    def num_params(self) -> int:
        return 2 * self.dim

    def init_params(self) -> Array:
        mu = np.full(self.dim, self.init_mean)
        psi = np.full(self.dim, float(self._scale.inverse(np.float64(self.init_std))))
        return np.concatenate([mu, psi])

    def prepare(self, params: Array | MeanFieldParams) -> MeanFieldParams:
        if isinstance(params, MeanFieldParams):
            return params
        psi = params[self.dim :]
        sigma = self._scale.forward(psi)
        log_norm = np.log(sigma).sum() + 0.5 * self.dim * _LOG_2PI
        return MeanFieldParams(params[: self.dim], sigma, self._scale.derivative(psi, sigma), log_norm)

    def mean_std(self, params: Array | MeanFieldParams) -> tuple[Array, Array]:
        """(μ, σ), each of shape (D,)."""
        p = self.prepare(params)
        return p.mu, p.sigma

    def sample(self, params: Array | MeanFieldParams, rng: np.random.Generator, n: int) -> Array:
        p = self.prepare(params)
        return p.mu + p.sigma * rng.standard_normal((n, self.dim))

    def sample_with_log_prob(self, params: Array | MeanFieldParams, rng: np.random.Generator,
                             n: int) -> tuple[Array, Array]:
        p = self.prepare(params)
        eps = rng.standard_normal((n, self.dim))
        log_q = -0.5 * np.einsum("nd,nd->n", eps, eps) - p.log_norm
        return p.mu + p.sigma * eps, log_q

    def log_prob(self, params: Array | MeanFieldParams, z: Array) -> Array:
        p = self.prepare(params)
        u = (z - p.mu) / p.sigma
        return -0.5 * np.einsum("nd,nd->n", u, u) - p.log_norm

    def score(self, params: Array | MeanFieldParams, z: Array) -> Array:
        # ∂/∂μ log q = (z-μ)/σ²;  ∂/∂σ log q = ((z-μ)²/σ² - 1)/σ;  chain rule through σ(ψ).
        p = self.prepare(params)
        u = (z - p.mu) / p.sigma
        return np.concatenate([u / p.sigma, (u * u - 1.0) * (p.dsigma / p.sigma)], axis=1)

    def entropy(self, params: Array | MeanFieldParams) -> float:
        p = self.prepare(params)
        return float(np.log(p.sigma).sum() + 0.5 * self.dim * (1.0 + _LOG_2PI))

    def moments(self, params: Array | MeanFieldParams) -> Moments:
        """N(μ, diag σ²), without forming the D × D covariance (50 MB at stochastic volatility's D = 2521)."""
        p = self.prepare(params)
        return Moments(p.mu, p.sigma, gaussian=True)

    def moment_matched(self, mean: Array, cov: Array) -> Array:
        """(μ, σ²) = (mean, diag cov) minimizes KL(π‖q) over mean-field Gaussians."""
        return np.concatenate([mean, self._scale.inverse(np.sqrt(np.diag(cov)))])

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        return rng.standard_normal((n, self.dim))

    def reparameterize(self, params: Array | MeanFieldParams, eps: Array) -> Array:
        p = self.prepare(params)
        return p.mu + p.sigma * eps

    def reparameterize_vjp(self, params: Array | MeanFieldParams, eps: Array, cotangent: Array) -> Array:
        # z = μ + σ(ψ) ε:  ∂z/∂μ = I,  ∂z/∂ψ = diag(ε σ'(ψ)).
        p = self.prepare(params)
        return np.concatenate([cotangent, cotangent * eps * p.dsigma], axis=1)

    def grad_log_prob(self, params: Array | MeanFieldParams, z: Array) -> Array:
        p = self.prepare(params)
        return -(z - p.mu) / p.sigma**2


# --------------------------------------------------------------------------------------------
# Full-rank Gaussian
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FullRankParams:
    """Per-λ quantities of the full-rank Gaussian."""

    mu: Array
    chol: Array  # L (D, D), lower triangular, positive diagonal
    ddiag: Array  # dL_ii/dψ_i (D,)
    log_norm: float  # Σ log L_ii + D/2 log 2π
    multipliers: Array | None  # M (D, D) strictly lower with L = diag(L_ii)(I + M) (relative and fan_in forms)


class FullRankGaussian(VariationalFamily):
    """Full-rank Gaussian q(z) = N(z; μ, L Lᵀ) with L lower triangular, positive diagonal.

    λ = (μ, the lower triangle of L in row-major order: L_00, L_10, L_11, L_20, L_21, L_22, ...),
    P = D + D(D+1)/2. A diagonal entry is stored unconstrained as ψ_i with L_ii = σ(ψ_i), σ the
    ``scale`` map (``softplus``, default, or ``exp``). ``offdiagonal`` says how the entries below
    the diagonal are stored: ``relative`` as multiples m_ij of their row's diagonal,
    L_ij = L_ii m_ij, so L = diag(L_ii)(I + M) and a step of an optimizer changes every entry in
    proportion to its row's scale; ``fan_in`` (default) as ``relative`` with each multiplier stored
    as θ_ij = √i m_ij, i the number of entries left of row i's diagonal, so that a step of the same
    size on every θ of a row changes the row's variance by the same amount whatever D (the
    normalization of Glorot & Bengio's initialization; docs/estimators.md, "In high dimension");
    or ``absolute`` as the entries L_ij themselves (the papers' form, in which one stepsize is too
    coarse for rows of small posterior scale: docs/estimators.md, "The full-rank Gaussian family").
    λ starts at μ = ``init_mean`` and L = ``init_std`` · I.
    Everything goes through triangular solves with L (no inverse is formed).
    """

    reparameterizable = True

    def __init__(self, dim: int, scale: ScaleTransform = "softplus", init_mean: float = 0.0, init_std: float = 1.0,
                 offdiagonal: Literal["relative", "fan_in", "absolute"] = "fan_in"):
        super().__init__(dim)
        if offdiagonal not in OFFDIAGONAL_FORMS:
            raise ConfigurationError(f"offdiagonal must be one of {', '.join(OFFDIAGONAL_FORMS)}, got {offdiagonal!r}")
        self.relative = offdiagonal != "absolute"
        self._scale = _PositiveTransform(scale)
        self.scale = scale
        self.init_mean = float(init_mean)
        self.init_std = _check_positive("init_std", init_std)
        self._rows, self._cols = np.tril_indices(self.dim)  # row-major order of the lower triangle
        self._diagonal = np.flatnonzero(self._rows == self._cols)  # positions of L_ii in that order
        self._below = np.flatnonzero(self._rows != self._cols)  # positions of the entries below it
        self._below_rows = self._rows[self._below]
        # m_ij / θ_ij of the stored entries below the diagonal for fan_in: 1/√i (None: stored as m_ij),
        # and the same over the whole stored triangle (1 on the diagonal), which prepare multiplies
        # before scattering the triangle into L (half of prepare's time at D = 175 as a scatter after it)
        self._multiplier_per_stored = self._stored_factor = None
        if offdiagonal == "fan_in":
            self._multiplier_per_stored = 1.0 / np.sqrt(self._below_rows)
            self._stored_factor = np.ones(self._rows.size)
            self._stored_factor[self._below] = self._multiplier_per_stored

    @property
    def num_params(self) -> int:
        return self.dim + self.dim * (self.dim + 1) // 2

    def init_params(self) -> Array:
        tril = np.zeros(self.dim * (self.dim + 1) // 2)
        tril[self._diagonal] = self._scale.inverse(np.float64(self.init_std))
        return np.concatenate([np.full(self.dim, self.init_mean), tril])

    def prepare(self, params: Array | FullRankParams) -> FullRankParams:
        if isinstance(params, FullRankParams):
            return params
        tril = params[self.dim :]
        psi = tril[self._diagonal]
        diagonal = self._scale.forward(psi)
        chol = np.zeros((self.dim, self.dim))
        chol[self._rows, self._cols] = tril if self._stored_factor is None else tril * self._stored_factor
        multipliers = None
        if self.relative:
            multipliers = np.tril(chol, -1)
            chol *= diagonal[:, None]
        chol[np.arange(self.dim), np.arange(self.dim)] = diagonal
        log_norm = np.log(diagonal).sum() + 0.5 * self.dim * _LOG_2PI
        return FullRankParams(params[: self.dim], chol, self._scale.derivative(psi, diagonal), log_norm, multipliers)

    # Triangular solves on rows through BLAS trsm directly: scipy.linalg.solve_triangular goes
    # through LAPACK trtrs, which threaded OpenBLAS makes 10-100x slower for small D.

    def _whiten(self, p: FullRankParams, z: Array) -> Array:
        """u = L⁻¹ (z - μ) for every row of z, shape (B, D): solves U Lᵀ = Z - μ."""
        return dtrsm(1.0, p.chol, z - p.mu, side=1, lower=1, trans_a=1)

    def _precision_times(self, p: FullRankParams, u: Array) -> Array:
        """v = L⁻ᵀ u = Σ⁻¹ (z - μ) for whitened rows u, shape (B, D): solves V L = U."""
        return dtrsm(1.0, p.chol, u, side=1, lower=1)

    def _triangle_gradient(self, p: FullRankParams, left: Array, right: Array,
                           diagonal_offset: Array | float = 0.0) -> Array:
        """Per row b, the gradient G = left_b right_bᵀ - diag(offset) w.r.t. L taken to the stored
        triangle: the diagonal through ψ (dL_ii/dψ_i); with relative entries L_ij = L_ii m_ij,
        ∂/∂m_ij = L_ii G_ij (times dm_ij/dθ_ij for fan_in) and L_ii's gradient gains
        Σ_{j<i} m_ij G_ij = left_i (M right)_i. Shape (B, D(D+1)/2)."""
        grad = left[:, self._rows] * right[:, self._cols]
        diagonal_grad = grad[:, self._diagonal] - diagonal_offset
        if self.relative:
            diagonal = np.diag(p.chol)
            below_scale = diagonal[self._below_rows]
            if self._multiplier_per_stored is not None:
                below_scale = below_scale * self._multiplier_per_stored
            grad[:, self._below] *= below_scale
            diagonal_grad = diagonal_grad + left * (right @ p.multipliers.T)
        grad[:, self._diagonal] = diagonal_grad * p.ddiag
        return grad

    def sample(self, params: Array | FullRankParams, rng: np.random.Generator, n: int) -> Array:
        p = self.prepare(params)
        return p.mu + rng.standard_normal((n, self.dim)) @ p.chol.T

    def sample_with_log_prob(self, params: Array | FullRankParams, rng: np.random.Generator,
                             n: int) -> tuple[Array, Array]:
        p = self.prepare(params)
        eps = rng.standard_normal((n, self.dim))
        return p.mu + eps @ p.chol.T, -0.5 * np.einsum("nd,nd->n", eps, eps) - p.log_norm

    def log_prob(self, params: Array | FullRankParams, z: Array) -> Array:
        p = self.prepare(params)
        u = self._whiten(p, z)
        return -0.5 * np.einsum("nd,nd->n", u, u) - p.log_norm

    def score(self, params: Array | FullRankParams, z: Array) -> Array:
        # log q = -½‖u‖² - Σ log L_ii + c with u = L⁻¹(z-μ):  ∂/∂μ = v := L⁻ᵀu = Σ⁻¹(z-μ),
        # ∂/∂L_ij = v_i u_j - δ_ij / L_ii on the lower triangle, then the chain rule through σ(ψ).
        p = self.prepare(params)
        u = self._whiten(p, z)
        v = self._precision_times(p, u)
        return np.concatenate([v, self._triangle_gradient(p, v, u, 1.0 / np.diag(p.chol))], axis=1)

    def entropy(self, params: Array | FullRankParams) -> float:
        p = self.prepare(params)
        return float(p.log_norm + 0.5 * self.dim)

    def moments(self, params: Array | FullRankParams) -> Moments:
        """N(μ, L Lᵀ); the marginal sds are the norms of L's rows, sd_d² = Σ_j L_dj², in O(D²) instead
        of forming L Lᵀ in O(D³)."""
        p = self.prepare(params)
        return Moments(p.mu, np.sqrt(np.einsum("dj,dj->d", p.chol, p.chol)), gaussian=True, scale_tril=p.chol)

    def moment_matched(self, mean: Array, cov: Array) -> Array:
        """(μ, L Lᵀ) = (mean, cov) minimizes KL(π‖q) over Gaussians: L is cov's Cholesky factor."""
        chol = np.linalg.cholesky(cov)
        diagonal = np.diag(chol)
        stored = chol / diagonal[:, None] if self.relative else chol
        tril = stored[self._rows, self._cols]
        if self._multiplier_per_stored is not None:
            tril[self._below] /= self._multiplier_per_stored
        tril[self._diagonal] = self._scale.inverse(diagonal)
        return np.concatenate([mean, tril])

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        return rng.standard_normal((n, self.dim))

    def reparameterize(self, params: Array | FullRankParams, eps: Array) -> Array:
        p = self.prepare(params)
        return p.mu + eps @ p.chol.T

    def reparameterize_vjp(self, params: Array | FullRankParams, eps: Array, cotangent: Array) -> Array:
        # z = μ + L ε:  ∂z_i/∂μ_i = 1,  ∂z_i/∂L_ij = ε_j.
        p = self.prepare(params)
        return np.concatenate([cotangent, self._triangle_gradient(p, cotangent, eps)], axis=1)

    def grad_log_prob(self, params: Array | FullRankParams, z: Array) -> Array:
        p = self.prepare(params)
        return -self._precision_times(p, self._whiten(p, z))


# --------------------------------------------------------------------------------------------
# Mean-field Student-t
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StudentTParams:
    """Per-λ quantities of the mean-field Student-t."""

    location: MeanFieldParams  # μ, σ, dσ/dψ and log Z
    df: Array  # ν (D,)
    ddf: Array | None  # dν/dρ (D,) when ν is learned, else None
    dconst_ddf: Array | None  # ∂/∂ν [log Γ((ν+1)/2) - log Γ(ν/2) - ½ log(νπ)] when ν is learned


class MeanFieldStudentT(VariationalFamily):
    """Mean-field Student-t q(z) = ∏_d t_{ν_d}(z_d; μ_d, σ_d): heavier tails than a Gaussian bound
    the importance weights w = π/q of independence kernels (docs/methods.md §4).

    λ = (μ, ψ) with σ = σ(ψ) (``scale``: ``softplus`` or ``exp``) and every ν_d = ``df`` fixed; with
    ``learn_df`` the degrees of freedom are learned too: λ = (μ, ψ, ρ) with ν_d = σ(ρ_d), starting
    at ``df``. Density per coordinate, u = (z - μ)/σ:

        log t_ν(z; μ, σ) = log Γ((ν+1)/2) - log Γ(ν/2) - ½ log(νπ) - log σ - (ν+1)/2 · log(1 + u²/ν).

    Reparameterization z = μ + σ ε, ε ~ t_ν, exists only for fixed ν: a t variate is not a
    differentiable transform of ν-free noise, so with ``learn_df`` the family is not
    ``reparameterizable`` and its reparameterization methods raise :class:`ConfigurationError`
    (use fixed ``df`` with reparameterization-based estimators).
    """

    reparameterizable = True

    def __init__(self, dim: int, df: float = 5.0, learn_df: bool = False, scale: ScaleTransform = "softplus",
                 init_mean: float = 0.0, init_std: float = 1.0):
        super().__init__(dim)
        self._scale = _PositiveTransform(scale)
        self.scale = scale
        self.df = _check_positive("df (degrees of freedom)", df)
        self.learn_df = bool(learn_df)
        self.reparameterizable = not self.learn_df  # assembly refuses elbo with learn_df before anything runs
        self.init_mean = float(init_mean)
        self.init_std = _check_positive("init_std", init_std)

    @property
    def num_params(self) -> int:
        return (3 if self.learn_df else 2) * self.dim

    def init_params(self) -> Array:
        unconstrained = [self.init_std, self.df] if self.learn_df else [self.init_std]
        blocks = [np.full(self.dim, self.init_mean)]
        blocks += [np.full(self.dim, float(self._scale.inverse(np.float64(value)))) for value in unconstrained]
        return np.concatenate(blocks)

    def prepare(self, params: Array | StudentTParams) -> StudentTParams:
        if isinstance(params, StudentTParams):
            return params
        d = self.dim
        psi = params[d : 2 * d]
        sigma = self._scale.forward(psi)
        if self.learn_df:
            rho = params[2 * d :]
            df = self._scale.forward(rho)
            ddf = self._scale.derivative(rho, df)
            half = 0.5 * (df + 1.0)
            dconst_ddf = 0.5 * (digamma(half) - digamma(0.5 * df)) - 0.5 / df
        else:
            df, ddf, dconst_ddf = np.full(d, self.df), None, None
        log_norm = np.sum(np.log(sigma) + 0.5 * np.log(df * np.pi) + gammaln(0.5 * df) - gammaln(0.5 * (df + 1.0)))
        location = MeanFieldParams(params[:d], sigma, self._scale.derivative(psi, sigma), log_norm)
        return StudentTParams(location, df, ddf, dconst_ddf)

    def _log_kernel(self, p: StudentTParams, u: Array) -> Array:
        """Σ_d (ν_d+1)/2 · log(1 + u_d²/ν_d) for standardized rows u, shape (B,)."""
        return np.log1p(u * u / p.df) @ (0.5 * (p.df + 1.0))

    def sample(self, params: Array | StudentTParams, rng: np.random.Generator, n: int) -> Array:
        p = self.prepare(params)
        return p.location.mu + p.location.sigma * rng.standard_t(p.df, size=(n, self.dim))

    def sample_with_log_prob(self, params: Array | StudentTParams, rng: np.random.Generator,
                             n: int) -> tuple[Array, Array]:
        p = self.prepare(params)
        t = rng.standard_t(p.df, size=(n, self.dim))
        return p.location.mu + p.location.sigma * t, -self._log_kernel(p, t) - p.location.log_norm

    def log_prob(self, params: Array | StudentTParams, z: Array) -> Array:
        p = self.prepare(params)
        u = (z - p.location.mu) / p.location.sigma
        return -self._log_kernel(p, u) - p.location.log_norm

    def score(self, params: Array | StudentTParams, z: Array) -> Array:
        # With w = (ν+1)/(ν+u²):  ∂/∂μ = w u/σ;  ∂/∂σ = (w u² - 1)/σ;
        # ∂/∂ν = ½ψ((ν+1)/2) - ½ψ(ν/2) - 1/(2ν) - ½ log(1 + u²/ν) + ½ w u²/ν.
        p = self.prepare(params)
        loc = p.location
        u = (z - loc.mu) / loc.sigma
        u2 = u * u
        w = (p.df + 1.0) / (p.df + u2)
        blocks = [w * u / loc.sigma, (w * u2 - 1.0) * (loc.dsigma / loc.sigma)]
        if self.learn_df:
            d_df = p.dconst_ddf - 0.5 * np.log1p(u2 / p.df) + 0.5 * w * u2 / p.df
            blocks.append(d_df * p.ddf)
        return np.concatenate(blocks, axis=1)

    def entropy(self, params: Array | StudentTParams) -> float:
        # H[t_ν(μ, σ)] = log σ + (ν+1)/2 (ψ((ν+1)/2) - ψ(ν/2)) + ½ log ν + log B(ν/2, ½)
        p = self.prepare(params)
        df = p.df
        per_coordinate = (np.log(p.location.sigma) + 0.5 * (df + 1.0) * (digamma(0.5 * (df + 1.0)) - digamma(0.5 * df))
                          + 0.5 * np.log(df) + betaln(0.5 * df, 0.5))
        return float(per_coordinate.sum())

    def moments(self, params: Array | StudentTParams) -> Moments:
        """Location μ and scale σ; mean μ (NaN where ν ≤ 1) and sd σ √(ν/(ν−2)) (∞ where ν ≤ 2)."""
        p = self.prepare(params)
        df, loc = p.df, p.location
        with np.errstate(divide="ignore", invalid="ignore"):
            sd = np.where(df > 2.0, loc.sigma * np.sqrt(df / (df - 2.0)), np.inf)
        return Moments(loc.mu, loc.sigma, mean=np.where(df > 1.0, loc.mu, np.nan), sd=sd,
                       shape={"df": np.broadcast_to(df, loc.mu.shape)})

    def _check_reparameterizable(self) -> None:
        if self.learn_df:
            raise ConfigurationError(
                "meanfield_student_t with learn_df=true is not reparameterizable (a Student-t variate is not a "
                "differentiable transform of noise free of its degrees of freedom); use learn_df=false with a fixed df"
            )

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        self._check_reparameterizable()
        return rng.standard_t(self.df, size=(n, self.dim))

    def reparameterize(self, params: Array | StudentTParams, eps: Array) -> Array:
        self._check_reparameterizable()
        p = self.prepare(params)
        return p.location.mu + p.location.sigma * eps

    def reparameterize_vjp(self, params: Array | StudentTParams, eps: Array, cotangent: Array) -> Array:
        self._check_reparameterizable()
        loc = self.prepare(params).location
        return np.concatenate([cotangent, cotangent * eps * loc.dsigma], axis=1)

    def grad_log_prob(self, params: Array | StudentTParams, z: Array) -> Array:
        p = self.prepare(params)
        u = (z - p.location.mu) / p.location.sigma
        return -(p.df + 1.0) / (p.df + u * u) * u / p.location.sigma


@hookimpl
def register_variational_families(register):
    register("meanfield_gaussian", MeanFieldGaussian, jax="mcsa_bench.accel.families:MeanFieldGaussian")
    register("fullrank_gaussian", FullRankGaussian, jax="mcsa_bench.accel.families:FullRankGaussian")
    register("meanfield_student_t", MeanFieldStudentT, jax="mcsa_bench.accel.families:MeanFieldStudentT")
