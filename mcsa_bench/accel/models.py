"""JAX twins of the built-in models (docs/models.md, "The JAX twins").

``twin(model)`` builds a :class:`JaxModel` from a numpy model object, reusing its arrays (data,
standardization, split, priors, hyper-parameters), so preprocessing lives once, in the numpy model.
The twin's ``log_joint`` takes one latent vector z (D,) and is pure JAX (jit, vmap and grad
apply); its ``evaluate(key, q)`` computes the numpy model's ``evaluate`` metrics, under the same
names, with the same estimators and numbers of draws of q, and vmaps over replicates (over the key
and q's parameters). The arithmetic follows the numpy model's, so the two agree to rounding
(tests/accel/test_models.py: 1e-10 relative for log densities and gradients).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import gammainc, gammaincc, gammaln, logsumexp

from mcsa_bench.accel.metrics import log_mean_exp, log_z_metrics
from mcsa_bench.api import ConfigurationError, Model
from mcsa_bench.builtin.models import (
    BayesianNeuralNetwork,
    GaussianMixture,
    GaussianTarget,
    GPClassification,
    GPRegression,
    HierarchicalLogistic,
    ManyWell,
    Radon,
    StochasticVolatility,
    StudentTMixture,
    bnn,
    gaussian,
    gp,
    logistic,
    radon,
    stochastic_volatility,
)
from mcsa_bench.builtin.models.many_well import well_log_density
from mcsa_bench.metrics import KL_STANDARD_ERRORS, LOG_Z_BLOCK, LOG_Z_DRAWS

_LOG_2PI = math.log(2.0 * math.pi)
#: entries of the n×n covariances per chunk of GP-classification predictive draws (8 MB per replicate
#: and array); the numpy model's chunks are 4× larger, but here a chunk is vmapped over replicates too
PREDICTIVE_CHUNK_ENTRIES = 2**20
#: draws of q per chunk of the BNN's predictive (a chunk's hidden layer: 128 · H · n_test floats)
BNN_CHUNK = 128
#: Newton steps of the Gamma quantiles in the Student-t ⊛ normal predictive (tests/accel/test_models.py:
#: the predictive density equals the numpy quadrature to 1e-10 from ν = 0.3 to 10⁴)
_NEWTON_STEPS = 12


class JaxQ(Protocol):
    """q(·; λ) for a twin's ``evaluate``, one replicate's (implemented by mcsa_bench/accel/families.py)."""

    def sample_with_log_prob(self, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        """n draws z (n, D) and log q(z) (n,)."""

    def log_prob(self, z: jax.Array) -> jax.Array:
        """log q(z) (n,) of z (n, D)."""

    def moments(self) -> tuple[jax.Array, jax.Array] | None:
        """(mean (D,), covariance (D, D)) when q is Gaussian, else None (numpy's ``gaussian_moments``):
        a model whose metric has a closed form for Gaussian q (the Gaussian target's KL, the GP
        regression predictive) takes that path, others use draws as the numpy model does."""

    def marginal_moments(self) -> tuple[jax.Array, jax.Array]:
        """(mean (D,), sd (D,)) of q's marginals."""


@dataclass(frozen=True)
class JaxModel:
    """A model in JAX: ``log_joint`` z (D,) -> scalar; ``evaluate`` (key, q) -> {metric: scalar} with
    the numpy model's metric names (None when it has no metrics, e.g. no test rows).

    ``exact_inclusive_gradient(family, λ)``: the numpy model's ``exact_inclusive_gradient`` (the gradient
    diagnostic's ``grad_bias``), for a family whose q is Gaussian; None for a model that has none.

    ``data``: the arrays the twin was built from (the training and test split, a Gaussian target's
    moments: whatever may follow the run's seed), and ``with_data(arrays)`` the same twin built on
    other arrays of the same shapes, e.g. another seed's split (tracers inside a vmapped program: a
    cell's replicates each on their own data, accel/engine.py). None for a twin that cannot."""

    name: str
    dim: int
    log_joint: Callable[[jax.Array], jax.Array]
    evaluate: Callable[[jax.Array, JaxQ], dict[str, jax.Array]] | None
    metric_names: tuple[str, ...]  # every metric evaluate may return (some only for some q: a KL's standard error)
    data: tuple = ()
    with_data: Callable[[Sequence], JaxModel] | None = None
    #: (family twin, λ) -> ∇_λ KL(π‖q) for a Gaussian q, where the numpy model knows it (the Gaussian target)
    exact_inclusive_gradient: Callable | None = None


def twin(model: Model, dtype=jnp.float64) -> JaxModel:
    """The JAX twin of a built-in model object; its arrays in ``dtype`` (float32 as an option).

    A builder reads every value that may differ between two seeds' models through ``const`` (the
    others are the configuration's: shapes, sizes, constants), so the twin's ``with_data`` is the
    builder run again with ``const`` handing out the given arrays in the same order."""
    found = _BUILDERS.get(type(model))
    if found is None:
        raise ConfigurationError(f"model {type(model).__name__} has no JAX twin; the built-in models have one: "
                                 f"{', '.join(name for name, _ in _BUILDERS.values())}")
    name, build = found
    data = []

    def recorded(array):
        data.append(jnp.asarray(array, dtype=dtype))
        return data[-1]

    def with_data(arrays: Sequence) -> JaxModel:
        given = iter(arrays)
        return replace(build(model, name, lambda _: next(given)), data=tuple(arrays), with_data=with_data)

    return replace(build(model, name, recorded), data=tuple(data), with_data=with_data)


def _draws(key: jax.Array, q: JaxQ, n: int) -> jax.Array:
    return q.sample_with_log_prob(key, n)[0]


def _where_finite_or(value: jax.Array, fallback: float) -> jax.Array:
    """The numpy models' "NaN log density -> −inf" rule (0·∞ or ∞ − ∞ once exp overflows)."""
    return jnp.where(jnp.isnan(value), fallback, value)


# --------------------------------------------------------------------------------------------
# gaussian
# --------------------------------------------------------------------------------------------


def gaussian_kl(mean0: jax.Array, cov0: jax.Array, mean1: jax.Array, cov1: jax.Array) -> jax.Array:
    """KL(N(mean0, cov0) ‖ N(mean1, cov1)) as :func:`mcsa_bench.builtin.models.gaussian.gaussian_kl`."""
    chol0, chol1 = jnp.linalg.cholesky(cov0), jnp.linalg.cholesky(cov1)
    solved_cov = solve_triangular(chol1, chol0, lower=True)
    solved_mean = solve_triangular(chol1, mean1 - mean0, lower=True)
    logdet0 = 2.0 * jnp.sum(jnp.log(jnp.diag(chol0)))
    logdet1 = 2.0 * jnp.sum(jnp.log(jnp.diag(chol1)))
    return 0.5 * (jnp.sum(solved_cov**2) + solved_mean @ solved_mean - mean0.size + logdet1 - logdet0)


def monte_carlo_kl(log_joint, z_pi: jax.Array, q: JaxQ, z_q: jax.Array, log_q: jax.Array) -> dict[str, jax.Array]:
    """The Gaussian target's KL(π‖q) and KL(q‖π) from draws z_pi of π and z_q of q (log q(z_q) = log_q), for
    a q without Gaussian moments, with their standard errors sd/√M, as GaussianTarget.evaluate."""
    return (_mean_with_se("kl_inclusive", jax.vmap(log_joint)(z_pi) - q.log_prob(z_pi))
            | _mean_with_se("kl_exclusive", log_q - jax.vmap(log_joint)(z_q)))


def _mean_with_se(name: str, values: jax.Array) -> dict[str, jax.Array]:
    """mcsa_bench.metrics.mean_with_se: the mean of independent draws' values and its standard error sd/√M."""
    return {name: jnp.mean(values), f"{name}_se": jnp.std(values, ddof=1) / math.sqrt(values.shape[0])}


def _gaussian(model: GaussianTarget, name: str, const) -> JaxModel:
    mean, cov, precision, chol = const(model.mean), const(model.cov), const(model.precision), const(model._chol)
    log_norm, draws = const(model._log_norm), gaussian._MONTE_CARLO_DRAWS  # follows the target, hence the seed

    def log_joint(z):
        r = z - mean
        return log_norm - 0.5 * (r @ precision) @ r

    def evaluate(key, q):
        moments = q.moments()
        if moments is not None:
            q_mean, q_cov = moments
            return {"kl_inclusive": gaussian_kl(mean, cov, q_mean, q_cov),
                    "kl_exclusive": gaussian_kl(q_mean, q_cov, mean, cov)}
        key_pi, key_q = jax.random.split(key)
        z_pi = mean + jax.random.normal(key_pi, (draws, model.dim), dtype=mean.dtype) @ chol.T  # GaussianTarget.sample
        return monte_carlo_kl(log_joint, z_pi, q, *q.sample_with_log_prob(key_q, draws))

    def exact_inclusive_gradient(family, params):
        """-E_π[∇_λ log q(z; λ)] by GaussianTarget's symmetric sigma points m ± √D L e_i, exact for a
        Gaussian q (its score is a polynomial of degree 2 in z)."""
        spread = math.sqrt(model.dim) * chol.T
        points = jnp.concatenate([mean + spread, mean - spread])
        return -jax.grad(lambda p: jnp.mean(family.bind(p).log_prob(points)))(params)

    return JaxModel(name, model.dim, log_joint, evaluate, ("kl_inclusive", "kl_exclusive", *KL_STANDARD_ERRORS),
                    exact_inclusive_gradient=exact_inclusive_gradient)


# --------------------------------------------------------------------------------------------
# logistic
# --------------------------------------------------------------------------------------------


def _logistic(model: HierarchicalLogistic, name: str, const) -> JaxModel:
    d, hierarchical, log_prior_const = model.num_features, model.hierarchical, model._log_prior_const
    design = const(model._signed_design)  # (d + 1, n): signed logits t = (β, α) @ design

    def log_joint(z):
        log_lik = jnp.sum(jax.nn.log_sigmoid(z[: d + 1] @ design))
        if not hierarchical:
            return log_lik + log_prior_const - 0.5 * z @ z
        log_scales = z[d + 1 :]  # log σ_β, log σ_α
        variances = jnp.exp(2.0 * log_scales)
        scaled_sq_norms = jnp.stack([z[:d] @ z[:d], z[d] ** 2]) / variances
        log_prior = log_prior_const - (d - 1) * log_scales[0] - 0.5 * jnp.sum(scaled_sq_norms + variances)
        return log_lik + log_prior

    if not model.data.has_test:
        return JaxModel(name, model.dim, log_joint, None, ())
    test_design, y_test = const(model._signed_test_design), const(model.data.y_test)

    def evaluate(key, q):
        """``test_lpd`` and ``test_accuracy`` as HierarchicalLogistic.evaluate (its _mean_sigmoid)."""
        t = _draws(key, q, logistic.PREDICTIVE_DRAWS)[:, : d + 1] @ test_design  # (S, m)
        decay = jnp.exp(-jnp.abs(t))
        observed = jnp.mean(jnp.where(t < 0.0, decay, 1.0) / (decay + 1.0), axis=0)
        far = log_mean_exp(jnp.minimum(t, 0.0) - jnp.log1p(decay), axis=0)  # log space, for underflow
        log_predictive = jnp.where(observed < jnp.finfo(observed.dtype).tiny, far, jnp.log(observed))
        right = jnp.where(y_test == 1.0, observed >= 0.5, observed > 0.5)
        return {"test_lpd": jnp.mean(log_predictive), "test_accuracy": jnp.mean(right, dtype=t.dtype)}

    return JaxModel(name, model.dim, log_joint, evaluate, ("test_lpd", "test_accuracy"))


# --------------------------------------------------------------------------------------------
# Gaussian processes (whitened latents; mcsa_bench/builtin/models/gp.py)
# --------------------------------------------------------------------------------------------


@jax.custom_jvp
def matern52(s2: jax.Array) -> jax.Array:
    """M = (1 + s + s²/3) e^{−s} of s² = Σ_j w_j (x_j − x'_j)², in gp.matern52's order of operations.

    Its derivative −P/6, P = (1 + s) e^{−s} (as the numpy gradient uses), is finite at s = 0
    (the diagonal, duplicated rows), where differentiating through √s² would give 0·∞."""
    s = jnp.sqrt(s2)
    decay = jnp.exp(-s)
    return (s2 * decay) * (1.0 / 3.0) + (s + 1.0) * decay


@matern52.defjvp
def _matern52_jvp(primals, tangents):
    (s2,), (ds2,) = primals, tangents
    s = jnp.sqrt(s2)
    decay = jnp.exp(-s)
    p = (s + 1.0) * decay
    return (s2 * decay) * (1.0 / 3.0) + p, -p / 6.0 * ds2


def cholesky_or_identity(k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(L, ok): the lower Cholesky factor of the symmetric k (n, n), or L = I and ok = 0 where the
    factorization fails (gp.batched_cholesky's rule: callers make the log density −inf there).

    JAX's factor of a matrix that does not factor is NaN, and a non-finite entry of L reaches the
    diagonal entry of its row (L_ii = √(K_ii − Σ_j L_ij²)): the diagonal tells."""
    chol = jax.lax.linalg.cholesky(k, symmetrize_input=False)
    ok = jnp.all(jnp.isfinite(jnp.diagonal(chol)))
    return jnp.where(ok, chol, jnp.eye(k.shape[-1], dtype=k.dtype)), ok.astype(k.dtype)


@jax.custom_vjp
def whitened(k: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(f = L u, ok) with (L, ok) = cholesky_or_identity(k): the whitened GP's latent function.

    Its reverse-mode derivative is the numpy model's (gp.cholesky_adjoint): ū = Lᵀ f̄ and, from
    L̄ = f̄ uᵀ, K̄ = ½ (S + Sᵀ), S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹ (Murray 2016, eq. 10; Φ: the lower triangle with
    the diagonal halved), where Lᵀ L̄ = (Lᵀ f̄) uᵀ is an outer product: two triangular solves, no
    matrix product of two n×n factors. K̄ is zero where the factorization failed, so no NaN from
    it reaches a gradient."""
    chol, ok = cholesky_or_identity(k)
    return chol @ u, ok


def _whitened_forward(k, u):
    chol, ok = cholesky_or_identity(k)
    return (chol @ u, ok), (chol, ok, u)


def _whitened_backward(residuals, cotangents):
    chol, ok, u = residuals
    lt_g = chol.T @ cotangents[0]  # Lᵀ f̄
    phi = jnp.tril(jnp.outer(lt_g, u))
    phi = phi - 0.5 * jnp.diag(jnp.diag(phi))
    left = solve_triangular(chol, phi, lower=True, trans=1)  # L⁻ᵀ Φ
    s_t = solve_triangular(chol, left.T, lower=True, trans=1)  # Sᵀ
    return ok * 0.5 * (s_t + s_t.T), lt_g


whitened.defvjp(_whitened_forward, _whitened_backward)


@dataclass(frozen=True)
class _GPKernel:
    """The covariance of a whitened GP model's training inputs, and its cross-covariance with the test inputs."""

    num_train: int
    num_features: int
    sqdiff: jax.Array  # (d, n·n): squared differences of the training inputs, feature-major
    cross_sqdiff: jax.Array  # (d, n·m): of the training and test inputs

    def covariance(self, h: jax.Array) -> jax.Array:
        """K = a² M + (b² + δ) I for h = (log a, log b, log ℓ, ...), with gp.gp_covariance's diagonal a² + b² + δ."""
        n = self.num_train
        amp2 = jnp.exp(2.0 * h[0])
        k = amp2 * matern52(self._weights(h) @ self.sqdiff).reshape(n, n)
        diagonal = jnp.arange(n)
        return k.at[diagonal, diagonal].set(amp2 + jnp.exp(2.0 * h[1]) + gp.JITTER)

    def _weights(self, h: jax.Array) -> jax.Array:
        return 5.0 * jnp.exp(-2.0 * h[2 : 2 + self.num_features])  # w = 5/ℓ²

    def test_projection(self, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(A = L⁻¹ K(X, X*) (n, m), the prior variance of f*, ok) as _WhitenedGP._test_projection."""
        chol, ok = cholesky_or_identity(self.covariance(h))
        amp2 = jnp.exp(2.0 * h[0])
        cross = matern52(self._weights(h) @ self.cross_sqdiff).reshape(self.num_train, -1) * amp2
        return solve_triangular(chol, cross, lower=True), amp2 + jnp.exp(2.0 * h[1]) + gp.JITTER, ok


def _gp_kernel(model, const) -> _GPKernel:
    x_train, x_test = model.data.x_train, model.data.x_test
    return _GPKernel(model.num_train, model.num_features, const(gp.squared_differences(x_train, x_train)),
                     const(gp.squared_differences(x_train, x_test)))


def _normal_log_prior(h: jax.Array, sd: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum((h / sd) ** 2) - jnp.sum(jnp.log(sd)) - 0.5 * h.shape[0] * _LOG_2PI


def _whitened_log_joint(kernel: _GPKernel, log_likelihood, log_prior):
    """log p(x, z) of a whitened GP model (_WhitenedGP._forward): −inf where K does not factor or the value is NaN."""
    n, d = kernel.num_train, kernel.num_features

    def log_joint(z):
        u, h = z[:n], z[n:]
        f, ok = whitened(kernel.covariance(h), u)
        value = log_likelihood(f, h[2 + d :]) + log_prior(h) - 0.5 * u @ u - 0.5 * n * _LOG_2PI
        return jnp.where((ok > 0) & ~jnp.isnan(value), value, -jnp.inf)

    return log_joint


def _logistic_normal_log_probs(mean: jax.Array, var: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(log E[σ(f)], log E[σ(−f)]), f ~ N(mean, var), by gp.logistic_normal_log_probs's Gauss–Hermite rule."""
    nodes, log_weights = (jnp.asarray(a, dtype=mean.dtype) for a in (gp._GH_NODES, gp._GH_LOG_WEIGHTS))
    f = mean[..., None] + jnp.sqrt(2.0 * var)[..., None] * nodes
    return (logsumexp(log_weights + jax.nn.log_sigmoid(f), axis=-1),
            logsumexp(log_weights + jax.nn.log_sigmoid(-f), axis=-1))


def _gp_classification(model: GPClassification, name: str, const) -> JaxModel:
    kernel, n, y_train = _gp_kernel(model, const), model.num_train, const(model.data.y_train)
    prior_sd = const(model._prior_sd)
    log_joint = _whitened_log_joint(kernel, lambda f, lik: jnp.sum(y_train * f - jnp.logaddexp(0.0, f)),
                                    lambda h: _normal_log_prior(h, prior_sd))
    if not model.data.has_test:
        return JaxModel(name, model.dim, log_joint, None, ())
    y_test, chunk = const(model.data.y_test), max(1, PREDICTIVE_CHUNK_ENTRIES // (n * n))

    def predictive(z):
        """log p(y* = 1 | z), log p(y* = 0 | z) (m,) and whether z's covariance factored."""
        projection, prior_var, ok = kernel.test_projection(z[n:])
        var = jnp.maximum(prior_var - jnp.sum(projection**2, axis=0), gp.JITTER)
        return *_logistic_normal_log_probs(projection.T @ z[:n], var), ok > 0

    def evaluate(key, q):
        """``test_lpd`` and ``test_accuracy`` as GPClassification.evaluate: its S draws, in chunks
        (one n×n Cholesky per draw), leaving out the draws whose covariance does not factor."""
        log_p1, log_p0, ok = jax.lax.map(predictive, _draws(key, q, model.predictive_draws), batch_size=chunk)
        log_lik = jnp.where(y_test == 1.0, log_p1, log_p0)  # (S, m)
        predicted = jnp.mean(jnp.exp(log_p1), axis=0, where=ok[:, None]) >= 0.5
        return {"test_lpd": jnp.mean(log_mean_exp(log_lik, axis=0, where=ok[:, None])),
                "test_accuracy": jnp.mean(predicted == (y_test == 1.0), dtype=log_lik.dtype)}

    return JaxModel(name, model.dim, log_joint, evaluate, ("test_lpd", "test_accuracy"))


def _student_t_log_likelihood(y: jax.Array):
    """Σ_i log StudentT(y_i; ν, f_i, σ_y) for lik = (log σ_y, log ν), as GPRegression._log_likelihood."""
    def log_likelihood(f, lik):
        log_scale, log_nu = lik[0], lik[1]
        scale, nu = jnp.exp(log_scale), jnp.exp(log_nu)
        t = (y - f) / scale
        const = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (jnp.log(nu) + math.log(math.pi)) - log_scale
        return y.shape[0] * const - 0.5 * (nu + 1.0) * jnp.sum(jnp.log1p(t * t / nu))

    return log_likelihood


def _newton_log_quantile(shape, x, log_tail, target, sign):
    """Newton's method in x = log w on log(tail probability)(x) = target: the tail's log is concave in x
    (the density of log w, ∝ exp(shape·x − eˣ), is log-concave, and so are its CDF and survival
    function), so from a start on the side where the tangent undershoots (left of the root for the
    lower tail, right of it for the upper) the steps converge monotonically. A step that is not
    finite (the tail underflows there: a quantile of no mass) keeps x."""
    def step(_, x):
        value = log_tail(x)
        # d log P / dx = w p(w) / P = exp(shape·x − w − log Γ(shape) − log P); d log Q / dx = −w p(w) / Q
        slope = sign * jnp.exp(shape * x - jnp.exp(x) - gammaln(shape) - value)
        moved = x - (value - target) / slope
        return jnp.where(jnp.isfinite(moved), moved, x)

    return jax.lax.fori_loop(0, _NEWTON_STEPS, step, x)


def _gamma_quantiles(shape: jax.Array, t: np.ndarray) -> jax.Array:
    """G⁻¹(expit(t)) for the Gamma(shape, rate 1) CDF G on the fixed grid t, as gp.student_t_normal_log_density
    takes them from scipy: gammaincinv(shape, expit(t)) for t < 0, gammainccinv(shape, expit(−t)) otherwise.

    Starts, each on the undershooting side of its root (see _newton_log_quantile), from c = −log p / shape:
    lower tail, P(w) ≤ min(w^shape / Γ(shape + 1), exp(−shape (r − 1 − log r))) with r = w / shape < 1
    (the series of P, and Chernoff's bound), so w with either bound = p lies left of the quantile:
    r = 1 − √(2c) or e^{−1−c} (each makes r − 1 − log r ≥ c); upper tail, Chernoff's bound with r > 1,
    r = 1 + c + √(2c)."""
    below, above = (jnp.asarray(part, dtype=shape.dtype) for part in (t[t < 0], t[t >= 0]))
    log_p, log_q = jax.nn.log_sigmoid(below), jax.nn.log_sigmoid(-above)
    c = -log_p / shape
    ratio = jnp.maximum(jnp.where(2.0 * c < 1.0, 1.0 - jnp.sqrt(2.0 * c), 0.0), jnp.exp(-1.0 - c))
    start = jnp.maximum((log_p + gammaln(shape + 1.0)) / shape, jnp.log(shape * ratio))
    lower = _newton_log_quantile(shape, start, lambda x: jnp.log(gammainc(shape, jnp.exp(x))), log_p, 1.0)
    c = -log_q / shape
    start = jnp.log(shape * (1.0 + c + jnp.sqrt(2.0 * c)))
    upper = _newton_log_quantile(shape, start, lambda x: jnp.log(gammaincc(shape, jnp.exp(x))), log_q, -1.0)
    return jnp.exp(jnp.concatenate([lower, upper]))


def student_t_normal_log_density(y, mean, var, nu, scale):
    """log ∫ StudentT(y; ν, f, scale) N(f; mean, var) df elementwise, by gp.student_t_normal_log_density's
    trapezoid rule on its grid in t = logit G(w) (w ~ Gamma(ν/2, rate ν/2)); ν may be traced."""
    k = 0.5 * jnp.asarray(nu, dtype=var.dtype)
    w = _gamma_quantiles(k, gp._T_GRID) / k  # w = 0 (an underflowed quantile) is a zero term: total_var = ∞
    t = jnp.asarray(gp._T_GRID, dtype=var.dtype)
    total_var = var[..., None] + scale**2 / w
    log_normal = -0.5 * (jnp.log(total_var) + _LOG_2PI + (y - mean)[..., None] ** 2 / total_var)
    log_weights = jax.nn.log_sigmoid(t) + jax.nn.log_sigmoid(-t) + math.log(gp._T_GRID[1] - gp._T_GRID[0])
    return logsumexp(log_normal + log_weights, axis=-1)


def _gp_regression(model: GPRegression, name: str, const) -> JaxModel:
    kernel, n = _gp_kernel(model, const), model.num_train
    prior_sd = const(model._prior_sd)

    def log_prior(h):
        # N(0, sd²) on log σ_f, log ε, log ℓ, log σ_y; ν ~ Gamma(4, scale 10) with the log-Jacobian of ν = e^{log ν}
        log_nu = h[-1]
        return (_normal_log_prior(h[:-1], prior_sd) + 4.0 * log_nu - jnp.exp(log_nu) / 10.0 - gammaln(4.0)
                - 4.0 * math.log(10.0))

    log_joint = _whitened_log_joint(kernel, _student_t_log_likelihood(const(model.data.y_train)), log_prior)
    if not model.data.has_test:
        return JaxModel(name, model.dim, log_joint, None, ())
    y_test, y_std = const(model.data.y_test), const(model.data.y_scale.std)  # the scale follows the split

    def moments(key, q):
        found = q.moments()
        if found is not None:
            return found
        z = _draws(key, q, gp.REGRESSION_FALLBACK_DRAWS)
        return z.mean(axis=0), jnp.cov(z, rowvar=False)

    def evaluate(key, q):
        """``test_lpd`` and ``test_rmse`` as GPRegression.evaluate: hyperparameters at q's mean, f*
        marginalized over q(u); NaN where the covariance at q's mean does not factor."""
        mean_z, cov_z = moments(key, q)
        h = mean_z[n:]
        projection, prior_var, ok = kernel.test_projection(h)
        mean = projection.T @ mean_z[:n]
        var = (prior_var - jnp.sum(projection**2, axis=0)
               + jnp.sum(projection * (cov_z[:n, :n] @ projection), axis=0))  # + diag(Aᵀ Σ_u A)
        log_dens = student_t_normal_log_density(y_test, mean, jnp.maximum(var, gp.JITTER), jnp.exp(h[-1]),
                                                jnp.exp(h[-2]))
        metrics = {"test_lpd": jnp.mean(log_dens) - jnp.log(y_std),
                   "test_rmse": y_std * jnp.sqrt(jnp.mean((mean - y_test) ** 2))}
        return {metric: jnp.where(ok > 0, value, jnp.nan) for metric, value in metrics.items()}

    return JaxModel(name, model.dim, log_joint, evaluate, ("test_lpd", "test_rmse"))


# --------------------------------------------------------------------------------------------
# bnn
# --------------------------------------------------------------------------------------------


def _bnn(model: BayesianNeuralNetwork, name: str, const) -> JaxModel:
    hidden, n_w1, n_w = model.hidden, model.hidden * model.num_inputs, model.num_weights
    xt_train, y_train = const(model._xt_train), const(model.data.y_train)

    def forward(xt, w):
        """Predictions ŷ (n,) of the network with weights w = z[:n_w] at scaled inputs xt (d + 1, n)."""
        activations = jnp.maximum(w[:n_w1].reshape(hidden, -1) @ xt, 0.0)
        return (w[n_w1 : n_w - 1] @ activations + w[n_w - 1]) / math.sqrt(hidden + 1)

    def log_gamma_prior(u):
        return bnn._GAMMA_LOG_NORM + bnn._GAMMA_SHAPE * u - bnn._GAMMA_RATE * jnp.exp(u)

    def log_joint(z):
        log_lam, log_gam = z[n_w], z[n_w + 1]
        resid = y_train - forward(xt_train, z)
        log_lik = 0.5 * resid.shape[0] * (log_gam - _LOG_2PI) - 0.5 * jnp.exp(log_gam) * (resid @ resid)
        log_prior_w = 0.5 * n_w * (log_lam - _LOG_2PI) - 0.5 * jnp.exp(log_lam) * (z[:n_w] @ z[:n_w])
        return _where_finite_or(log_lik + log_prior_w + log_gamma_prior(log_lam) + log_gamma_prior(log_gam),
                                -jnp.inf)

    if not model.data.has_test:
        return JaxModel(name, model.dim, log_joint, None, ())
    xt_test, y_test, y_std = const(model._xt_test), const(model.data.y_test), const(model.data.y_scale.std)

    def evaluate(key, q):
        """``test_lpd`` (Monte Carlo over S draws) and ``test_rmse`` as BayesianNeuralNetwork.evaluate."""
        z = _draws(key, q, bnn.PREDICTIVE_DRAWS)
        pred = jax.lax.map(lambda w: forward(xt_test, w), z, batch_size=BNN_CHUNK)  # (S, m)
        log_gam = z[:, n_w + 1, None]
        log_lik = 0.5 * (log_gam - _LOG_2PI) - 0.5 * jnp.exp(log_gam) * (y_test - pred) ** 2
        return {"test_lpd": jnp.mean(log_mean_exp(log_lik, axis=0)) - jnp.log(y_std),
                "test_rmse": y_std * jnp.sqrt(jnp.mean((pred.mean(axis=0) - y_test) ** 2))}

    return JaxModel(name, model.dim, log_joint, evaluate, ("test_lpd", "test_rmse"))


# --------------------------------------------------------------------------------------------
# log Z models: radon, stochastic volatility
# --------------------------------------------------------------------------------------------


def importance_log_z_evaluation(log_joint):
    """``log_z`` and ``log_z_khat`` as mcsa_bench.metrics.importance_log_z: LOG_Z_DRAWS draws of q in
    blocks of LOG_Z_BLOCK (memory: a block's draws per replicate)."""
    def block_log_weights(key, q):
        z, log_q = q.sample_with_log_prob(key, LOG_Z_BLOCK)
        return jax.vmap(log_joint)(z) - log_q

    def evaluate(key, q):
        keys = jax.random.split(key, LOG_Z_DRAWS // LOG_Z_BLOCK)
        return log_z_metrics(jax.lax.map(lambda k: block_log_weights(k, q), keys).reshape(-1))

    return evaluate


def _radon(model: Radon, name: str, const) -> JaxModel:
    k, n, county, x, y = model.num_counties, model.y.size, model.county, const(model.x), const(model.y)
    scale_norm = radon.SCALE_SHAPE * math.log(radon.SCALE_RATE) - math.lgamma(radon.SCALE_SHAPE)
    half_log_2pi = 0.5 * _LOG_2PI

    def log_joint(z):
        a1, a2, mu, log_sigma = z[:k], z[k : 2 * k], z[2 * k : 2 * k + 2], z[2 * k + 2 :]
        log_jacobian = 0.0
        if model.noncentred:  # a_jc = μ_j + σ_aj η_jc
            a1, a2 = mu[0] + jnp.exp(log_sigma[0]) * a1, mu[1] + jnp.exp(log_sigma[1]) * a2
            log_jacobian = k * (log_sigma[0] + log_sigma[1])
        inv_sigma = jnp.exp(-log_sigma)
        u1, u2 = (a1 - mu[0]) * inv_sigma[0], (a2 - mu[1]) * inv_sigma[1]
        residual = (y - a1[county] - a2[county] * x) * inv_sigma[2]
        log_lik = -n * (half_log_2pi + log_sigma[2]) - 0.5 * (residual @ residual)
        log_prior_effects = (-k * (2.0 * half_log_2pi + log_sigma[0] + log_sigma[1])
                             - 0.5 * (u1 @ u1 + u2 @ u2))
        log_prior_mu = -2.0 * half_log_2pi - 0.5 * (mu @ mu)
        # Gamma(shape, rate) density of each σ, plus the log-Jacobian log σ
        log_prior_scales = jnp.sum(scale_norm + radon.SCALE_SHAPE * log_sigma - radon.SCALE_RATE * jnp.exp(log_sigma))
        return log_lik + log_prior_effects + log_prior_mu + log_prior_scales + log_jacobian

    return JaxModel(name, model.dim, log_joint, importance_log_z_evaluation(log_joint), ("log_z", "log_z_khat"))


def ar1_filter(phi: jax.Array, b: jax.Array) -> jax.Array:
    """x_0 = b_0, x_t = φ x_{t−1} + b_t: stochastic_volatility.ar1_filter's Hillis–Steele scan (log2 T passes)."""
    x, power, k = b, phi, 1
    while k < b.shape[-1]:
        x = x.at[k:].add(power * x[:-k])
        power, k = power * power, 2 * k
    return x


def _stochastic_volatility(model: StochasticVolatility, name: str, const) -> JaxModel:
    log_y2, log_norm = const(model._log_y2), float(model._log_norm)
    mu_scale, log_sigma_scale = stochastic_volatility._MU_SCALE, math.log(stochastic_volatility._SIGMA_SCALE)

    def log_joint(z):
        mu, u, log_sigma, h_std = z[0], z[1], z[2], z[3:]
        # innovations b_t = σ h_std,t, with the stationary scale 1/sqrt(1 − φ²) = cosh(u) at t = 1
        b = jnp.exp(log_sigma) * h_std
        h = ar1_filter(jnp.tanh(u), b.at[0].multiply(jnp.cosh(u))) + mu
        scaled_y2 = jnp.exp(log_y2 - h)  # y_t² / exp(h_t)
        log_jac_phi = 2.0 * (math.log(2.0) - jnp.abs(u) - jnp.log1p(jnp.exp(-2.0 * jnp.abs(u))))
        log_prior_sigma = log_sigma - jnp.logaddexp(0.0, 2.0 * (log_sigma - log_sigma_scale))
        log_p = (log_norm - jnp.log1p((mu / mu_scale) ** 2) + log_jac_phi + log_prior_sigma
                 - 0.5 * (h_std @ h_std) - 0.5 * (jnp.sum(h) + jnp.sum(scaled_y2)))
        return _where_finite_or(log_p, -jnp.inf)

    return JaxModel(name, model.dim, log_joint, importance_log_z_evaluation(log_joint), ("log_z", "log_z_khat"))


# --------------------------------------------------------------------------------------------
# multimodal targets with known answers: the mixtures, many-well (no metrics of their own: the
# sample-based metrics of mcsa_bench.references.samples score them, on the host)
# --------------------------------------------------------------------------------------------


def _mixture(model: GaussianMixture | StudentTMixture, name: str, const) -> JaxModel:
    """log (1/K) Σ_k Π_d f((z_d − μ_kd)/s)/s as mixtures._Mixture.log_joint; the gradient by autodiff."""
    locations, scale, num_modes, dim = const(model.locations), model.scale, model.num_modes, model.dim
    if isinstance(model, GaussianMixture):
        def log_f(u):
            return -0.5 * (u * u + _LOG_2PI)
    else:
        df, log_norm = model.df, model._log_norm_1d

        def log_f(u):
            return log_norm - 0.5 * (df + 1.0) * jnp.log1p(u * u / df)

    def log_joint(z):
        log_components = jnp.sum(log_f((z - locations) / scale), axis=1) - dim * math.log(scale)
        return logsumexp(log_components) - math.log(num_modes)

    return JaxModel(name, model.dim, log_joint, None, ())


def _many_well(model: ManyWell, name: str, const) -> JaxModel:
    def log_joint(z):
        y = z[1::2]
        return jnp.sum(well_log_density(z[0::2])) - 0.5 * (y @ y)

    return JaxModel(name, model.dim, log_joint, None, ())


#: numpy model class -> (its registry name, the builder of its twin)
_BUILDERS = {
    GaussianTarget: ("gaussian", _gaussian),
    HierarchicalLogistic: ("logistic", _logistic),
    GPClassification: ("gp_classification", _gp_classification),
    GPRegression: ("gp_regression", _gp_regression),
    BayesianNeuralNetwork: ("bnn", _bnn),
    Radon: ("radon", _radon),
    StochasticVolatility: ("stochastic_volatility", _stochastic_volatility),
    GaussianMixture: ("gaussian_mixture", _mixture),
    StudentTMixture: ("student_t_mixture", _mixture),
    ManyWell: ("many_well", _many_well),
}
