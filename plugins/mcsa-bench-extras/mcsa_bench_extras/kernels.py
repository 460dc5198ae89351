"""Three π-invariant kernels.

``rwmh`` and ``mala`` propose from the current state and ignore q: schemes drive them through
the generic :meth:`mcsa_bench.api.Kernel.steps` (JSA) or one transition per chain (pMCSA, MSC).
``rwmh`` reports its own diagnostic, ``jump_distance`` (how far each chain moved: 0 on a rejection),
through the transition's info; the schemes log its mean as a metric of that name.
``barker_imh`` proposes from q like IMH but accepts with Barker's probability w*/(w* + w), which
is also π-invariant (it satisfies detailed balance) and never exceeds Metropolis' min(1, w*/w).
Each transition makes one batched density call for all chains.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mcsa_bench.api import Array, ChainState, ConfigurationError, Kernel, MetricSpec, Proposal, Target, Transition


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _single_proposal(kernel: str, n_proposals: int) -> None:
    if n_proposals != 1:
        raise ConfigurationError(f"the {kernel} kernel makes one proposal per transition, "
                                 f"got n_proposals={n_proposals}")


def _metropolis_probability(log_ratio: Array) -> Array:
    """min(1, exp(log_ratio)); NaN (an undefined ratio) counts as a rejection."""
    with np.errstate(invalid="ignore", over="ignore"):
        probability = np.exp(np.minimum(log_ratio, 0.0))
    return np.where(np.isnan(probability), 0.0, probability)


def _barker_probability(log_ratio: Array) -> Array:
    """exp(r)/(1 + exp(r)) = w*/(w* + w) for r = log w* - log w, stable for any r; NaN rejects."""
    with np.errstate(invalid="ignore", over="ignore"):
        probability = np.exp(-np.logaddexp(0.0, -log_ratio))
    return np.where(np.isnan(probability), 0.0, probability)


def _accept(rng: np.random.Generator, state: ChainState, probability: Array, candidate: Array, log_p: Array,
            grad: Array | None = None) -> Transition:
    """Move each chain to its candidate with ``probability``; the transition reports that probability."""
    accept = rng.random(len(probability)) < probability
    new_grad = None if grad is None else np.where(accept[:, None], grad, state.grad_log_p)
    z = np.where(accept[:, None], candidate, state.z)
    return Transition(ChainState(z, np.where(accept, log_p, state.log_p), new_grad), probability)


class RandomWalkMetropolis(Kernel):
    """Random-walk Metropolis: z* = z + step_size·ε with ε ~ N(0, I), accepted with min(1, π(z*)/π(z)).

    Ignores q. ``step_size`` is the proposal's standard deviation in every coordinate.
    """

    def __init__(self, step_size: float = 0.5):
        self.step_size = _positive("step_size", step_size)

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        _single_proposal("rwmh", n_proposals)
        candidate = state.z + self.step_size * rng.standard_normal(state.z.shape)
        log_p = target.log_joint(candidate)
        transition = _accept(rng, state, _metropolis_probability(log_p - state.log_p), candidate, log_p)
        return replace(transition, info={"jump_distance": np.linalg.norm(transition.state.z - state.z, axis=1)})

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"jump_distance": MetricSpec("diagnostic", "higher", "mean jump distance of the chains")}


class MALA(Kernel):
    """Metropolis-adjusted Langevin: z* ~ N(z + (h²/2)∇log π(z), h² I), accepted with the
    Metropolis-Hastings ratio π(z*) k(z | z*) / (π(z) k(z* | z)); h = ``step_size``. Ignores q.

    Needs the model's gradient; it is cached in the chain state, so each transition makes one
    batched ``log_joint_and_grad`` call.
    """

    needs_gradient = True

    def __init__(self, step_size: float = 0.2):
        self.step_size = _positive("step_size", step_size)

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        _single_proposal("mala", n_proposals)
        if state.grad_log_p is None:  # chains not made by init (the gradient is normally cached)
            state = ChainState(state.z, *target.log_joint_and_grad(state.z))
        h2 = self.step_size**2
        noise = rng.standard_normal(state.z.shape)
        candidate = state.z + 0.5 * h2 * state.grad_log_p + self.step_size * noise
        with np.errstate(invalid="ignore", over="ignore"):
            log_p, grad = target.log_joint_and_grad(candidate)
            back = state.z - candidate - 0.5 * h2 * grad  # z - mean of the reverse proposal
            log_forward = -0.5 * np.einsum("bd,bd->b", noise, noise)
            log_backward = -0.5 * np.einsum("bd,bd->b", back, back) / h2
            log_ratio = log_p - state.log_p + log_backward - log_forward
        return _accept(rng, state, _metropolis_probability(log_ratio), candidate, log_p, grad)


class BarkerIMH(Kernel):
    """Independent Metropolis-Hastings with Barker's acceptance: z* ~ q, accepted with
    w(z*)/(w(z*) + w(z)), w = π/q (the CIS kernel with one proposal, without the weights).

    Proposals do not depend on the state, so :meth:`steps` evaluates those of all sequential
    steps in one batched call before the accept/reject sweep.
    """

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        _single_proposal("barker_imh", n_proposals)
        candidate, log_q = proposal.sample_with_log_prob(rng, state.num_chains)
        log_p = target.log_joint(candidate)
        log_ratio = (log_p - log_q) - (state.log_p - proposal.log_prob(state.z))
        return _accept(rng, state, _barker_probability(log_ratio), candidate, log_p)

    def steps(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
              n_steps: int) -> tuple[Array, ChainState, Array]:
        chains, dim = state.z.shape
        candidates, log_q = proposal.sample_with_log_prob(rng, n_steps * chains)
        log_p = target.log_joint(candidates).reshape(n_steps, chains)
        log_w = log_p - log_q.reshape(n_steps, chains)
        candidates = candidates.reshape(n_steps, chains, dim)
        uniforms = rng.random((n_steps, chains))
        z, held_log_p, held_log_w = state.z, state.log_p, state.log_p - proposal.log_prob(state.z)
        trajectory, acceptance = np.empty((n_steps, chains, dim)), np.empty((n_steps, chains))
        for k in range(n_steps):  # sequential by nature; vectorized over chains
            acceptance[k] = _barker_probability(log_w[k] - held_log_w)
            accept = uniforms[k] < acceptance[k]
            z = np.where(accept[:, None], candidates[k], z)
            held_log_p = np.where(accept, log_p[k], held_log_p)
            held_log_w = np.where(accept, log_w[k], held_log_w)
            trajectory[k] = z
        return trajectory, ChainState(z, held_log_p), acceptance
