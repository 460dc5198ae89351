"""Built-in independence kernels that use q as their proposal (docs/methods.md §2), and the local-global
Ex2MCMC kernel (CIS, then MALA steps).

Both work in log space with importance weights log w(z) = log p(x, z) - log q_def(z; λ), cache
log p of the current states, and evaluate all fresh proposals of a transition in one batched
``log_joint`` call. log q_def of the current states is recomputed because λ changed since they
were accepted.

q_def is q itself unless ``defensive`` = ε > 0: then proposals come from the defensive mixture
q_def = (1 - ε) q + ε ν (:class:`DefensiveMixture`). The mixture lives only inside the kernel;
schemes still take the score of q.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.special import expit, gammaln, logit

from mcsa_bench.api import (
    Approximation,
    Array,
    ChainState,
    ConfigurationError,
    Kernel,
    MetricSpec,
    Model,
    Proposal,
    Target,
    Transition,
    VariationalFamily,
)
from mcsa_bench.hookspecs import hookimpl


def effective_sample_size(weights: Array) -> Array:
    """1/Σ_i w̄_i² of normalized weights along the last axis (Kong's ESS, a count of samples)."""
    return 1.0 / np.sum(weights * weights, axis=-1)


def acceptance_probability(log_ratio: Array) -> Array:
    """min(1, exp(log_ratio)); NaN (a 0/0 weight ratio) counts as a rejection."""
    probability = np.exp(np.minimum(log_ratio, 0.0))  # NaN stays NaN, quietly
    return np.fmax(probability, 0.0, out=probability)  # fmax(NaN, 0) = 0; p >= 0 otherwise


def mean_acceptance(acceptance: Array) -> float:
    """The mean of acceptance probabilities as a float: ``float(acceptance.mean())`` without its Python layer."""
    return float(np.add.reduce(acceptance, axis=None)) / acceptance.size


def barker_probability(log_ratio: Array) -> Array:
    """w*/(w* + w) = 1/(1 + exp(-log_ratio)); NaN (a 0/0 weight ratio) counts as a rejection."""
    probability = expit(log_ratio)
    return np.fmax(probability, 0.0, out=probability)


class AcceptanceRule(NamedTuple):
    """How one independence step with a single proposal z* decides to move, as a function of the
    log weight ratio r = log w(z*) - log w(z): it moves iff ``threshold(u) < r`` for u ~ U(0, 1),
    which happens with probability ``probability(r)``."""

    threshold: Callable[[Array], Array]
    probability: Callable[[Array], Array]


#: Metropolis-Hastings (IMH, Alg. 3): u < min(1, e^r)  <=>  log u < r
METROPOLIS_HASTINGS = AcceptanceRule(np.log, acceptance_probability)
#: Barker, i.e. CIS with one proposal (Alg. 2): u < w*/(w* + w) = σ(r)  <=>  logit u < r
BARKER = AcceptanceRule(logit, barker_probability)


def _sequential_sweep(log_w_start: Array, log_w_new: Array, thresholds: Array) -> Array:
    """Accept/reject sweep of sequential independence steps over pre-evaluated proposals.

    ``log_w_start`` (C,) are the chains' starting log weights, ``log_w_new`` and ``thresholds``
    (n, C) the proposals' log weights and the rule's thresholds (:class:`AcceptanceRule`): step k
    moves to proposal k iff thresholds[k] < log_w_new[k] - (log weight held). Returns ``source``
    (n, C): the index of the proposal each chain holds after each step (-1: its starting state).
    The sweep is sequential and scalar by nature; plain Python floats run it ~10x faster than
    numpy ops on the single chain JSA keeps (benchmarks/measure/overhead.py). ``t < NaN`` is False: a 0/0
    ratio rejects.
    """
    n_steps, num_chains = log_w_new.shape
    source = np.empty((num_chains, n_steps), dtype=np.intp)
    for c, (log_w, proposals, limits) in enumerate(
        zip(log_w_start.tolist(), log_w_new.T.tolist(), thresholds.T.tolist())
    ):
        held, column = -1, []
        for k in range(n_steps):
            if limits[k] < proposals[k] - log_w:
                log_w, held = proposals[k], k
            column.append(held)
        source[c] = column
    return source.T


def _propose(rng: np.random.Generator, target: Target, proposal: Proposal, count: int) -> tuple[Array, Array, Array]:
    """``count`` fresh proposals: (z (count, D), log p (count,), log weight log p - log q (count,))."""
    z, log_q = proposal.sample_with_log_prob(rng, count)
    log_p = target.log_joint(z)  # the one batched density call of the transition
    return z, log_p, log_p - log_q


def _current_log_weights(state: ChainState, proposal: Proposal) -> Array:
    """log w of the chains' states: cached log p minus log q at the current λ (recomputed: λ moved)."""
    return state.log_p - proposal.log_prob(state.z)


class DefensiveMixture:
    """q_def = (1 - ε) q + ε ν with ν = ∏_d Student-t_df(location_d, scale_d), where location and
    scale are q's (``VariationalFamily.moments``); df = 1 is a product of Cauchy.

    Each draw picks its component independently (ν with probability ε); log q_def is the
    log-sum-exp of the two weighted components, so it stays finite far in the tails.
    """

    def __init__(self, q: Approximation, weight: float, df: float):
        moments = q.moments()
        if moments is None:
            raise ConfigurationError(f"a defensive mixture needs q's location and scale; "
                                     f"family {type(q.family).__name__} has none (VariationalFamily.moments)")
        self.q, self.weight, self.df = q, weight, df
        self.location, self.scale = moments.location, moments.scale
        dim = q.dim
        # log ν(z) = const - (df + 1)/2 Σ_d log(1 + u_d²/df), u = (z - location)/scale
        log_norm_1d = gammaln(0.5 * (df + 1)) - gammaln(0.5 * df) - 0.5 * math.log(df * math.pi)
        self._log_norm = dim * log_norm_1d - float(np.log(self.scale).sum())

    def heavy_log_prob(self, z: Array) -> Array:
        """log ν(z), shape (B,)."""
        u = (z - self.location) / self.scale
        return self._log_norm - 0.5 * (self.df + 1.0) * np.log1p(u * u / self.df).sum(axis=1)

    def log_prob(self, z: Array) -> Array:
        return np.logaddexp(math.log1p(-self.weight) + self.q.log_prob(z),
                            math.log(self.weight) + self.heavy_log_prob(z))

    def sample_with_log_prob(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        heavy = rng.random(n) < self.weight
        n_heavy = int(heavy.sum())
        z = np.empty((n, self.q.dim))
        z[~heavy] = self.q.sample(rng, n - n_heavy)
        z[heavy] = self.location + self.scale * rng.standard_t(self.df, (n_heavy, self.q.dim))
        return z, self.log_prob(z)


class _IndependenceKernel(Kernel):
    """Shared by IMH and CIS: the proposal is q, or the defensive mixture of q when ``defensive`` > 0,
    and sequential steps (:meth:`steps`) decided by the kernel's one-proposal ``sequential_rule``."""

    sequential_rule: AcceptanceRule
    defensive: float = 0.0
    defensive_df: float = 1.0

    def __init__(self, defensive: float = 0.0, defensive_df: float = 1.0):
        if not 0.0 <= defensive < 1.0:
            raise ConfigurationError(
                f"defensive (the weight ε of the heavy-tailed mixture component) must be in [0, 1), got {defensive}")
        if not defensive_df > 0:
            raise ConfigurationError(
                f"defensive_df (Student-t degrees of freedom; 1 = Cauchy) must be positive, got {defensive_df}")
        self.defensive = float(defensive)
        self.defensive_df = float(defensive_df)

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        if self.defensive > 0 and family.moments(family.init_params()) is None:
            return "with defensive > 0 needs a family with a location and scale (VariationalFamily.moments)"
        return super().model_incompatibility(model, family)

    def _proposal(self, proposal: Proposal) -> Proposal:
        """q_def: ``proposal`` itself when ε = 0 (no extra draws), else its defensive mixture."""
        if self.defensive == 0.0:
            return proposal
        if not isinstance(proposal, Approximation):
            raise ConfigurationError("a defensive mixture needs q (an Approximation) as the kernel's proposal")
        return DefensiveMixture(proposal, self.defensive, self.defensive_df)

    def steps(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
              n_steps: int) -> tuple[Array, ChainState, Array]:
        """``n_steps`` sequential one-proposal transitions under the kernel's ``sequential_rule``.

        The proposals do not depend on the current state, so all of them are drawn and evaluated
        in one batched call; a scalar sweep then accepts or rejects them in order.
        """
        num_chains, dim = state.z.shape
        proposal = self._proposal(proposal)
        z_new, log_p_new, log_w_new = _propose(rng, target, proposal, n_steps * num_chains)
        z_new = z_new.reshape(n_steps, num_chains, dim)
        log_p_new = log_p_new.reshape(n_steps, num_chains)
        log_w_new = log_w_new.reshape(n_steps, num_chains)
        log_w_start = _current_log_weights(state, proposal)
        rule = self.sequential_rule
        source = _sequential_sweep(log_w_start, log_w_new, rule.threshold(rng.random((n_steps, num_chains))))

        chains = np.arange(num_chains)
        moved = source >= 0
        k_index = np.maximum(source, 0)
        trajectory = np.where(moved[..., None], z_new[k_index, chains], state.z)
        log_p = np.where(moved, log_p_new[k_index, chains], state.log_p)
        # log weight held before each step -> the acceptance probability of that step
        log_w_held = np.where(moved, log_w_new[k_index, chains], log_w_start)
        log_w_before = np.concatenate([log_w_start[None], log_w_held[:-1]])
        acceptance = rule.probability(log_w_new - log_w_before)
        return trajectory, ChainState(trajectory[-1], log_p[-1]), acceptance


class IMH(_IndependenceKernel):
    """Independent Metropolis-Hastings: propose z* ~ q_def, accept with min(1, w(z*)/w(z)) (Alg. 3).

    The proposal does not depend on the current state, so :meth:`steps` draws and evaluates the
    proposals of all sequential steps in one batch before its accept/reject sweep. ``defensive``
    = ε mixes a product of Student-t (``defensive_df`` degrees of freedom) into the proposal.
    """

    sequential_rule = METROPOLIS_HASTINGS

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        if n_proposals != 1:
            raise ConfigurationError(f"the imh kernel makes one proposal per transition, got n_proposals={n_proposals}")
        proposal = self._proposal(proposal)
        z_new, log_p_new, log_w_new = _propose(rng, target, proposal, state.num_chains)
        probability = acceptance_probability(log_w_new - _current_log_weights(state, proposal))
        accept = rng.random(len(probability)) < probability  # u < min(1, w*/w); a NaN ratio rejects
        new_state = ChainState(np.where(accept[:, None], z_new, state.z), np.where(accept, log_p_new, state.log_p))
        return Transition(new_state, probability)


class CIS(_IndependenceKernel):
    """Conditional importance sampling (i-SIR, Alg. 2): keep the current state in slot 0, draw
    ``n_proposals`` fresh proposals from q_def, resample one slot with the normalized weights w̄.

    With one proposal it is an IMH kernel with Barker's acceptance w(z*)/(w(z*) + w(z)); its
    :meth:`steps` (JSA) are such one-proposal transitions, batched like IMH's. Exposes the
    candidates and w̄ for Rao-Blackwellized schemes (MSC-RB), and reports ``cis_ess`` per chain,
    the effective sample size 1/Σ_i w̄_i² of its slots (1 to n_proposals + 1). ``defensive`` as for IMH.
    """

    exposes_weights = True
    uses_proposal_budget = True
    sequential_rule = BARKER

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"cis_ess": MetricSpec("diagnostic", "higher", "effective sample size of the CIS weights", "slots")}

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        if n_proposals < 1:
            raise ConfigurationError(f"the cis kernel needs n_proposals >= 1, got {n_proposals}")
        proposal = self._proposal(proposal)
        num_chains, dim = state.z.shape
        z_new, log_p_new, log_w_new = _propose(rng, target, proposal, num_chains * n_proposals)
        candidates = np.concatenate([state.z[:, None, :], z_new.reshape(num_chains, n_proposals, dim)], axis=1)
        log_p = np.concatenate([state.log_p[:, None], log_p_new.reshape(num_chains, n_proposals)], axis=1)
        log_w = np.concatenate(
            [_current_log_weights(state, proposal)[:, None], log_w_new.reshape(num_chains, n_proposals)], axis=1
        )
        weights = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)

        # Inverse-CDF draw of one slot per chain.
        u = rng.random((num_chains, 1))
        chosen = np.minimum((np.cumsum(weights, axis=1) < u).sum(axis=1), n_proposals)
        chains = np.arange(num_chains)
        new_state = ChainState(candidates[chains, chosen], log_p[chains, chosen])
        return Transition(new_state, 1.0 - weights[:, 0], candidates, weights,
                          {"cis_ess": effective_sample_size(weights)})


def mala_step(rng: np.random.Generator, state: ChainState, target: Target,
              step_size: float) -> tuple[ChainState, Array]:
    """One Metropolis-adjusted Langevin transition of every chain (z* ~ N(z + (h²/2)∇log π(z), h² I),
    accepted with π(z*) k(z | z*) / (π(z) k(z* | z))), from chains that cache ∇log π: one batched
    ``log_joint_and_grad`` call. Returns the chains and each one's acceptance probability."""
    h2 = step_size * step_size
    noise = rng.standard_normal(state.z.shape)
    candidate = state.z + 0.5 * h2 * state.grad_log_p + step_size * noise
    log_p, grad = target.log_joint_and_grad(candidate)
    with np.errstate(invalid="ignore", over="ignore"):
        back = state.z - candidate - 0.5 * h2 * grad  # z minus the mean of the reverse proposal
        log_ratio = (log_p - state.log_p - 0.5 * np.einsum("bd,bd->b", back, back) / h2
                     + 0.5 * np.einsum("bd,bd->b", noise, noise))
        probability = acceptance_probability(log_ratio)
    accept = rng.random(len(probability)) < probability
    moved = ChainState(np.where(accept[:, None], candidate, state.z), np.where(accept, log_p, state.log_p),
                       np.where(accept[:, None], grad, state.grad_log_p))
    return moved, probability


class Ex2MCMC(Kernel):
    """A local-global kernel (Samsonov et al., NeurIPS 2022, Ex2MCMC): a global i-SIR (CIS) transition with
    ``n_proposals`` fresh draws of q, then ``mala_steps`` MALA transitions of step size ``step_size`` from
    the state it chose. Each part leaves π invariant, so their composition does.

    Calls per transition: one batched ``log_joint`` over the proposals (CIS's), one ``log_joint_and_grad``
    at the chosen states (the gradient MALA starts from; the slot CIS chose may be a fresh proposal) and
    one per MALA step. Reports ``acceptance`` as CIS's (1 − w̄ of the current slot) and ``mala_acceptance``,
    the mean MALA acceptance probability per chain. Its final state is not one of CIS's candidates, so it
    exposes no weights (msc_rb takes cis itself).
    """

    needs_gradient = True
    uses_proposal_budget = True

    def __init__(self, mala_steps: int = 3, step_size: float = 0.1, defensive: float = 0.0,
                 defensive_df: float = 1.0):
        if not (isinstance(mala_steps, int) and mala_steps >= 0):
            raise ConfigurationError(f"mala_steps must be an integer >= 0, got {mala_steps!r}")
        if not (isinstance(step_size, (int, float)) and math.isfinite(step_size) and step_size > 0):
            raise ConfigurationError(f"step_size must be a positive number, got {step_size!r}")
        self.mala_steps, self.step_size = mala_steps, float(step_size)
        self.global_kernel = CIS(defensive, defensive_df)

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        return self.global_kernel.model_incompatibility(model, family) or super().model_incompatibility(model, family)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {**self.global_kernel.metric_specs(),
                "mala_acceptance": MetricSpec("diagnostic", "higher", "MALA acceptance rate of the local steps")}

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        transition = self.global_kernel.step(rng, state, target, proposal, n_proposals)
        chains = ChainState(transition.state.z, *target.log_joint_and_grad(transition.state.z))
        acceptance = np.zeros(state.num_chains)
        for _ in range(self.mala_steps):
            chains, probability = mala_step(rng, chains, target, self.step_size)
            acceptance += probability / self.mala_steps
        info = {**transition.info, "mala_acceptance": acceptance} if self.mala_steps else transition.info
        return Transition(chains, transition.acceptance, info=info)


@hookimpl
def register_kernels(register):
    register("imh", IMH, jax="mcsa_bench.accel.kernels:IMH")
    register("cis", CIS, jax="mcsa_bench.accel.kernels:CIS")
    register("ex2mcmc", Ex2MCMC, jax="mcsa_bench.accel.kernels:Ex2MCMC")
