"""Kernels in JAX: twins of IMH and CIS (mcsa_bench/builtin/kernels.py) and HMC
(mcsa_bench/builtin/hmc.py), with the same rules (docs/methods.md §2): log-space weights, log p of
the chains' states cached, a NaN weight ratio rejects, HMC's divergent trajectories frozen at their
last finite point and rejected, its step size adapted as the numpy kernel's.

A kernel is static (its options); what changes between transitions lives in explicit states: the
chains (:class:`Chains`) and the kernel's own state (HMC's adaptation, ``()`` for the others), so
that everything can be carried through ``lax.scan`` and vmapped over replicates.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin import hmc as numpy_hmc
from mcsa_bench.builtin import kernels as numpy_kernels


class Chains(NamedTuple):
    """C chains: positions (C, D), cached log p (C,) and, for gradient kernels, ∇ log p (C, D)."""

    z: jnp.ndarray
    log_p: jnp.ndarray
    grad_log_p: jnp.ndarray | None = None


class Transition(NamedTuple):
    """As mcsa_bench.api.Transition: acceptance probabilities (C,); CIS's candidates (C, M, D) and
    normalized weights (C, M) (slot 0: the previous state); the kernel's own diagnostics ``info``
    by metric name, each a number or (C,) array whose mean the schemes log (api.info_means: CIS's
    cis_ess, HMC's divergences and step_size); and whether every log density the transition asked
    for was a number below +inf."""

    acceptance: jnp.ndarray
    candidates: jnp.ndarray | None = None
    weights: jnp.ndarray | None = None
    info: dict = {}
    density_ok: jnp.ndarray | bool = True


def density_ok(log_p) -> jnp.ndarray:
    """No NaN or +inf among log densities (-inf is a zero density): the numpy engine's CheckedModel
    fails a run on any other value, wherever the kernel asked for it."""
    return jnp.all(log_p < jnp.inf)


class Target(NamedTuple):
    """A model's batched log density (and its gradient) over rows z (B, D)."""

    log_joint: callable
    log_joint_and_grad: callable

    @classmethod
    def of(cls, log_joint) -> Target:
        return cls(jax.vmap(log_joint), jax.vmap(jax.value_and_grad(log_joint)))


def acceptance_probability(log_ratio):
    """min(1, exp(log_ratio)); NaN (a 0/0 weight ratio) counts as a rejection."""
    return jnp.fmax(jnp.exp(jnp.minimum(log_ratio, 0.0)), 0.0)


def barker_probability(log_ratio):
    """w*/(w* + w) = σ(log_ratio); NaN counts as a rejection."""
    return jnp.fmax(jax.nn.sigmoid(log_ratio), 0.0)


class Kernel:
    """Capabilities as mcsa_bench.api.Kernel; ``init_state`` gives the kernel's own state for C chains."""

    needs_gradient = False
    exposes_weights = False
    uses_proposal_budget = False

    def init(self, target: Target, z) -> Chains:
        if self.needs_gradient:
            return Chains(z, *target.log_joint_and_grad(z))
        return Chains(z, target.log_joint(z))

    def init_state(self, num_chains: int, dtype):
        return ()

    def init_cost(self, num_chains: int) -> tuple[int, int]:
        """(log-density rows, gradient rows) :meth:`init` asks for: mcsa_bench.engine.Cost's counts."""
        return num_chains, num_chains if self.needs_gradient else 0

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        """(log-density rows, gradient rows) one :meth:`step` asks for (``steps``: that many times)."""
        raise NotImplementedError

    def step(self, key, chains: Chains, state, target: Target, q, n_proposals: int = 1):
        """(chains, state, Transition) after one transition of every chain."""
        raise NotImplementedError

    def steps(self, key, chains: Chains, state, target: Target, q, n_steps: int):
        """``n_steps`` sequential transitions: (trajectory (n, C, D), chains, state, Transition with
        acceptance (n, C) and each info entry stacked over the steps)."""

        def one(carry, step_key):
            chains, state = carry
            chains, state, transition = self.step(step_key, chains, state, target, q)
            transition = Transition(transition.acceptance, info=transition.info,
                                    density_ok=jnp.asarray(transition.density_ok))
            return (chains, state), (chains.z, transition)

        (chains, state), (trajectory, transitions) = jax.lax.scan(one, (chains, state), jax.random.split(key, n_steps))
        return trajectory, chains, state, transitions._replace(density_ok=jnp.all(transitions.density_ok))


def _current_log_weights(chains: Chains, q):
    """log w of the chains' states: cached log p minus log q at the current λ."""
    return chains.log_p - q.log_prob(chains.z)


class _Independence(Kernel):
    """IMH and CIS: proposals from q, whose sequential steps (JSA) are drawn and evaluated in one
    batch before a scan accepts or rejects them in order under the kernel's one-proposal rule."""

    def __init__(self, numpy_kernel):
        if numpy_kernel.defensive:
            raise ConfigurationError(
                f"{type(numpy_kernel).__name__.lower()} with defensive > 0 has no JAX twin; covered: defensive=0")

    @staticmethod
    def threshold(u):
        raise NotImplementedError

    @staticmethod
    def probability(log_ratio):
        raise NotImplementedError

    def steps(self, key, chains: Chains, state, target: Target, q, n_steps: int):
        num_chains, dim = chains.z.shape
        key_propose, key_accept = jax.random.split(key)
        z_new, log_q_new = q.sample_with_log_prob(key_propose, n_steps * num_chains)
        log_p_new = target.log_joint(z_new)
        z_new = z_new.reshape(n_steps, num_chains, dim)
        log_p_new = log_p_new.reshape(n_steps, num_chains)
        log_w_new = log_p_new - log_q_new.reshape(n_steps, num_chains)
        limits = self.threshold(jax.random.uniform(key_accept, (n_steps, num_chains), dtype=z_new.dtype))

        def one(held, proposal):
            z, log_p, log_w = held
            z_k, log_p_k, log_w_k, limit = proposal
            move = limit < log_w_k - log_w  # False for NaN: a 0/0 ratio rejects
            acceptance = self.probability(log_w_k - log_w)
            held = (jnp.where(move[:, None], z_k, z), jnp.where(move, log_p_k, log_p), jnp.where(move, log_w_k, log_w))
            return held, (held[0], acceptance)

        start = (chains.z, chains.log_p, _current_log_weights(chains, q))
        (z, log_p, _), (trajectory, acceptance) = jax.lax.scan(one, start, (z_new, log_p_new, log_w_new, limits))
        return trajectory, Chains(z, log_p), state, Transition(acceptance, density_ok=density_ok(log_p_new))


class IMH(_Independence):
    """Independent Metropolis-Hastings (Alg. 3): accept z* ~ q with min(1, w(z*)/w(z))."""

    threshold = staticmethod(jnp.log)
    probability = staticmethod(acceptance_probability)

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        return num_chains, 0  # one proposal per chain, whatever the budget

    def step(self, key, chains: Chains, state, target: Target, q, n_proposals: int = 1):
        key_propose, key_accept = jax.random.split(key)
        z_new, log_q_new = q.sample_with_log_prob(key_propose, chains.z.shape[0])
        log_p_new = target.log_joint(z_new)
        probability = acceptance_probability(log_p_new - log_q_new - _current_log_weights(chains, q))
        accept = jax.random.uniform(key_accept, probability.shape, dtype=probability.dtype) < probability
        moved = Chains(jnp.where(accept[:, None], z_new, chains.z), jnp.where(accept, log_p_new, chains.log_p))
        return moved, state, Transition(probability, density_ok=density_ok(log_p_new))


class CIS(_Independence):
    """Conditional importance sampling (i-SIR, Alg. 2): slot 0 keeps the current state, ``n_proposals``
    fresh draws of q, one slot resampled with the normalized weights (inverse CDF)."""

    exposes_weights = True
    uses_proposal_budget = True
    threshold = staticmethod(jax.scipy.special.logit)
    probability = staticmethod(barker_probability)

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        return num_chains * n_proposals, 0  # slot 0's log p is cached

    def step(self, key, chains: Chains, state, target: Target, q, n_proposals: int = 1):
        num_chains, dim = chains.z.shape
        key_propose, key_choose = jax.random.split(key)
        z_new, log_q_new = q.sample_with_log_prob(key_propose, num_chains * n_proposals)
        log_p_new = target.log_joint(z_new)
        candidates = jnp.concatenate([chains.z[:, None], z_new.reshape(num_chains, n_proposals, dim)], axis=1)
        log_p = jnp.concatenate([chains.log_p[:, None], log_p_new.reshape(num_chains, n_proposals)], axis=1)
        log_w = jnp.concatenate([_current_log_weights(chains, q)[:, None],
                                 (log_p_new - log_q_new).reshape(num_chains, n_proposals)], axis=1)
        weights = jax.nn.softmax(log_w, axis=1)
        u = jax.random.uniform(key_choose, (num_chains, 1), dtype=weights.dtype)
        chosen = jnp.minimum(jnp.sum(jnp.cumsum(weights, axis=1) < u, axis=1), n_proposals)
        rows = jnp.arange(num_chains)
        moved = Chains(candidates[rows, chosen], log_p[rows, chosen])
        info = {"cis_ess": 1.0 / jnp.sum(weights * weights, axis=1)}  # Kong's ESS per chain, in slots
        return moved, state, Transition(1.0 - weights[:, 0], candidates, weights, info, density_ok(log_p_new))


def mala_step(key, chains: Chains, target: Target, step_size: float):
    """One MALA transition of every chain from cached gradients (mcsa_bench.builtin.kernels.mala_step):
    (chains, acceptance probabilities, whether every log density asked for was below +inf)."""
    key_move, key_accept = jax.random.split(key)
    h2 = step_size * step_size
    noise = jax.random.normal(key_move, chains.z.shape, chains.z.dtype)
    candidate = chains.z + 0.5 * h2 * chains.grad_log_p + step_size * noise
    log_p, grad = target.log_joint_and_grad(candidate)
    back = chains.z - candidate - 0.5 * h2 * grad
    log_ratio = log_p - chains.log_p - 0.5 * jnp.sum(back * back, axis=1) / h2 + 0.5 * jnp.sum(noise * noise, axis=1)
    probability = acceptance_probability(log_ratio)
    accept = jax.random.uniform(key_accept, probability.shape, dtype=probability.dtype) < probability
    moved = Chains(jnp.where(accept[:, None], candidate, chains.z), jnp.where(accept, log_p, chains.log_p),
                   jnp.where(accept[:, None], grad, chains.grad_log_p))
    return moved, probability, density_ok(log_p)


class Ex2MCMC(Kernel):
    """Twin of mcsa_bench.builtin.kernels.Ex2MCMC: a CIS transition with ``n_proposals`` draws of q, the
    gradient at the chosen states, then ``mala_steps`` MALA transitions; CIS's acceptance and info, and
    ``mala_acceptance``."""

    needs_gradient = True
    uses_proposal_budget = True
    traced = ("step_size",)

    def __init__(self, numpy_kernel: numpy_kernels.Ex2MCMC):
        self.global_kernel = CIS(numpy_kernel.global_kernel)
        self.mala_steps, self.step_size = numpy_kernel.mala_steps, numpy_kernel.step_size

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        gradients = num_chains * (1 + self.mala_steps)  # the chosen states' gradient, then one per MALA step
        return num_chains * n_proposals + gradients, gradients

    def step(self, key, chains: Chains, state, target: Target, q, n_proposals: int = 1):
        key_global, key_local = jax.random.split(key)
        chosen, _, transition = self.global_kernel.step(key_global, chains, state, target, q, n_proposals)
        local = Chains(chosen.z, *target.log_joint_and_grad(chosen.z))
        ok = transition.density_ok & density_ok(local.log_p)
        acceptance = jnp.zeros_like(local.log_p)
        for step_key in jax.random.split(key_local, self.mala_steps):
            local, probability, fine = mala_step(step_key, local, target, self.step_size)
            acceptance, ok = acceptance + probability / self.mala_steps, ok & fine
        info = {**transition.info, "mala_acceptance": acceptance} if self.mala_steps else transition.info
        return local, state, Transition(transition.acceptance, info=info, density_ok=ok)


class HMCState(NamedTuple):
    """HMC's adaptation (mcsa_bench.builtin.hmc): each chain's ε, dual averaging's counters, and the
    last ADAPTATION_DELAY transitions' acceptance (oldest first; ``pending`` of them are filled)."""

    step_size: jnp.ndarray  # (C,)
    count: jnp.ndarray
    error_average: jnp.ndarray
    log_step_average: jnp.ndarray
    history: jnp.ndarray  # (ADAPTATION_DELAY, C)
    pending: jnp.ndarray


class HMC(Kernel):
    """HMC with the numpy kernel's options (step_size, n_leapfrog, mass, adapt_steps, adapt_rate,
    target_accept): diagonal mass from q's marginal scales, dual averaging (Hoffman & Gelman 2014,
    Alg. 5) during the warm-up, then per-chain ε following its acceptance ADAPTATION_DELAY
    transitions before.

    The step size and the adaptation's rate and target are the compiled programs' arguments
    (``traced``, accel/programs.py); the leapfrog steps, the mass, the warm-up's length and whether ε
    follows the acceptance at all shape the program."""

    needs_gradient = True
    traced = ("initial_step_size", "log_initial_step", "adapt_rate", "target_accept")

    def __init__(self, numpy_kernel: numpy_hmc.HMC):
        self.initial_step_size = numpy_kernel.initial_step_size
        self.log_initial_step = math.log(10.0 * self.initial_step_size)  # dual averaging's μ, as the numpy kernel's
        self.n_leapfrog = numpy_kernel.n_leapfrog
        self.mass = numpy_kernel.mass
        self.adapt_steps = numpy_kernel.adapt_steps
        self.adapt_rate = numpy_kernel.adapt_rate
        self.following = bool(self.adapt_rate)
        self.target_accept = numpy_kernel.target_accept

    def init_state(self, num_chains: int, dtype) -> HMCState:
        zero = jnp.zeros((), dtype)
        return HMCState(jnp.full(num_chains, self.initial_step_size, dtype), jnp.zeros((), jnp.int32), zero, zero,
                        jnp.zeros((numpy_hmc.ADAPTATION_DELAY, num_chains), dtype), jnp.zeros((), jnp.int32))

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        # one log_joint_and_grad over every chain per leapfrog step, divergent chains included (hmc.leapfrog)
        rows = num_chains * self.n_leapfrog
        return rows, rows

    def step(self, key, chains: Chains, state: HMCState, target: Target, q, n_proposals: int = 1):
        if chains.grad_log_p is None:  # chains from a kernel that caches no gradient
            chains = Chains(chains.z, *target.log_joint_and_grad(chains.z))
        key_momentum, key_accept = jax.random.split(key)
        inverse_mass = (jnp.ones(chains.z.shape[1], chains.z.dtype) if self.mass == "identity"
                        else q.location_scale()[1] ** 2)
        momentum = jax.random.normal(key_momentum, chains.z.shape, chains.z.dtype) / jnp.sqrt(inverse_mass)
        end_z, end_log_p, end_grad, energy_error, divergent, ok = self._leapfrog(
            target, chains, momentum, state.step_size, inverse_mass)
        log_ratio = jnp.where(divergent, -jnp.inf, -energy_error)
        acceptance = acceptance_probability(log_ratio)
        accept = jnp.log(jax.random.uniform(key_accept, log_ratio.shape, dtype=log_ratio.dtype)) < log_ratio
        moved = Chains(jnp.where(accept[:, None], end_z, chains.z), jnp.where(accept, end_log_p, chains.log_p),
                       jnp.where(accept[:, None], end_grad, chains.grad_log_p))
        info = {"divergences": divergent.astype(acceptance.dtype), "step_size": state.step_size}  # ε before adapting
        return moved, self._adapt(state, acceptance), Transition(acceptance, info=info, density_ok=ok)

    def _leapfrog(self, target: Target, chains: Chains, momentum, step_size, inverse_mass):
        """mcsa_bench.builtin.hmc.leapfrog: a chain diverges at a non-finite point or when its
        energies spread over more than DIVERGENCE_THRESHOLD, and is frozen at its last finite point.
        Also whether every log density asked for was below +inf and every gradient at a point of
        positive density finite (CheckedModel.log_joint_and_grad)."""
        step = step_size[:, None]
        drift = step * inverse_mass

        def kinetic(p):
            return 0.5 * jnp.sum(p * inverse_mass * p, axis=1)

        start_energy = kinetic(momentum) - chains.log_p
        carry = (chains.z, momentum + 0.5 * step * chains.grad_log_p, chains.log_p, chains.grad_log_p,
                 start_energy, start_energy, start_energy, ~jnp.isfinite(start_energy), jnp.asarray(True))

        def one(index, carry):
            z, p, log_p, grad, energy, lowest, highest, divergent, ok = carry
            moved = z + drift * p
            divergent = divergent | ~jnp.all(jnp.isfinite(moved), axis=1)
            moved = jnp.where(divergent[:, None], z, moved)
            new_log_p, new_grad = target.log_joint_and_grad(moved)
            finite_grad = jnp.all(jnp.isfinite(new_grad), axis=1) | (new_log_p == -jnp.inf)
            ok = ok & density_ok(new_log_p) & jnp.all(finite_grad)
            full_p = p + 0.5 * step * new_grad
            new_energy = kinetic(full_p) - new_log_p
            lowest, highest = jnp.minimum(lowest, new_energy), jnp.maximum(highest, new_energy)
            divergent = divergent | ~(highest - lowest <= numpy_hmc.DIVERGENCE_THRESHOLD)
            next_p = jnp.where(index < self.n_leapfrog - 1, p + step * new_grad, full_p)
            keep = divergent[:, None]
            return (jnp.where(keep, z, moved), jnp.where(keep, p, next_p), jnp.where(divergent, log_p, new_log_p),
                    jnp.where(keep, grad, new_grad), jnp.where(divergent, energy, new_energy), lowest, highest,
                    divergent, ok)

        z, _, log_p, grad, energy, _, _, divergent, ok = jax.lax.fori_loop(0, self.n_leapfrog, one, carry)
        return z, log_p, grad, energy - start_energy, divergent, ok

    def _adapt(self, state: HMCState, acceptance) -> HMCState:
        """mcsa_bench.builtin.hmc.HMC._adapt, both branches computed and one selected."""
        delay = numpy_hmc.ADAPTATION_DELAY
        # dual averaging on the mean acceptance (DualAveraging.update)
        m = state.count + 1
        mf = m.astype(acceptance.dtype)
        error = state.error_average + (self.target_accept - jnp.mean(acceptance) - state.error_average) / (mf + 10.0)
        log_step = self.log_initial_step - jnp.sqrt(mf) / 0.05 * error
        weight = mf ** (-0.75)
        log_average = weight * log_step + (1.0 - weight) * state.log_step_average
        warm_step = jnp.where(m == self.adapt_steps, jnp.exp(log_average), jnp.exp(log_step))
        warming = state.count < self.adapt_steps
        # after the warm-up: each chain's ε follows its acceptance from `delay` transitions before
        full = state.pending == delay
        followed = state.step_size * jnp.exp(self.adapt_rate * (state.history[0] - self.target_accept))
        history = jnp.concatenate([state.history[1:], acceptance[None]])
        following = HMCState(jnp.where(full, followed, state.step_size), state.count, state.error_average,
                             state.log_step_average, history, jnp.minimum(state.pending + 1, delay))
        if not self.following:
            following = state
        warm = HMCState(jnp.broadcast_to(warm_step, state.step_size.shape), m, error, log_average, state.history,
                        state.pending)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(warming, a, b), warm, following)
