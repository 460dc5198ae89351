"""Second samplers for the latent parts of the shipped references (tests/test_references.py).

A reference's latent vector is (latent x, hyperparameters θ). Given θ, x | θ, y is sampled here by code that
shares nothing with NumPyro but the data and the project's own model code, at each of many stored draws of θ,
and averaged over them (:func:`moments_over_hyperparameters`): E[x] = E_θ E[x | θ] and
Var x = E_θ Var(x | θ) + Var_θ E[x | θ].

A per-θ sampler returns, per θ, an estimate m of E[x | θ] and v of the mean square of x about m (from one
chain, ddof 0; or Rao-Blackwellized). Pooling them as mean(v) + var(m) makes the variance estimate unbiased
even for short autocorrelated chains: a stationary chain's ddof-0 variance falls short of Var(x | θ) by
Var(m | θ) in expectation (a fraction τ/keep, τ the autocorrelation time), which the spread of the chain means
across θ adds back. What remains is the burn-in's bias. Standard errors come from the spread over θ: each θ's
chain is independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from mcsa_bench.builtin.models.gp import GPClassification, GPRegression, batched_cholesky, gp_covariance
from mcsa_bench.builtin.models.stochastic_volatility import StochasticVolatility, ar1_filter

LOG_CHI2_MEAN = -1.2703628454614782  # E log ε², ε ~ N(0, 1): ψ(½) + log 2


@dataclass(frozen=True)
class LatentMoments:
    """Posterior mean and variance of x, with their standard errors from the spread over θ draws."""

    mean: np.ndarray
    var: np.ndarray
    mean_se: np.ndarray
    var_se: np.ndarray


def pooled_moments(means: np.ndarray, mean_squares: np.ndarray) -> LatentMoments:
    """x's moments from B independent estimates of (E[x | θ_b], mean square about it), each (B, n)."""
    mean = means.mean(axis=0)
    per_draw_var = mean_squares + (means - mean) ** 2  # each draw's share of Var x = mean(v) + var(m)
    count = math.sqrt(len(means))
    return LatentMoments(mean, per_draw_var.mean(axis=0), means.std(axis=0) / count,
                         per_draw_var.std(axis=0) / count)


def moments_over_hyperparameters(conditional: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                                 hyperparameters: np.ndarray) -> LatentMoments:
    """x's moments averaged over the θ draws (B, k); ``conditional`` maps them to (m, v), each (B, n)."""
    return pooled_moments(*conditional(hyperparameters))


def reference_z_scores(moments: LatentMoments, reference, coordinates: slice,
                       sd_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """|z| of the differences of means and of sds (``sd_scale`` × the reference's) on ``coordinates``.

    Means: the θ average's standard error and the reference's MCSE combined. Sds: the θ average's by the delta
    method, the reference's sd/√(2 ESS).
    """
    ref_mean, ref_sd = reference.mean[coordinates], sd_scale * reference.sd[coordinates]
    mean_se = np.sqrt(reference.mean_mcse[coordinates] ** 2 + moments.mean_se**2)
    sd = np.sqrt(moments.var)
    sd_se = np.sqrt((moments.var_se / (2.0 * sd)) ** 2 + ref_sd**2 / (2.0 * reference.ess[coordinates]))
    return np.abs(moments.mean - ref_mean) / mean_se, np.abs(sd - ref_sd) / sd_se


def elliptical_slice(x: np.ndarray, log_lik: np.ndarray, log_likelihood: Callable[[np.ndarray, np.ndarray], np.ndarray],
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One elliptical slice sampling step (Murray, Adams & MacKay 2010) of B independent chains with prior N(0, I).

    x (B, n) and its log likelihoods (B,); ``log_likelihood(x, rows)`` evaluates the chains ``rows`` at x
    (len(rows), n). Each chain draws ν ~ N(0, I) and a level log L(x) + log U, then shrinks an angle bracket
    around 0 until x cos a + ν sin a is above the level; only the chains still shrinking are evaluated.
    """
    x, log_lik = x.copy(), log_lik.copy()
    nu = rng.standard_normal(x.shape)
    level = log_lik + np.log(rng.uniform(size=len(x)))
    angle = rng.uniform(0.0, 2.0 * np.pi, size=len(x))
    low, high = angle - 2.0 * np.pi, angle.copy()
    pending = np.arange(len(x))
    while pending.size:
        proposal = x[pending] * np.cos(angle[pending, None]) + nu[pending] * np.sin(angle[pending, None])
        value = log_likelihood(proposal, pending)
        accepted = value > level[pending]
        done = pending[accepted]
        x[done], log_lik[done] = proposal[accepted], value[accepted]
        pending = pending[~accepted]
        below = angle[pending] < 0.0
        low[pending] = np.where(below, angle[pending], low[pending])
        high[pending] = np.where(below, high[pending], angle[pending])
        angle[pending] = rng.uniform(low[pending], high[pending])
    return x, log_lik


def elliptical_slice_chains(log_likelihood: Callable[[np.ndarray, np.ndarray], np.ndarray], shape: tuple[int, int],
                            rng: np.random.Generator, burn: int, keep: int, thin: int = 1,
                            latent: Callable[[np.ndarray], np.ndarray] = lambda x: x,
                            trace: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """B chains of :func:`elliptical_slice` from prior draws (shape (B, n)). Per chain, the mean m and the mean
    square about m of ``latent`` (the recorded coordinates, a function of the state) at every ``thin``-th of the
    ``keep`` steps after ``burn``, (B, n) each, and the path of the first ``trace`` recorded coordinates."""
    x = rng.standard_normal(shape)
    log_lik = log_likelihood(x, np.arange(shape[0]))
    total, total_sq, path = 0.0, 0.0, []
    for step in range(burn + keep):
        x, log_lik = elliptical_slice(x, log_lik, log_likelihood, rng)
        if step >= burn and (step - burn) % thin == 0:
            recorded = latent(x)
            total, total_sq = total + recorded, total_sq + recorded * recorded
            path.append(recorded[:, :trace])
    mean = total / len(path)
    return mean, total_sq / len(path) - mean**2, np.array(path)


# ------------------------------------------------------------------------------ the GP models' u | θ


def gp_cholesky(model: GPClassification | GPRegression, hyperparameters: np.ndarray) -> np.ndarray:
    """L_θ (B, n, n), K_θ = L_θ L_θᵀ, by the project's covariance code, for θ draws (B, k) in the model's order."""
    d = model.num_features
    h = hyperparameters
    k, *_ = gp_covariance(model._pairs, h[:, 0], h[:, 1], h[:, 2 : 2 + d])
    chol, ok = batched_cholesky(k)
    assert ok.all(), "a stored hyperparameter draw whose covariance does not factor"
    return chol


def gp_classification_u_given_hyperparameters(model: GPClassification, rng: np.random.Generator, burn: int,
                                              keep: int, thin: int = 1
                                              ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The per-θ sampler of u | θ, y for :func:`moments_over_hyperparameters`: one elliptical slice chain per θ,
    u's prior N(0, I) and the project's Bernoulli-logit likelihood of f = L_θ u."""

    def conditional(hyperparameters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chol = gp_cholesky(model, hyperparameters)
        no_likelihood_parameters = np.empty((len(chol), 0))

        def log_likelihood(u: np.ndarray, rows: np.ndarray) -> np.ndarray:
            f = np.einsum("bij,bj->bi", chol[rows], u)
            return model._log_likelihood(f, no_likelihood_parameters[rows])[0]

        mean, mean_square, _ = elliptical_slice_chains(log_likelihood, (len(chol), model.num_train), rng, burn,
                                                       keep, thin)
        return mean, mean_square

    return conditional


def gp_regression_u_given_hyperparameters(model: GPRegression, rng: np.random.Generator, burn: int = 20,
                                          keep: int = 40) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The per-θ sampler of u | θ, y for robust GP regression, Rao-Blackwellized over a Gibbs sampler of the
    Student-t as a scale mixture: y_i | f, w ~ N(f_i, σ_y²/w_i), w_i ~ Gamma(ν/2, rate ν/2). Given w, f ~ N(0, K)
    is conjugate: with A = K + σ_y² W⁻¹ and K = LLᵀ, u = L⁻¹f is N(Lᵀ A⁻¹ y, I − Lᵀ A⁻¹ L); f is drawn by
    Matheron's rule, then w_i ~ Gamma((ν+1)/2, rate (ν + r_i²)/2), r_i = (y_i − f_i)/σ_y."""
    n, y = model.num_train, model.data.y_train

    def one(h: np.ndarray, chol_k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = chol_k @ chol_k.T
        noise, nu = np.exp(2.0 * h[-2]), np.exp(h[-1])
        w, mean, second = np.ones(n), np.zeros(n), np.zeros(n)
        for step in range(burn + keep):
            chol_a = cholesky(k + np.diag(noise / w), lower=True)
            projected = solve_triangular(chol_a, chol_k, lower=True)  # C⁻¹L, A = CCᵀ
            conditional_mean = projected.T @ solve_triangular(chol_a, y, lower=True)
            if step >= burn:
                mean += conditional_mean / keep
                second += (1.0 - np.sum(projected**2, axis=0) + conditional_mean**2) / keep
            prior_f = chol_k @ rng.standard_normal(n)
            f = prior_f + k @ cho_solve((chol_a, True), y - prior_f - np.sqrt(noise / w) * rng.standard_normal(n))
            w = rng.gamma(0.5 * (nu + 1.0), 2.0 / (nu + (y - f) ** 2 / noise))
        return mean, second - mean**2

    def conditional(hyperparameters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chol = gp_cholesky(model, hyperparameters)
        return tuple(map(np.array, zip(*(one(h, c) for h, c in zip(hyperparameters, chol)))))

    return conditional


# ---------------------------------------------------------------- stochastic volatility: (θ, h_std) | y


def sv_states(theta: np.ndarray, h_std: np.ndarray) -> np.ndarray:
    """The log volatilities h (K, T) of whitened states h_std (K, T) at θ = (μ, atanh φ, log σ) (K, 3)."""
    mu, a, sigma = theta[:, 0], theta[:, 1], np.exp(theta[:, 2])
    b = sigma[:, None] * h_std
    b[:, 0] *= np.cosh(a)  # the stationary scale 1/√(1 − φ²) of h_1
    return mu[:, None] + ar1_filter(np.tanh(a), b)


def sv_whitened(theta: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The inverse of :func:`sv_states`: h_std,1 = (h_1 − μ)/(σ cosh a), h_std,t = (h_t − μ − φ (h_{t−1} − μ))/σ."""
    mu, a, sigma = theta[:, :1], theta[:, 1:2], np.exp(theta[:, 2:3])
    x = h - mu
    h_std = np.empty_like(h)
    h_std[:, 0] = x[:, 0] / (sigma[:, 0] * np.cosh(a[:, 0]))
    h_std[:, 1:] = (x[:, 1:] - np.tanh(a) * x[:, :-1]) / sigma
    return h_std


def sv_slice_update(model: StochasticVolatility, steps: int) -> Callable:
    """h_std | θ, y by ``steps`` elliptical slice steps (h_std's prior is N(0, I)), for
    :func:`stochastic_volatility_chains`."""

    def update(theta: np.ndarray, h_std: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        def log_likelihood(x: np.ndarray, rows: np.ndarray) -> np.ndarray:  # log p(y | h) + a constant in x
            return model.log_joint(np.concatenate([theta[rows], x], axis=1)) + 0.5 * np.sum(x * x, axis=1)

        log_lik = log_likelihood(h_std, np.arange(len(h_std)))
        for _ in range(steps):
            h_std, log_lik = elliptical_slice(h_std, log_lik, log_likelihood, rng)
        return h_std

    return update


def sv_particle_update(model: StochasticVolatility, particles: int) -> Callable:
    """h | θ, y by one conditional SMC sweep with ancestor sampling (:func:`sv_particle_gibbs`), for
    :func:`stochastic_volatility_chains`."""

    def update(theta: np.ndarray, h_std: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        h = sv_particle_gibbs(model, theta, sv_states(theta, h_std), particles, rng)
        return sv_whitened(theta, h)

    return update


def stochastic_volatility_chains(model: StochasticVolatility, rng: np.random.Generator, chains: int, burn: int,
                                 keep: int, update_states: Callable, trace: list | None = None
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """Independent chains of a Gibbs sampler of (θ, h_std) | y on the project's log joint; per chain, the mean and
    the mean square about it of every latent over the ``keep`` sweeps after ``burn`` (each (chains, T + 3)).

    A sweep: ``update_states(θ, h_std, rng)`` (:func:`sv_slice_update`, :func:`sv_particle_update`); then each of
    μ, atanh φ, log σ by a random-walk Metropolis step twice, once with h_std fixed and once with the centred
    states h fixed (the interweaving of Kastner & Frühwirth-Schnatter 2014: the non-centred step moves θ where
    the data pin the level of h, the centred one where they pin its path). In (θ, h) the density is the project's
    log joint at (θ, h_std(θ, h)) minus log|∂h/∂h_std| = T log σ + log cosh(atanh φ). The step sizes adapt to
    an acceptance rate of 0.4 during burn-in only, then stay fixed. Chains start at φ = 0.95, σ = 0.2, μ = the
    moment estimate mean(log y_t²) − E log χ²₁ (each jittered) and h_std ~ N(0, I)."""
    t_len = model.num_returns
    level = np.mean(model._log_y2) - LOG_CHI2_MEAN  # E log y_t² = μ + E log χ²₁: the moment estimate of μ
    theta = np.tile([level, np.arctanh(0.95), np.log(0.2)], (chains, 1))
    theta += 0.1 * rng.standard_normal(theta.shape)
    h_std = rng.standard_normal((chains, t_len))

    def log_joint(theta: np.ndarray, h_std: np.ndarray) -> np.ndarray:
        return model.log_joint(np.concatenate([theta, h_std], axis=1))

    def centred_log_density(theta: np.ndarray, h: np.ndarray) -> np.ndarray:
        log_det = t_len * theta[:, 2] + np.log(np.cosh(theta[:, 1]))
        return log_joint(theta, sv_whitened(theta, h)) - log_det

    log_steps = np.log(np.full((2, chains, 3), 0.05))  # (non-centred, centred) × chain × coordinate
    total, total_sq = 0.0, 0.0
    for sweep in range(burn + keep):
        h_std = update_states(theta, h_std, rng)
        for centred in (False, True):
            fixed = sv_states(theta, h_std) if centred else h_std
            density = centred_log_density if centred else log_joint
            current = density(theta, fixed)
            for j in range(3):
                proposal = theta.copy()
                proposal[:, j] += np.exp(log_steps[int(centred), :, j]) * rng.standard_normal(chains)
                proposed = density(proposal, fixed)
                accept = np.log(rng.uniform(size=chains)) < proposed - current
                theta[accept], current[accept] = proposal[accept], proposed[accept]
                if sweep < burn:
                    log_steps[int(centred), :, j] += 0.1 * (accept - 0.4)
            if centred:
                h_std = sv_whitened(theta, fixed)
        if sweep >= burn:
            z = np.concatenate([theta, h_std], axis=1)
            total, total_sq = total + z, total_sq + z * z
            if trace is not None:
                trace.append(z[:, :8])
    mean = total / keep
    return mean, total_sq / keep - mean**2


def sv_particle_gibbs(model: StochasticVolatility, theta: np.ndarray, h: np.ndarray, particles: int,
                      rng: np.random.Generator) -> np.ndarray:
    """One conditional SMC sweep with ancestor sampling (Lindsten, Jordan & Schön 2014) of h | θ, y for K chains
    at once: θ (K, 3), the reference paths h (K, T); returns new paths (K, T), exact draws of a π-invariant kernel.

    A bootstrap filter of ``particles`` particles per chain, the last one held at the reference path; its
    ancestor is drawn with probability ∝ w_{t−1,i} p(h_t | h_{t−1,i}), the others' by multinomial resampling.
    """
    chains, t_len = h.shape
    mu, phi, sigma = theta[:, :1], np.tanh(theta[:, 1:2]), np.exp(theta[:, 2:3])
    log_y2 = model._log_y2

    def log_lik(t: int, x: np.ndarray) -> np.ndarray:
        return -0.5 * (x + np.exp(log_y2[t] - x))

    def draw(log_weights: np.ndarray, count: int) -> np.ndarray:
        cdf = np.cumsum(np.exp(log_weights - log_weights.max(axis=1, keepdims=True)), axis=1)
        u = rng.uniform(size=(chains, count)) * cdf[:, -1:]
        return np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), particles - 1)

    paths = np.empty((t_len, chains, particles))
    ancestors = np.empty((t_len, chains, particles), dtype=int)
    x = mu + sigma * np.cosh(theta[:, 1:2]) * rng.standard_normal((chains, particles))
    x[:, -1] = h[:, 0]
    paths[0], log_w = x, log_lik(0, x)
    rows = np.arange(chains)[:, None]
    for t in range(1, t_len):
        parent = np.empty((chains, particles), dtype=int)
        parent[:, :-1] = draw(log_w, particles - 1)
        transition = -0.5 * ((h[:, t : t + 1] - mu - phi * (x - mu)) / sigma) ** 2
        parent[:, -1] = draw(log_w + transition, 1)[:, 0]
        x = mu + phi * (x[rows, parent] - mu) + sigma * rng.standard_normal((chains, particles))
        x[:, -1] = h[:, t]
        paths[t], ancestors[t], log_w = x, parent, log_lik(t, x)
    index = draw(log_w, 1)[:, 0]
    new = np.empty_like(h)
    for t in range(t_len - 1, -1, -1):
        new[:, t] = paths[t, np.arange(chains), index]
        index = ancestors[t, np.arange(chains), index]
    return new
