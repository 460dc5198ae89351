"""Hamiltonian Monte Carlo (docs/methods.md §2; Neal 2011), batched over chains.

One transition: draw momenta p ~ N(0, M), run ``n_leapfrog`` leapfrog steps of size ε on
H(z, p) = -log p(x, z) + ½ pᵀM⁻¹p, accept the end point with probability min(1, exp(-ΔH)).
Each leapfrog step is one batched ``log_joint_and_grad`` call over all chains; log p and its
gradient at the chains' states are cached in ``ChainState``, so a transition costs exactly L
calls. A divergent trajectory (a non-finite point, or energies spread over more than
:data:`DIVERGENCE_THRESHOLD` nats) is frozen where it diverged, rejected and reported in the
transition's info as ``divergences`` (1 per divergent chain: the schemes log their fraction); it is
never an error. The info's ``step_size`` is the ε each chain's trajectory used.

The mass matrix M is diagonal: M = diag(1/σ²) with σ the marginal scales of q at the current λ
(``mass="diagonal"``, the default: M⁻¹ is q's covariance, ``VariationalFamily.moments``), or
the identity. M is fixed within a transition, so for a fixed q the kernel is π-invariant.

Step size: dual averaging (Hoffman & Gelman 2014, Alg. 5) of one ε on the chains' mean acceptance
during the first ``adapt_steps`` transitions, frozen at the averaged ε̄ after them; then, with
``adapt_rate`` > 0 (the default), each chain's ε keeps following its own acceptance, because q and
so the right ε keep changing during an MCSA run (docs/estimators.md, "The hmc kernel's defaults").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

import numpy as np

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
from mcsa_bench.builtin.kernels import acceptance_probability, mean_acceptance
from mcsa_bench.hookspecs import hookimpl

MassMatrix = Literal["identity", "diagonal"]  # run --help lists them
MASS_MATRICES = get_args(MassMatrix)


#: A trajectory diverged when its energy H = -log p + ½ pᵀM⁻¹p varies by more than this many nats
#: along it (Stan's, NumPyro's and BlackJAX's threshold), or when any of its points is non-finite.
DIVERGENCE_THRESHOLD = 1000.0


#: After the warm-up a chain's ε follows its acceptance from this many transitions before, not its
#: last one: a step size that follows the chain's current state breaks π-invariance (chains started
#: at π drift off it by up to 9 % in E[(z-m)ᵀΣ⁻¹(z-m)] without the delay, within the Monte Carlo
#: error with it; tests/builtin/test_hmc.py).
ADAPTATION_DELAY = 5


class Trajectory(NamedTuple):
    """The end of ``n_steps`` leapfrog steps for every chain: position, momentum, log p, ∇ log p,
    the energy error H(end) - H(start), and which chains' trajectories diverged (``divergent``
    (C,), bool; their other fields are those of the last finite point and mean nothing)."""

    z: Array
    momentum: Array
    log_p: Array
    grad_log_p: Array
    energy_error: Array
    divergent: Array


def leapfrog(
    target: Target, z: Array, log_p: Array, grad_log_p: Array, momentum: Array, step_size: float | Array,
    n_steps: int, inverse_mass: Array,
) -> Trajectory:
    """``n_steps`` leapfrog steps of size ``step_size`` (one for all chains, or one per chain (C,))
    from (z, momentum) for every chain.

    ``log_p`` and ``grad_log_p`` are log p and its gradient at ``z``; ``inverse_mass`` (D,) is the
    diagonal of M⁻¹. A chain's trajectory diverges when a point of it is non-finite (position or
    energy: -inf log p included) or when its energies spread over more than
    :data:`DIVERGENCE_THRESHOLD` (max - min along the trajectory: a criterion the reversed
    trajectory shares, so rejecting divergent trajectories keeps the kernel π-invariant). A
    divergent chain is frozen at its last finite point for the remaining steps: every step stays
    one batched ``log_joint_and_grad`` call over all chains, and the model is never asked for its
    density at a non-finite z.
    """
    if np.ndim(step_size):
        step_size = np.reshape(step_size, (-1, 1))
    drift = step_size * inverse_mass
    start_energy = energy = kinetic_energy(momentum, inverse_mass) - log_p
    lowest, highest = energy.copy(), energy.copy()
    divergent = ~np.isfinite(energy)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow marks a divergent chain, handled below
        momentum = momentum + 0.5 * step_size * grad_log_p
        for step in range(n_steps):
            moved = z + drift * momentum
            if not math.isfinite(
                np.add.reduce(moved, axis=None)
            ):  # one sum is finite iff all entries are, or overflows
                divergent |= ~np.isfinite(moved).all(axis=1)
            if divergent.any():  # frozen chains keep their last finite point, momentum and energy
                moved = np.where(divergent[:, None], z, moved)
            new_log_p, new_grad = target.log_joint_and_grad(moved)
            full_momentum = momentum + 0.5 * step_size * new_grad  # p at the new point, for its energy
            new_energy = _kinetic_energy(full_momentum, inverse_mass) - new_log_p
            np.minimum(lowest, new_energy, out=lowest)
            np.maximum(highest, new_energy, out=highest)
            divergent |= ~(highest - lowest <= DIVERGENCE_THRESHOLD)  # NaN or inf: divergent
            next_momentum = momentum + step_size * new_grad if step < n_steps - 1 else full_momentum
            if divergent.any():
                keep = divergent[:, None]
                z, momentum = np.where(keep, z, moved), np.where(keep, momentum, next_momentum)
                log_p, grad_log_p = np.where(divergent, log_p, new_log_p), np.where(keep, grad_log_p, new_grad)
                energy = np.where(divergent, energy, new_energy)
            else:
                z, momentum, log_p, grad_log_p, energy = moved, next_momentum, new_log_p, new_grad, new_energy
    with np.errstate(invalid="ignore"):
        return Trajectory(z, momentum, log_p, grad_log_p, energy - start_energy, divergent)


def kinetic_energy(momentum: Array, inverse_mass: Array) -> Array:
    """½ pᵀM⁻¹p per chain, shape (C,)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _kinetic_energy(momentum, inverse_mass)


def _kinetic_energy(momentum: Array, inverse_mass: Array) -> Array:
    return 0.5 * np.einsum("cd,cd->c", momentum * inverse_mass, momentum)


@dataclass
class DualAveraging:
    """Step-size adaptation of Hoffman & Gelman (2014), Alg. 5, towards a target acceptance δ.

    After m updates with acceptance statistics α_1..α_m:
    H̄_m = (1 - 1/(m+t0)) H̄_{m-1} + (δ - α_m)/(m+t0),  log ε_m = μ - √m/γ H̄_m,
    log ε̄_m = m^-κ log ε_m + (1 - m^-κ) log ε̄_{m-1},  with μ = log(10 ε_0).
    Plain attributes: the state is stored with the kernel in a checkpoint (mcsa_bench/engine/checkpoint.py).
    """

    initial_step_size: float
    target_accept: float = 0.8
    gamma: float = 0.05
    t0: float = 10.0
    kappa: float = 0.75
    count: int = 0
    error_average: float = 0.0  # H̄
    log_step_average: float = 0.0  # log ε̄

    @property
    def mu(self) -> float:
        return math.log(10.0 * self.initial_step_size)

    def update(self, acceptance: float) -> float:
        """Record one transition's mean acceptance probability; returns the next step size ε_m."""
        self.count += 1
        m = self.count
        self.error_average += (self.target_accept - acceptance - self.error_average) / (m + self.t0)
        log_step = self.mu - math.sqrt(m) / self.gamma * self.error_average
        weight = m ** (-self.kappa)
        self.log_step_average = weight * log_step + (1.0 - weight) * self.log_step_average
        return math.exp(log_step)

    @property
    def final_step_size(self) -> float:
        """ε̄, the step size used once adaptation ends."""
        return math.exp(self.log_step_average)


class HMC(Kernel):
    """Hamiltonian Monte Carlo: ``n_leapfrog`` leapfrog steps of size ε, Metropolis correction;
    ``mass`` is "diagonal" (M⁻¹ = q's marginal variances) or "identity".

    ε starts at ``step_size``; with ``adapt_steps`` > 0 it is tuned by dual averaging towards
    ``target_accept`` during the first ``adapt_steps`` transitions (counted from :meth:`init`),
    then frozen at ε̄ if ``adapt_rate`` is 0, else each chain's ε_c follows its acceptance α_c from
    ADAPTATION_DELAY transitions before: log ε_c += adapt_rate · (α_c - target_accept).
    ``step_size`` is then an array (C,). The papers' fixed settings: Gaussian ε = 0.4, L = 16,
    radon ε = 0.02, L = 64, with ``mass=identity adapt_steps=0 adapt_rate=0``.
    """

    needs_gradient = True

    def __init__(self, step_size: float = 0.1, n_leapfrog: int = 16, mass: MassMatrix = "diagonal",
                 adapt_steps: int = 100, adapt_rate: float = 0.2, target_accept: float = 0.8):
        if not step_size > 0:
            raise ConfigurationError(f"step_size must be positive, got {step_size}")
        if isinstance(n_leapfrog, bool) or int(n_leapfrog) != n_leapfrog or n_leapfrog < 1:
            raise ConfigurationError(f"n_leapfrog must be an integer >= 1, got {n_leapfrog}")
        if mass not in MASS_MATRICES:
            raise ConfigurationError(f"unknown mass {mass!r}; allowed: {', '.join(MASS_MATRICES)}")
        if isinstance(adapt_steps, bool) or int(adapt_steps) != adapt_steps or adapt_steps < 0:
            raise ConfigurationError(f"adapt_steps must be an integer >= 0, got {adapt_steps}")
        if not 0 <= adapt_rate < 1:
            raise ConfigurationError(f"adapt_rate must be in [0, 1) (0: ε frozen after adapt_steps), got {adapt_rate}")
        if not 0 < target_accept < 1:
            raise ConfigurationError(f"target_accept must be in (0, 1), got {target_accept}")
        self.initial_step_size = float(step_size)
        self.n_leapfrog = int(n_leapfrog)
        self.mass = mass
        self.adapt_steps = int(adapt_steps)
        self.adapt_rate = float(adapt_rate)
        self.target_accept = float(target_accept)
        self._reset_adaptation()

    def _reset_adaptation(self) -> None:
        self.step_size = self.initial_step_size
        self.adaptation = DualAveraging(self.initial_step_size, self.target_accept) if self.adapt_steps else None
        self.pending_acceptance: list[Array] = []  # the last ADAPTATION_DELAY transitions' acceptance, oldest first

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        if self.mass == "diagonal" and family.moments(family.init_params()) is None:
            return "with mass=diagonal needs a family with marginal scales (VariationalFamily.moments)"
        return super().model_incompatibility(model, family)

    def init(self, target: Target, z: Array) -> ChainState:
        """Chains at ``z`` with log p and its gradient cached; restarts the step-size adaptation."""
        self._reset_adaptation()
        return super().init(target, z)

    def _inverse_mass(self, proposal: Proposal, dim: int) -> Array:
        if self.mass == "identity":
            return np.ones(dim)
        if not isinstance(proposal, Approximation):
            raise ConfigurationError("hmc with mass=diagonal needs q (an Approximation) as its proposal")
        moments = proposal.moments()
        if moments is None:
            raise ConfigurationError(f"hmc with mass=diagonal: family {type(proposal.family).__name__} has no scales")
        return moments.scale**2

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        if n_proposals != 1:
            raise ConfigurationError(
                f"the hmc kernel makes one trajectory per transition, got n_proposals={n_proposals}")
        if state.grad_log_p is None:  # a state from a kernel that caches no gradient
            state = ChainState(state.z, *target.log_joint_and_grad(state.z))
        inverse_mass = self._inverse_mass(proposal, state.z.shape[1])
        momentum = rng.standard_normal(state.z.shape) / np.sqrt(inverse_mass)
        end = leapfrog(target, state.z, state.log_p, state.grad_log_p, momentum, self.step_size, self.n_leapfrog,
                       inverse_mass)
        log_ratio = -end.energy_error
        log_ratio[end.divergent] = -np.inf  # a divergent trajectory is a rejection
        acceptance = acceptance_probability(log_ratio)
        accept = np.log(rng.random(state.num_chains)) < log_ratio
        new_state = ChainState(
            np.where(accept[:, None], end.z, state.z),
            np.where(accept, end.log_p, state.log_p),
            np.where(accept[:, None], end.grad_log_p, state.grad_log_p),
        )
        info = {"divergences": end.divergent, "step_size": self.step_size}  # ε before this transition adapts it
        self._adapt(acceptance)
        return Transition(new_state, acceptance, info=info)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"divergences": MetricSpec("diagnostic", "lower", "divergent HMC transitions"),
                "step_size": MetricSpec("diagnostic", None, "HMC step size ε")}

    def _adapt(self, acceptance: Array) -> None:
        """Dual averaging of one ε on the chains' mean acceptance during the first ``adapt_steps``
        transitions (then ε = ε̄); after them, with ``adapt_rate`` > 0, each chain's own ε_c follows
        its acceptance α_c from ADAPTATION_DELAY transitions before: log ε_c += adapt_rate · (α_c - δ)."""
        adaptation = self.adaptation
        if adaptation is not None and adaptation.count < self.adapt_steps:
            self.step_size = adaptation.update(mean_acceptance(acceptance))
            if adaptation.count == self.adapt_steps:
                self.step_size = adaptation.final_step_size
        elif self.adapt_rate:
            self.pending_acceptance.append(acceptance)
            if len(self.pending_acceptance) > ADAPTATION_DELAY:
                earlier = self.pending_acceptance.pop(0)
                self.step_size = self.step_size * np.exp(self.adapt_rate * (earlier - self.target_accept))


@hookimpl
def register_kernels(register):
    register("hmc", HMC, jax="mcsa_bench.accel.kernels:HMC")
