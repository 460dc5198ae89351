"""JAX twins of the built-in models, built from the numpy model objects (their data, standardization,
priors and hyper-parameters, so preprocessing lives once).

This file holds the contract (:class:`JaxModel`, :class:`JaxQ`) and the Gaussian and logistic twins
the engine's tests need; the twins of every other built-in model come with the models' own work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import jax
import jax.numpy as jnp

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.gaussian import _MONTE_CARLO_DRAWS, GaussianTarget
from mcsa_bench.builtin.models.logistic import PREDICTIVE_DRAWS, HierarchicalLogistic

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class JaxQ(Protocol):
    """q(·; λ) with λ bound, as JAX families give it (accel/families.py)."""

    def sample_with_log_prob(self, key, n: int):
        """(z (n, D), log q (n,))."""

    def log_prob(self, z):
        """log q of rows z (n, D), shape (n,)."""

    def moments(self):
        """(mean (D,), cov (D, D))."""

    def marginal_moments(self):
        """(mean (D,), sd (D,))."""


@dataclass(frozen=True)
class JaxModel:
    name: str
    dim: int
    log_joint: Callable  # z: (D,) -> scalar; pure JAX, jit/vmap/grad-able
    evaluate: Callable | None  # (key, q: JaxQ) -> dict[str, scalar]: the numpy model.evaluate()'s metrics
    metric_names: tuple[str, ...]  # names evaluate returns


def gaussian_kl(mean0, cov0, mean1, cov1):
    """KL(N(mean0, cov0) ‖ N(mean1, cov1)) in closed form (as mcsa_bench.builtin.models.gaussian.gaussian_kl)."""
    chol0, chol1 = jnp.linalg.cholesky(cov0), jnp.linalg.cholesky(cov1)
    solve = jax.scipy.linalg.solve_triangular
    solved_cov = solve(chol1, chol0, lower=True)
    solved_mean = solve(chol1, mean1 - mean0, lower=True)
    logdets = [2.0 * jnp.sum(jnp.log(jnp.diag(c))) for c in (chol0, chol1)]
    return 0.5 * (jnp.sum(solved_cov**2) + solved_mean @ solved_mean - mean0.size + logdets[1] - logdets[0])


def _gaussian(model: GaussianTarget) -> JaxModel:
    mean, cov, precision, chol = (jnp.asarray(a) for a in (model.mean, model.cov, model.precision, model._chol))
    log_norm = float(model._log_norm)

    def log_joint(z):
        r = z - mean
        return log_norm - 0.5 * r @ precision @ r

    def evaluate(key, q):
        moments = q.moments()
        if moments is None:  # q not Gaussian: Monte Carlo, as GaussianTarget.evaluate
            key_pi, key_q = jax.random.split(key)
            z_pi = mean + jax.random.normal(key_pi, (_MONTE_CARLO_DRAWS, mean.size), mean.dtype) @ chol.T
            z_q = q.sample_with_log_prob(key_q, _MONTE_CARLO_DRAWS)[0]
            log_p = jax.vmap(log_joint)
            return {"kl_inclusive": jnp.mean(log_p(z_pi) - q.log_prob(z_pi)),
                    "kl_exclusive": jnp.mean(q.log_prob(z_q) - log_p(z_q))}
        q_mean, q_cov = moments
        return {"kl_inclusive": gaussian_kl(mean, cov, q_mean, q_cov),
                "kl_exclusive": gaussian_kl(q_mean, q_cov, mean, cov)}

    return JaxModel("gaussian", model.dim, log_joint, evaluate, ("kl_inclusive", "kl_exclusive"))


def _logistic(model: HierarchicalLogistic) -> JaxModel:
    d = model.num_features
    design, test_design = jnp.asarray(model._signed_design), jnp.asarray(model._signed_test_design)
    y_test = jnp.asarray(model.data.y_test)
    const, hierarchical = float(model._log_prior_const), model.hierarchical

    def log_joint(z):
        log_lik = jnp.sum(jax.nn.log_sigmoid(z[: d + 1] @ design))
        if not hierarchical:
            return log_lik + const - 0.5 * z @ z
        # per scale σ_k (k = β, α; m_k = d, 1 coefficients): normal prior, half-normal, log-Jacobian
        log_scales = z[d + 1:]
        variances = jnp.exp(2.0 * log_scales)
        sq_norms = jnp.stack([z[:d] @ z[:d], z[d] ** 2]) / variances
        return log_lik + const - (d - 1) * log_scales[0] - 0.5 * jnp.sum(sq_norms + variances)

    def evaluate(key, q):
        z, _ = q.sample_with_log_prob(key, PREDICTIVE_DRAWS)
        observed = jnp.mean(jax.nn.sigmoid(z[:, : d + 1] @ test_design), axis=0)  # P(observed label), per row
        right = jnp.where(y_test == 1.0, observed >= 0.5, observed > 0.5)
        return {"test_lpd": jnp.mean(jnp.log(observed)), "test_accuracy": jnp.mean(right.astype(z.dtype))}

    has_test = model.data.has_test
    return JaxModel("logistic", model.dim, log_joint, evaluate if has_test else None,
                    ("test_lpd", "test_accuracy") if has_test else ())


_TWINS = {GaussianTarget: _gaussian, HierarchicalLogistic: _logistic}


def twin(model) -> JaxModel:
    """The JAX twin of a built numpy model."""
    build = _TWINS.get(type(model))
    if build is None:
        covered = ", ".join(cls.__name__ for cls in _TWINS)
        raise ConfigurationError(f"model {type(model).__name__} has no JAX twin; covered: {covered}")
    return build(model)
