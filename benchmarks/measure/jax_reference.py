"""The pMCSA loop of mcsa-bench written in JAX and jitted whole, as an outside speed reference.

Optional: JAX is not a project dependency (``pip install jax jaxlib`` to use it); importing this
module raises ImportError without it. Same models on the same data (taken from the project's own
model objects), same family (mean-field Gaussian, σ = softplus ψ, λ₀ = (0, softplus⁻¹(1))), same
kernel (one IMH step per chain, N chains; docs/methods.md §2–3), Adam (lr 0.01), float64, one
XLA thread. The GP builds the full covariance and factors it with ``jnp.linalg.cholesky``.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from mcsa_bench import get_registry  # noqa: E402

jax.config.update("jax_enable_x64", True)
_LOG_2PI = math.log(2.0 * math.pi)
_HALF_LOG_2PI = 0.5 * _LOG_2PI


def _gaussian(model):
    mean, precision = jnp.asarray(model.mean), jnp.asarray(model.precision)
    const = -0.5 * np.linalg.slogdet(model.cov)[1] - 0.5 * model.dim * _LOG_2PI

    def log_joint(z):
        r = z - mean
        return const - 0.5 * jnp.einsum("bi,bi->b", r @ precision, r)
    return log_joint


def _logistic(model):
    x, y, d = jnp.asarray(model.data.x_train), jnp.asarray(model.data.y_train), model.num_features

    def log_joint(z):
        beta, alpha, log_sb, log_sa = z[:, :d], z[:, d], z[:, d + 1], z[:, d + 2]
        log_lik = jnp.sum(jax.nn.log_sigmoid((2.0 * y - 1.0) * (beta @ x.T + alpha[:, None])), axis=1)
        sb2, sa2 = jnp.exp(2.0 * log_sb), jnp.exp(2.0 * log_sa)
        log_prior = (-d * (_HALF_LOG_2PI + log_sb) - 0.5 * jnp.sum(beta**2, axis=1) / sb2
                     - _HALF_LOG_2PI - log_sa - 0.5 * alpha**2 / sa2
                     + 2.0 * (math.log(2.0) - _HALF_LOG_2PI) - 0.5 * (sb2 + sa2) + log_sb + log_sa)
        return log_lik + log_prior
    return log_joint


def _gp_classification(model):
    x, y = jnp.asarray(model.data.x_train), jnp.asarray(model.data.y_train)
    n, d = model.num_train, model.num_features
    sqdiff = (x[:, None, :] - x[None, :, :]) ** 2  # (n, n, d)

    def log_joint(z):
        u, h = z[:, :n], z[:, n:]
        s = jnp.sqrt(jnp.einsum("ikj,bj->bik", sqdiff, 5.0 * jnp.exp(-2.0 * h[:, 2:])))
        m = (1.0 + s + s * s / 3.0) * jnp.exp(-s)
        k = jnp.exp(2.0 * h[:, 0])[:, None, None] * m + (jnp.exp(2.0 * h[:, 1]) + 1e-6)[:, None, None] * jnp.eye(n)
        f = jnp.einsum("bik,bk->bi", jnp.linalg.cholesky(k), u)
        log_lik = jnp.sum(y * f - jnp.logaddexp(0.0, f), axis=1)
        return (log_lik - 0.5 * jnp.sum(h * h, axis=1) - 0.5 * (2 + d) * _LOG_2PI
                - 0.5 * jnp.sum(u * u, axis=1) - 0.5 * n * _LOG_2PI)
    return log_joint


def _bnn(model):
    xt, y = jnp.asarray(model._xt_train), jnp.asarray(model.data.y_train)
    hidden, k, n_w = model.hidden, model.num_inputs, model.num_weights
    shape, rate = 6.0, 6.0
    gamma_norm = shape * math.log(rate) - math.lgamma(shape)

    def log_joint(z):
        w1 = z[:, : hidden * k].reshape(-1, hidden, k)
        w2, log_lam, log_gam = z[:, hidden * k : n_w], z[:, n_w], z[:, n_w + 1]
        act = jax.nn.relu(w1 @ xt)
        pred = (jnp.einsum("bh,bhn->bn", w2[:, :-1], act) + w2[:, -1:]) / math.sqrt(hidden + 1)
        resid = y - pred
        log_lik = 0.5 * y.shape[0] * (log_gam - _LOG_2PI) - 0.5 * jnp.exp(log_gam) * jnp.sum(resid**2, axis=1)
        log_prior = 0.5 * n_w * (log_lam - _LOG_2PI) - 0.5 * jnp.exp(log_lam) * jnp.sum(z[:, :n_w] ** 2, axis=1)
        hyper = sum(gamma_norm + shape * v - rate * jnp.exp(v) for v in (log_lam, log_gam))
        return log_lik + log_prior + hyper
    return log_joint


LOG_JOINTS = {"gaussian": _gaussian, "logistic": _logistic, "gp_classification": _gp_classification, "bnn": _bnn}


def log_joint_for(name: str, params: dict):
    """(the project's model, its log joint in JAX), or None for a model without a JAX version here."""
    if name not in LOG_JOINTS:
        return None
    model = get_registry().build("model", name, **params)
    return model, LOG_JOINTS[name](model)


def pmcsa_loop(name: str, params: dict, *, n_samples: int, lr: float = 0.01, seed: int = 0):
    """A callable ``loop(iterations)`` that runs that many jitted pMCSA iterations (state carries over)."""
    built = log_joint_for(name, params)
    if built is None:
        return None
    model, log_joint = built
    dim, log_norm = model.dim, 0.5 * model.dim * _LOG_2PI

    def log_q(mu, sigma, z):
        u = (z - mu) / sigma
        return -0.5 * jnp.sum(u * u, axis=1) - jnp.sum(jnp.log(sigma)) - log_norm

    def iteration(t, state):
        params_, m, v, z, log_p, key = state
        key, k_prop, k_accept = jax.random.split(key, 3)
        mu, psi = params_[:dim], params_[dim:]
        sigma = jax.nn.softplus(psi)
        proposal = mu + sigma * jax.random.normal(k_prop, (n_samples, dim))
        log_p_proposal = log_joint(proposal)
        log_ratio = (log_p_proposal - log_q(mu, sigma, proposal)) - (log_p - log_q(mu, sigma, z))
        accept = jnp.log(jax.random.uniform(k_accept, (n_samples,))) < log_ratio
        z = jnp.where(accept[:, None], proposal, z)
        log_p = jnp.where(accept, log_p_proposal, log_p)
        u = (z - mu) / sigma
        score = jnp.concatenate([u / sigma, (u * u - 1.0) * jax.nn.sigmoid(psi) / sigma], axis=1).mean(axis=0)
        grad = -score
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        step = t + 1.0
        params_ = params_ - lr * (m / (1.0 - 0.9**step)) / (jnp.sqrt(v / (1.0 - 0.999**step)) + 1e-8)
        return params_, m, v, z, log_p, key

    key = jax.random.PRNGKey(seed)
    params0 = jnp.concatenate([jnp.zeros(dim), jnp.full(dim, math.log(math.expm1(1.0)))])
    z0 = jax.random.normal(key, (n_samples, dim))
    state = [(params0, jnp.zeros(2 * dim), jnp.zeros(2 * dim), z0, log_joint(z0), key), 0]
    compiled = {}

    def loop(iterations: int):
        if iterations not in compiled:
            compiled[iterations] = jax.jit(
                lambda s, start: jax.lax.fori_loop(start, start + iterations, iteration, s))
        current, done = state
        result = compiled[iterations](current, jnp.asarray(done, dtype=jnp.int64))
        jax.block_until_ready(result)
        state[:] = [result, done + iterations]
        return result
    return loop
