"""The MCSA schemes and the papers' baselines in JAX, twins of mcsa_bench/builtin/estimators.py and
baselines.py (docs/methods.md §3, NeurIPS paper Table 2): the same budget semantics, the same
gradients, the same per-iteration metrics.

Every gradient is g = -∇_λ Σ_n w_n log q(z_n; λ) with the points z_n and weights w_n held fixed
(Prop. 1): one reverse-mode pass instead of the (B, P) matrix of scores the numpy schemes sum.
ELBO's is the path derivative ("sticking the landing") of the exclusive KL, also by reverse mode.

A scheme's ``estimate`` returns an :class:`Estimate`: the gradient, the chains and kernel state,
the metrics, each name the scheme can report mapped to (value, reported) with ``reported`` 1.0 on
iterations that report it (rws reports an acceptance rate only on wake iterations, so window means
are taken as the numpy engine's Window takes them), and whether every log density it asked for was
a number below +inf (the numpy engine fails a run on any other).

A scheme's cost (``cost(t)``: the log-density and gradient rows it asked the model for through
iteration t, initialization included) is the numpy engine's :class:`mcsa_bench.engine.Cost`, not
counted at run time but declared: in JAX the rows an iteration asks for are fixed by the scheme.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mcsa_bench.accel.kernels import Chains, Kernel, Target, density_ok
from mcsa_bench.api import ConfigurationError
from mcsa_bench.engine import Cost

_REPORTED, _SILENT = 1.0, 0.0


class Estimate(NamedTuple):
    grad: jnp.ndarray
    chains: Chains
    kernel_state: object
    metrics: dict
    density_ok: jnp.ndarray | bool = True


def weighted_score_descent(family, params, z, weights=None):
    """-Σ_n w_n ∇_λ log q(z_n; λ) (w_n = 1/B when None), z and w held fixed."""
    z = jax.lax.stop_gradient(z)
    if weights is None:
        return -jax.grad(lambda p: jnp.mean(family.bind(p).log_prob(z)))(params)
    weights = jax.lax.stop_gradient(weights)
    return -jax.grad(lambda p: weights @ family.bind(p).log_prob(z))(params)


def effective_sample_size(weights):
    """1/Σ w̄² along the last axis (Kong's ESS)."""
    return 1.0 / jnp.sum(weights * weights, axis=-1)


class Scheme:
    """A scheme with its kernel twin (None for kernel-free baselines) and budget N."""

    uses_kernel = True

    def __init__(self, numpy_estimator, kernel: Kernel | None):
        self.kernel = kernel
        self.n_samples = numpy_estimator.n_samples

    @property
    def num_chains(self) -> int:
        return 1 if self.uses_kernel else 0

    def init(self, key, target: Target, q, dtype):
        """The chains drawn from the initial q, and the kernel's state."""
        if not self.uses_kernel:
            return Chains(jnp.zeros((0, 1), dtype), jnp.zeros(0, dtype)), ()
        z = q.sample_with_log_prob(key, self.num_chains)[0]
        return self.kernel.init(target, z), self.kernel.init_state(self.num_chains, dtype)

    def estimate(self, key, chains, state, target: Target, family, params, t):
        raise NotImplementedError

    def iteration_cost(self) -> tuple[int, int]:
        """(log-density rows, gradient rows) one iteration's ``estimate`` asks for."""
        raise NotImplementedError

    def cost(self, t: int) -> Cost:
        """The rows asked for by the initialization and iterations 1..t (engine.Cost, Table 2's budget)."""
        density, gradient = self.kernel.init_cost(self.num_chains) if self.uses_kernel else (0, 0)
        per_density, per_gradient = self.iteration_cost()
        return Cost(density + t * per_density, gradient + t * per_gradient)

    def _estimate(self, grad, chains, state, transition) -> Estimate:
        return Estimate(grad, chains, state, self._transition_metrics(transition), transition.density_ok)

    @staticmethod
    def _transition_metrics(transition) -> dict:
        """acceptance_rate and each of the kernel's info entries, means over chains (and steps)."""
        metrics = {"acceptance_rate": (jnp.mean(transition.acceptance), _REPORTED)}
        metrics.update({name: (jnp.mean(value), _REPORTED) for name, value in transition.info.items()})
        return metrics


class MSC(Scheme):
    """One chain, one transition (CIS: N-1 fresh proposals), gradient -s(z_t) (Alg. 4)."""

    def estimate(self, key, chains, state, target, family, params, t):
        q = family.bind(params)
        chains, state, transition = self.kernel.step(key, chains, state, target, q, self._n_proposals)
        return self._estimate(weighted_score_descent(family, params, chains.z), chains, state, transition)

    @property
    def _n_proposals(self) -> int:
        return self.n_samples - 1 if self.kernel.uses_proposal_budget else 1

    def iteration_cost(self):
        return self.kernel.step_cost(1, self._n_proposals)


class MSCRB(Scheme):
    """One CIS transition with N-1 proposals, gradient -Σ_i w̄_i s(z_i) over all N slots."""

    def __init__(self, numpy_estimator, kernel):
        super().__init__(numpy_estimator, kernel)
        if not kernel.exposes_weights:
            raise ConfigurationError("msc_rb needs a kernel that exposes normalized weights (cis)")

    def estimate(self, key, chains, state, target, family, params, t):
        q = family.bind(params)
        chains, state, transition = self.kernel.step(key, chains, state, target, q, self.n_samples - 1)
        grad = weighted_score_descent(family, params, transition.candidates[0], transition.weights[0])
        return self._estimate(grad, chains, state, transition)

    def iteration_cost(self):
        return self.kernel.step_cost(1, self.n_samples - 1)


class JSA(Scheme):
    """One chain, N sequential transitions, gradient over the intermediate states (Alg. 5)."""

    def estimate(self, key, chains, state, target, family, params, t):
        q = family.bind(params)
        trajectory, chains, state, transitions = self.kernel.steps(key, chains, state, target, q, self.n_samples)
        grad = weighted_score_descent(family, params, trajectory.reshape(-1, trajectory.shape[-1]))
        return self._estimate(grad, chains, state, transitions)

    def iteration_cost(self):
        density, gradient = self.kernel.step_cost(1)
        return self.n_samples * density, self.n_samples * gradient


class PMCSA(MSC):
    """N independent chains, one transition each, gradient -(1/N) Σ_n s(z_t^(n)) (Alg. 1)."""

    @property
    def num_chains(self):
        return self.n_samples

    def estimate(self, key, chains, state, target, family, params, t):
        q = family.bind(params)
        chains, state, transition = self.kernel.step(key, chains, state, target, q)
        return self._estimate(weighted_score_descent(family, params, chains.z), chains, state, transition)

    def iteration_cost(self):
        return self.kernel.step_cost(self.n_samples)


def _snis_gradient(key, target, family, params, n):
    """(-Σ_n w̄_n s(z_n), ESS of w̄, density ok) with z_n ~ q, w̄ ∝ p/q: one batched log p call."""
    z, log_q = family.bind(params).sample_with_log_prob(key, n)
    log_p = target.log_joint(z)
    weights = jax.nn.softmax(log_p - log_q)
    return weighted_score_descent(family, params, z, weights), effective_sample_size(weights), density_ok(log_p)


class SNIS(Scheme):
    """N fresh draws of q, self-normalized weights; no kernel (baselines.SNIS)."""

    uses_kernel = False

    def estimate(self, key, chains, state, target, family, params, t):
        grad, ess, ok = _snis_gradient(key, target, family, params, self.n_samples)
        return Estimate(grad, chains, state, {"snis_ess": (ess, _REPORTED)}, ok)

    def iteration_cost(self):
        return self.n_samples, 0


class RWS(Scheme):
    """SNIS sleep updates and, every ``every``-th iteration (the first included), an HMC wake update
    of a persistent chain with gradient -s(z_t) (baselines.RWS)."""

    def __init__(self, numpy_estimator, kernel):
        super().__init__(numpy_estimator, kernel)
        self.every = numpy_estimator.every

    def estimate(self, key, chains, state, target, family, params, t):
        def wake(_):
            moved, new_state, transition = self.kernel.step(key, chains, state, target, family.bind(params))
            estimate = self._estimate(weighted_score_descent(family, params, moved.z), moved, new_state, transition)
            return estimate._replace(density_ok=jnp.asarray(estimate.density_ok))

        def sleep(_):
            grad, _, ok = _snis_gradient(key, target, family, params, self.n_samples)
            silent = {name: (jnp.zeros((), grad.dtype), _SILENT) for name in wake_metrics}
            return Estimate(grad, chains, state, silent, ok)

        wake_metrics = jax.eval_shape(wake, None).metrics  # the names a wake iteration reports
        # t is the same for every replicate (not batched), so this stays a branch under vmap
        return jax.lax.cond((t - 1) % self.every == 0, wake, sleep, None)

    def iteration_cost(self):
        """A sleep iteration's: N draws of q (SNIS)."""
        return self.n_samples, 0

    def cost(self, t: int) -> Cost:
        """Sleep iterations' N rows, wake iterations' (1, 1 + every, ...) one HMC transition of the chain."""
        wakes = -(-t // self.every)
        sleeping = super().cost(t - wakes)
        density, gradient = self.kernel.step_cost(1)
        return Cost(sleeping.log_density + wakes * density, sleeping.gradient + wakes * gradient)


class ELBO(Scheme):
    """ADVI with the path-derivative (STL) estimator of ∇ KL(q‖π) from N reparameterized draws:
    g = ∇_λ (1/N) Σ_n [log q(T(ε_n; λ); λ') - log p(T(ε_n; λ))] at λ' = λ held fixed (baselines.ELBO)."""

    uses_kernel = False

    def estimate(self, key, chains, state, target, family, params, t):
        fixed = family.bind(jax.lax.stop_gradient(params))
        eps = fixed.base_noise(key, self.n_samples)

        def objective(p):
            z = family.bind(p).transform(eps)
            log_p = target.log_joint(z)
            return jnp.mean(fixed.log_prob(z) - log_p), log_p

        grad, log_p = jax.grad(objective, has_aux=True)(params)
        return Estimate(grad, chains, state, {}, density_ok(log_p))

    def iteration_cost(self):
        return self.n_samples, self.n_samples  # log_joint_and_grad at N points
