"""Gaussian-process models with whitened latents (docs/methods.md §6).

- :class:`GPClassification`: latent GP classification (the parallel-state paper
  §4.3, App. C.2).
- :class:`GPRegression`: robust GP regression with a Student-t likelihood
  (the NeurIPS paper §6.4, App. C.2).

Both share the covariance of the n training inputs and the whitened latent function

    K = a² M(X; ℓ) + (b² + δ) I,   δ = 1e-6,   f = chol(K) u,   u ~ N(0, I_n),
    M_ik = (1 + s + s²/3) e^{−s},  s = √5 r,  r = sqrt(Σ_j (x_ij − x_kj)² / ℓ_j²)   (Matérn-5/2 ARD)

(a, b) = (α, σ) for classification and (σ_f, ε) for regression. Unconstrained latents, in order:
u[0..n−1], log a, log b, log_ell[0..d−1], then the likelihood's own (regression: log σ_y, log ν).

Everything is batched over B latent draws: the kernel on the n(n − 1)/2 pairs below the diagonal
(all a Cholesky factorization reads), B lower triangles (B, n, n) factored in place, and for
the gradient the reverse-mode derivative of the Cholesky factor (Murray 2016, "Differentiation of
the Cholesky decomposition", arXiv:1602.07527) with batched triangular solves, never an inverse.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.linalg import get_blas_funcs, get_lapack_funcs
from scipy.special import expit, gammainccinv, gammaincinv, gammaln, log_expit, logsumexp, psi

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.builtin.models.work import WorkArrays
from mcsa_bench.datasets import load_supervised
from mcsa_bench.metrics import TEST_ACCURACY, TEST_LPD, TEST_RMSE, log_mean_exp

JITTER = 1e-6  # δ of docs/methods.md §6
_LOG_2PI = math.log(2.0 * math.pi)
#: GP-classification predictive: S = 1000 draws of q (docs/methods.md §7), fewer when n is large, since
#: every draw needs its own n×n Cholesky factor: S·n³ ≤ DRAW_BUDGET keeps evaluate() near 1 s
#: (sonar S = 1000, ionosphere 475, breast 128), never below MIN_DRAWS.
MAX_DRAWS, MIN_DRAWS, DRAW_BUDGET = 1000, 128, 1.5e10
#: draws of q for the regression predictive when q has no Gaussian moments (see GPRegression)
REGRESSION_FALLBACK_DRAWS = 1000
#: covariance entries per evaluation chunk (bounds memory to ~ a few hundred MB)
_CHUNK_ENTRIES = 2**22
#: kernel entries per block of the elementwise passes (1 MB per temporary: they stay in cache)
_BLOCK_ENTRIES = 2**17
#: Gauss–Hermite rule for E[σ(f)], f ~ N(m, v) (weights normalized to sum to 1)
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite.hermgauss(64)
_GH_LOG_WEIGHTS = np.log(_GH_WEIGHTS / math.sqrt(math.pi))
#: trapezoid grid on the logit of the Gamma CDF, for the Student-t ⊛ normal predictive
_T_GRID = np.arange(-700.0, 40.0, 0.25)
_potrf = get_lapack_funcs("potrf", dtype=np.float64)
_trsm = get_blas_funcs("trsm", dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Kernel, Cholesky and its adjoint (shared by both models)
# --------------------------------------------------------------------------------------------


def squared_differences(xa: Array, xb: Array) -> Array:
    """(xa_ij − xb_kj)² for every pair (i, k) and feature j, feature-major: (na, d), (nb, d) -> (d, na·nb).

    With it, the ARD distances of B length-scale vectors are one matmul, exact (no cancellation).
    """
    return np.ascontiguousarray(((xa[:, None, :] - xb[None, :, :]) ** 2).reshape(-1, xa.shape[1]).T)


@dataclass(frozen=True)
class LowerPairs:
    """The pairs (i, k), i > k, of n points: the strictly lower triangle of their covariance.

    Built once per model for the training inputs. A covariance has M_ii = 1 and is symmetric, and
    a Cholesky factorization reads only the lower triangle, so the kernel is evaluated on these
    n(n − 1)/2 pairs alone: half the matmul and half the elementwise passes of the full matrix.
    """

    size: int  # n
    index: Array  # flat positions i·n + k of the pairs in an (n, n) matrix, (P,)
    sqdiff: Array  # their squared differences, feature-major (d, P)

    @classmethod
    def of(cls, x: Array) -> LowerPairs:
        rows, cols = np.tril_indices(len(x), -1)
        return cls(len(x), rows * len(x) + cols, np.ascontiguousarray(((x[rows] - x[cols]) ** 2).T))


def _pair_blocks(num_pairs: int, batch: int) -> list[slice]:
    """Column blocks of a (batch, num_pairs) kernel evaluation whose temporaries stay in cache."""
    step = max(1024, _BLOCK_ENTRIES // batch)
    return [slice(start, start + step) for start in range(0, num_pairs, step)]


def _matern52_block(weights: Array, sqdiff: Array, m: Array, p: Array) -> None:
    """M and P of :func:`matern52` for one block of pairs, written into m and p (B, block)."""
    np.matmul(weights, sqdiff, out=m)  # s²
    np.sqrt(m, out=p)
    decay = np.negative(p)
    np.exp(decay, out=decay)
    p += 1.0
    p *= decay  # P = (1 + s) e^{−s}
    m *= decay
    m *= 1.0 / 3.0
    m += p  # M = P + (s²/3) e^{−s}


def matern52(sqdiff: Array, log_ell: Array, out: tuple[Array, Array] | None = None) -> tuple[Array, Array, Array]:
    """Matérn-5/2 correlations of the pairs in ``sqdiff`` (d, P) for B length-scale vectors log_ell (B, d).

    s² = 5 r² = Σ_j w_j (x_j − x'_j)² with w = 5/ℓ². Returns M = (1 + s + s²/3) e^{−s},
    P = (1 + s) e^{−s} = −6 ∂M/∂(s²), each (B, P) (written into ``out`` if given), and w (B, d).
    These elementwise passes are the main cost besides the Cholesky factorization: they run in
    place, block by block.
    """
    weights = 5.0 * np.exp(-2.0 * log_ell)
    m, p = out if out is not None else np.empty((2, len(weights), sqdiff.shape[1]))
    for block in _pair_blocks(sqdiff.shape[1], len(weights)):
        _matern52_block(weights, sqdiff[:, block], m[:, block], p[:, block])
    return m, p, weights


def gp_covariance(pairs: LowerPairs, log_amp: Array, log_noise: Array, log_ell: Array,
                  work: WorkArrays | None = None) -> tuple[Array, Array, Array, Array]:
    """The lower triangle of K = a² M + (b² + δ) I for B hyperparameter draws (log a, log b: (B,), log ℓ: (B, d)).

    Returns K (B, n, n) with a zero upper triangle (what :func:`batched_cholesky` reads), the
    entries a² M of the ``pairs`` (B, P), and P (B, P), w (B, d) of :func:`matern52`. With
    ``work``, K, a² M and P are its arrays: only the lower triangle of K is written, and
    :func:`batched_cholesky` keeps the upper one zero, so K's buffer needs no clearing.
    """
    n, shape = pairs.size, (len(log_amp), pairs.sqdiff.shape[1])
    out = None if work is None else (work.get("kernel", shape), work.get("kernel_derivative", shape))
    m, p, weights = matern52(pairs.sqdiff, log_ell, out)
    amp2 = np.exp(2.0 * log_amp)
    m *= amp2[:, None]
    k = np.zeros((len(m), n, n)) if work is None else work.get("covariance", (len(m), n, n), zeros=True)
    k.reshape(len(m), -1)[:, pairs.index] = m
    diag = np.arange(n)
    k[:, diag, diag] = (amp2 + np.exp(2.0 * log_noise) + JITTER)[:, None]  # M_ii = 1
    return k, m, p, weights


def batched_cholesky(k: Array) -> tuple[Array, Array]:
    """Lower Cholesky factors of the matrices whose lower triangles are k (B, n, n), in place.

    Returns the factors (k itself when it is a C-ordered float array; its upper triangle is
    zeroed) and a mask (B,) of the rows that succeeded. One LAPACK potrf per matrix, on the
    transposed view: LAPACK's upper factor of the Fortran-ordered transpose is L in C order, so
    nothing is copied. Failed rows (not numerically positive definite, from extreme
    hyperparameters, or NaN) get L = I so that downstream arithmetic stays finite; callers turn
    them into −inf.
    """
    k = np.ascontiguousarray(k, dtype=float)
    ok = np.empty(len(k), dtype=bool)
    for b, matrix in enumerate(k):
        _, info = _potrf(matrix.T, lower=0, overwrite_a=1, clean=1)
        ok[b] = info == 0
    ok &= np.isfinite(np.diagonal(k, axis1=1, axis2=2)).all(axis=1)  # NaN need not fail potrf
    k[~ok] = np.eye(k.shape[1])
    return k, ok


def batched_solve_lower(chol: Array, rhs: Array, transpose: bool = False) -> Array:
    """L_b⁻¹ R_b (L_b⁻ᵀ R_b with ``transpose``) for lower factors chol (B, n, n) and rhs (B, n, m).

    One BLAS trsm per matrix: the same arithmetic as scipy.linalg.solve_triangular (LAPACK trtrs
    calls trsm), at half its cost here, without its per-matrix checks and copies.
    """
    out = np.empty(rhs.shape)
    for b in range(len(chol)):
        out[b] = _trsm(1.0, chol[b], rhs[b], lower=1, trans_a=int(transpose))
    return out


def cholesky_adjoint(chol: Array, lt_lbar: Array) -> Array:
    """K̄ = ∂F/∂K (symmetric) from L = chol(K) and Lᵀ L̄, where L̄ = ∂F/∂L; batched (B, n, n).

    Murray (2016), eq. (10), symmetrized: K̄ = ½ (S + Sᵀ), S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹, Φ = the lower
    triangle with the diagonal halved; two triangular solves. Callers pass Lᵀ L̄ rather than L̄:
    for f = L u, L̄ = ḡ uᵀ and Lᵀ L̄ = (Lᵀ ḡ) uᵀ costs O(n²) instead of a matmul.
    """
    phi = np.tril(lt_lbar)
    diag = np.arange(chol.shape[1])
    phi[:, diag, diag] *= 0.5
    left = batched_solve_lower(chol, phi, transpose=True)  # L⁻ᵀ Φ
    s_t = batched_solve_lower(chol, left.transpose(0, 2, 1), transpose=True)  # Sᵀ
    return 0.5 * (s_t + s_t.transpose(0, 2, 1))


def _normal_log_prior(h: Array, sd: Array) -> tuple[Array, Array]:
    """Σ_j log N(h_j; 0, sd_j²) for h (B, k), and its gradient."""
    value = -0.5 * np.sum((h / sd) ** 2, axis=1) - np.sum(np.log(sd)) - 0.5 * h.shape[1] * _LOG_2PI
    return value, -h / sd**2


# --------------------------------------------------------------------------------------------
# Predictive integrals
# --------------------------------------------------------------------------------------------


def logistic_normal_log_probs(mean: Array, var: Array) -> tuple[Array, Array]:
    """(log E[σ(f)], log E[σ(−f)]) for f ~ N(mean, var), by 64-node Gauss–Hermite quadrature."""
    f = mean[..., None] + np.sqrt(2.0 * var)[..., None] * _GH_NODES
    return (logsumexp(_GH_LOG_WEIGHTS + log_expit(f), axis=-1),
            logsumexp(_GH_LOG_WEIGHTS + log_expit(-f), axis=-1))


def student_t_normal_log_density(y: Array, mean: Array, var: Array, nu: float, scale: float) -> Array:
    """log ∫ StudentT(y; ν, f, scale) N(f; mean, var) df, elementwise.

    StudentT(ν, f, σ) = ∫ N(y; f, σ²/w) Gamma(w; ν/2, rate ν/2) dw, so f integrates out in closed
    form and w is integrated by the trapezoid rule in t = logit G(w) (G the Gamma CDF), where the
    integrand is smooth and the far tail (outliers explained by a tiny w) is resolved down to
    G(w) = e^{−700}. Accuracy against adaptive quadrature: < 1e-9 for ν ≥ 1, < 1e-3 for ν ≥ 0.3.
    """
    t, k = _T_GRID, 0.5 * nu
    w = np.where(t < 0, gammaincinv(k, expit(t)), gammainccinv(k, expit(-t))) / k
    keep = w > 0  # quantiles that underflow carry no mass
    t, w = t[keep], w[keep]
    with np.errstate(over="ignore"):  # an infinite variance is a zero density
        total_var = var[..., None] + scale**2 / w
        log_normal = -0.5 * (np.log(total_var) + _LOG_2PI + (y - mean)[..., None] ** 2 / total_var)
    log_weights = log_expit(t) + log_expit(-t) + math.log(t[1] - t[0])  # dG/dt dt
    return logsumexp(log_normal + log_weights, axis=-1)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class _WhitenedGP(Model):
    """The shared machinery; subclasses set the likelihood, the hyperprior and the metrics.

    The log joint reuses its work arrays between calls (:class:`~mcsa_bench.builtin.models.work.WorkArrays`).

    Hyperparameters h = z[:, n:] = (log a, log b, log ℓ_1..ℓ_d, likelihood parameters...).
    """

    task: ClassVar[str]
    amp_noise_names: ClassVar[tuple[str, str]]
    likelihood_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dataset: str, test_fraction: float, split_seed: int, standardize: bool = True,
                 max_rows: int | None = None):
        if not isinstance(dataset, str):
            raise ConfigurationError(f"dataset must be a data set name or a CSV path, got {dataset!r}")
        self.data = load_supervised(dataset, task=self.task, test_fraction=float(test_fraction),
                                    split_seed=split_seed, standardize_features=standardize, max_rows=max_rows)
        self.num_train, self.num_features = self.data.x_train.shape
        self.dim = self.num_train + 2 + self.num_features + len(self.likelihood_names)
        self._pairs = LowerPairs.of(self.data.x_train)
        self._work = WorkArrays()  # the log joint's covariances and kernel values, reused between calls

    def latent_names(self) -> list[str]:
        return ([f"u[{i}]" for i in range(self.num_train)] + list(self.amp_noise_names)
                + [f"log_ell[{j}]" for j in range(self.num_features)] + list(self.likelihood_names))

    @abstractmethod
    def _log_likelihood(self, f: Array, lik: Array) -> tuple[Array, Array, Array]:
        """(Σ_i log p(y_i | f_i, lik) (B,), its gradient in f (B, n) and in lik (B, k))."""

    @abstractmethod
    def _log_prior(self, h: Array) -> tuple[Array, Array]:
        """log p(h) including log-Jacobians (B,), and its gradient (B, len(h))."""

    def _forward(self, z: Array) -> tuple[Array, Array, tuple[Array, ...]]:
        """(log p(x, z) (B,), the rows set to −inf (B,), the intermediates the gradient reuses)."""
        n, d = self.num_train, self.num_features
        u, h = z[:, :n], z[:, n:]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # extreme z -> −inf
            k, offdiag, p, weights = gp_covariance(self._pairs, h[:, 0], h[:, 1], h[:, 2 : 2 + d], self._work)
            chol, ok = batched_cholesky(k)
            f = (chol @ u[..., None])[..., 0]
            log_lik, grad_f, grad_lik = self._log_likelihood(f, h[:, 2 + d :])
            log_prior, grad_prior = self._log_prior(h)
            value = log_lik + log_prior - 0.5 * np.sum(u * u, axis=1) - 0.5 * n * _LOG_2PI
        bad = ~ok | np.isnan(value)
        value[bad] = -np.inf
        return value, bad, (offdiag, p, weights, chol, grad_f, grad_lik, grad_prior)

    def log_joint(self, z: Array) -> Array:
        return self._forward(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        value, bad, (offdiag, p, weights, chol, grad_f, grad_lik, grad_prior) = self._forward(z)
        n, d = self.num_train, self.num_features
        u, h = z[:, :n], z[:, n:]
        with np.errstate(over="ignore", invalid="ignore"):
            lt_g = (grad_f[:, None, :] @ chol)[:, 0]  # Lᵀ ∂ℓ/∂f: the gradient of the likelihood in u
            kbar = cholesky_adjoint(chol, lt_g[:, :, None] * u[:, None, :])
            amp2, noise2 = np.exp(2.0 * h[:, 0]), np.exp(2.0 * h[:, 1])
            trace = np.trace(kbar, axis1=1, axis2=2)
            # K̄ and ∂K/∂θ are symmetric: their contraction is the diagonal's plus twice the pairs'.
            kbar_pairs = kbar.reshape(len(z), -1)[:, self._pairs.index]
            grad = np.empty_like(z)
            grad[:, :n] = lt_g - u
            # ∂K/∂log a = 2 a² M (M_ii = 1),  ∂K/∂log b = 2 b² I.
            grad[:, n] = 2.0 * (amp2 * trace + 2.0 * np.einsum("bp,bp->b", kbar_pairs, offdiag))
            grad[:, n + 1] = 2.0 * noise2 * trace
            # ∂K_ik/∂log ℓ_j = a² P_ik w_j (x_ij − x_kj)² / 3 (w = 5/ℓ², s² = Σ_j w_j (x_ij − x_kj)²), zero
            # on the diagonal: contracted with K̄ it is one matmul of K̄ ∘ P with the pairs' squared differences.
            kbar_pairs *= p
            grad[:, n + 2 : n + 2 + d] = (2.0 * amp2 / 3.0)[:, None] * weights * (kbar_pairs @ self._pairs.sqdiff.T)
            grad[:, n + 2 + d :] = grad_lik
            grad[:, n:] += grad_prior
        grad[bad] = 0.0
        return value, grad

    def _test_projection(self, h: Array) -> tuple[Array, Array, Array]:
        """For B hyperparameter rows h: A = L⁻¹ K(X, X*) (B, n, m), the prior variance of f* (B, 1), ok (B,).

        The GP conditional of f* given f = L u is N(Aᵀ u, prior − Σ_i A_i²). The white-noise term
        b² + δ belongs to the latent process (a nugget), so it is part of f*'s prior variance too.
        """
        d = self.num_features
        k, _, _, _ = gp_covariance(self._pairs, h[:, 0], h[:, 1], h[:, 2 : 2 + d])
        chol, ok = batched_cholesky(k)
        cross, _, _ = matern52(squared_differences(self.data.x_train, self.data.x_test), h[:, 2 : 2 + d])
        amp2 = np.exp(2.0 * h[:, 0])
        cross = cross.reshape(len(h), self.num_train, -1) * amp2[:, None, None]
        projection = batched_solve_lower(chol, cross)
        prior_var = amp2 + np.exp(2.0 * h[:, 1]) + JITTER
        return projection, prior_var[:, None], ok

    def artifacts(self) -> dict[str, dict[str, Array]]:
        return {"split": {"train_index": self.data.train_index, "test_index": self.data.test_index}}


class GPClassification(_WhitenedGP):
    """Latent GP classification (docs/methods.md §6 ``gp_classification``).

        log α, log σ, log ℓ_j ~ N(0, 1);  K = α² M(X; ℓ) + (σ² + δ) I;  f = chol(K) u, u ~ N(0, I_n);
        y_i ~ BernoulliLogit(f_i)

    Latents: u[0..n−1], log_alpha, log_sigma, log_ell[0..d−1]; D = n + d + 2. ``dataset``: sonar,
    ionosphere, breast (or a CSV with a 0/1 target); ``test_fraction`` of the rows is held out by a
    split seeded with ``split_seed``. ``standardize=False`` keeps the raw features: the paper
    standardized only breast, and with log ℓ ~ N(0, 1) standardized sonar makes the training
    points nearly uncorrelated (test LPD stays at log ½; raw features reach the paper's −0.36).
    Metrics: ``test_lpd`` and ``test_accuracy`` over :attr:`predictive_draws` draws z_s of q (see
    :data:`DRAW_BUDGET`); per draw, the GP conditional of f* given f with its variance, and
    p(y* | z_s) = E[σ(±f*)] by Gauss–Hermite quadrature.
    """

    task = "classification"
    amp_noise_names = ("log_alpha", "log_sigma")

    def __init__(
        self,
        dataset: str = "sonar",
        test_fraction: float = 0.1,
        split_seed: int = 0,
        standardize: bool = True,
        max_rows: int | None = None,
    ):
        super().__init__(dataset, test_fraction, split_seed, standardize, max_rows)
        self._prior_sd = np.ones(2 + self.num_features)
        self.predictive_draws = int(np.clip(DRAW_BUDGET // self.num_train**3, MIN_DRAWS, MAX_DRAWS))

    def _log_likelihood(self, f: Array, lik: Array) -> tuple[Array, Array, Array]:
        y = self.data.y_train
        return np.sum(y * f - np.logaddexp(0.0, f), axis=1), y - expit(f), lik[:, :0]

    def _log_prior(self, h: Array) -> tuple[Array, Array]:
        return _normal_log_prior(h, self._prior_sd)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"test_lpd": TEST_LPD, "test_accuracy": TEST_ACCURACY}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """``test_lpd`` (mean log predictive density) and ``test_accuracy`` on the test rows.

        Draws whose covariance is not numerically positive definite are left out.
        """
        if not self.data.has_test:
            return {}
        n = self.num_train
        z = q.sample(rng, self.predictive_draws)
        log_p1, log_p0 = [], []
        size = max(1, _CHUNK_ENTRIES // (n * n))
        for chunk in (z[start : start + size] for start in range(0, len(z), size)):
            projection, prior_var, ok = self._test_projection(chunk[:, n:])
            mean = np.einsum("bnm,bn->bm", projection, chunk[:, :n])
            var = np.maximum(prior_var - np.einsum("bnm,bnm->bm", projection, projection), JITTER)
            one, zero = logistic_normal_log_probs(mean[ok], var[ok])
            log_p1.append(one)
            log_p0.append(zero)
        log_p1, log_p0 = np.concatenate(log_p1), np.concatenate(log_p0)
        y = self.data.y_test
        log_lik = np.where(y == 1.0, log_p1, log_p0)  # (S, m): log p(y*_i | z_s)
        predicted = np.mean(np.exp(log_p1), axis=0) >= 0.5
        return {
            "test_lpd": float(np.mean(log_mean_exp(log_lik, axis=0))),
            "test_accuracy": float(np.mean(predicted == (y == 1.0))),
        }


class GPRegression(_WhitenedGP):
    """Robust GP regression with a Student-t likelihood (docs/methods.md §6 ``gp_regression``).

        log σ_f, log ε, log σ_y ~ N(0, 4²);  log ℓ_j ~ N(0, 0.2²);  ν ~ Gamma(shape 4, scale 10);
        K = σ_f² M(X; ℓ) + (ε² + δ) I;  f = chol(K) u, u ~ N(0, I_n);  y_i ~ StudentT(ν, f_i, σ_y)

    on standardized targets. Latents: u[0..n−1], log_sigma_f, log_epsilon, log_ell[0..d−1],
    log_sigma_y, log_nu (ν through log, with its log-Jacobian); D = n + d + 4. ``dataset``: boston,
    concrete (or a CSV with a numeric target).

    Prediction as NeurIPS 2022 §6.4: hyperparameters at the mode of q — for a Gaussian q over the
    unconstrained latents, its mean — and f* marginalized over q(u): f* = Aᵀ u + noise is Gaussian
    for u ~ N(μ_u, Σ_u), and the Student-t ⊛ normal density is a 1-d quadrature
    (:func:`student_t_normal_log_density`), so no Monte Carlo draws are needed. When q has no
    Gaussian moments, the mean and covariance are estimated from :data:`REGRESSION_FALLBACK_DRAWS`
    draws. Metrics ``test_lpd`` and ``test_rmse`` (predictive mean Aᵀ μ_u) on the original scale.
    """

    task = "regression"
    amp_noise_names = ("log_sigma_f", "log_epsilon")
    likelihood_names = ("log_sigma_y", "log_nu")

    def __init__(self, dataset: str = "boston", test_fraction: float = 0.1, split_seed: int = 0,
                 max_rows: int | None = None):
        super().__init__(dataset, test_fraction, split_seed, max_rows=max_rows)
        # N(0, sd²) priors of log σ_f, log ε, log ℓ, log σ_y; log ν has its own (Gamma) prior.
        self._prior_sd = np.concatenate([[4.0, 4.0], np.full(self.num_features, 0.2), [4.0]])

    def _log_likelihood(self, f: Array, lik: Array) -> tuple[Array, Array, Array]:
        log_scale, log_nu = lik[:, :1], lik[:, 1:]
        scale, nu = np.exp(log_scale), np.exp(log_nu)
        t = (self.data.y_train - f) / scale
        t2 = t * t
        log1p = np.log1p(t2 / nu)
        ratio = t2 / (nu + t2)
        n = f.shape[1]
        const = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (np.log(nu) + math.log(math.pi)) - log_scale
        value = n * const[:, 0] - 0.5 * (nu[:, 0] + 1.0) * np.sum(log1p, axis=1)
        grad_f = (nu + 1.0) * t / (scale * (nu + t2))
        grad_log_scale = -n + (nu[:, 0] + 1.0) * np.sum(ratio, axis=1)
        d_nu = (n * (0.5 * psi(0.5 * (nu + 1.0)) - 0.5 * psi(0.5 * nu) - 0.5 / nu)[:, 0]
                + np.sum(-0.5 * log1p + 0.5 * (nu + 1.0) / nu * ratio, axis=1))
        return value, grad_f, np.stack([grad_log_scale, nu[:, 0] * d_nu], axis=1)

    def _log_prior(self, h: Array) -> tuple[Array, Array]:
        value, grad = _normal_log_prior(h[:, :-1], self._prior_sd)
        # ν ~ Gamma(4, scale 10) plus the log-Jacobian log ν: 4 log ν − ν/10 − log Γ(4) − 4 log 10.
        log_nu = h[:, -1]
        nu = np.exp(log_nu)
        value = value + 4.0 * log_nu - nu / 10.0 - gammaln(4.0) - 4.0 * math.log(10.0)
        return value, np.concatenate([grad, (4.0 - nu / 10.0)[:, None]], axis=1)

    def _moments(self, q: Approximation, rng: np.random.Generator) -> tuple[Array, Array]:
        moments = q.gaussian_moments()
        if moments is not None:
            return moments
        z = q.sample(rng, REGRESSION_FALLBACK_DRAWS)
        return z.mean(axis=0), np.cov(z, rowvar=False)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"test_lpd": TEST_LPD, "test_rmse": TEST_RMSE}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """``test_lpd`` and ``test_rmse`` on the original target scale (docs/methods.md §7)."""
        if not self.data.has_test:
            return {}
        n = self.num_train
        mean_z, cov_z = self._moments(q, rng)
        h = mean_z[n:]
        projection, prior_var, ok = self._test_projection(h[None])
        if not ok[0]:
            return {"test_lpd": float("nan"), "test_rmse": float("nan")}
        projection = projection[0]
        mean = projection.T @ mean_z[:n]
        var = (prior_var[0] - np.sum(projection**2, axis=0)
               + np.sum(projection * (cov_z[:n, :n] @ projection), axis=0))  # + diag(Aᵀ Σ_u A)
        scale, nu = np.exp(h[-2]), np.exp(h[-1])
        log_dens = student_t_normal_log_density(self.data.y_test, mean, np.maximum(var, JITTER), nu, scale)
        y_std = float(self.data.y_scale.std)
        return {
            "test_lpd": float(np.mean(log_dens) - math.log(y_std)),
            "test_rmse": float(y_std * np.sqrt(np.mean((mean - self.data.y_test) ** 2))),
        }
