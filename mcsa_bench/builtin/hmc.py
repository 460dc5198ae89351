"""Hamiltonian Monte Carlo (docs/methods.md §2; Neal 2011), batched over chains.

One transition: draw momenta p ~ N(0, M), run ``n_leapfrog`` leapfrog steps of size ε on
H(z, p) = -log p(x, z) + ½ pᵀM⁻¹p, accept the end point with probability min(1, exp(-ΔH)).
Each leapfrog step is one batched ``log_joint_and_grad`` call over all chains; log p and its
gradient at the chains' states are cached in ``ChainState``, so a transition costs exactly L
calls. Non-finite energies (a diverging trajectory) count as rejections.

The mass matrix M is diagonal: the identity, or ``mass="diagonal"``, M = diag(1/σ²) with σ the
marginal scales of q at the current λ, so that M⁻¹ is q's covariance (``VariationalFamily.
location_scale``). M is fixed within a transition, so for a fixed q the kernel is π-invariant.

Optional step-size adaptation by dual averaging (Hoffman & Gelman 2014, Alg. 5) during the first
``adapt_steps`` transitions, then frozen at the averaged step size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from mcsa_bench.api import (
    Approximation,
    Array,
    ChainState,
    ConfigurationError,
    Kernel,
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


def leapfrog(
    target: Target, z: Array, grad_log_p: Array, momentum: Array, step_size: float, n_steps: int, inverse_mass: Array
) -> tuple[Array, Array, Array, Array]:
    """``n_steps`` leapfrog steps of size ``step_size`` from (z, momentum) for every chain.

    ``grad_log_p`` is ∇ log p at ``z``; ``inverse_mass`` (D,) is the diagonal of M⁻¹. Returns
    (z, momentum, log p, ∇ log p) at the end point, after ``n_steps`` batched gradient calls.
    """
    drift = step_size * inverse_mass
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # a diverging trajectory is rejected
        momentum = momentum + 0.5 * step_size * grad_log_p
        for step in range(n_steps):
            z = z + drift * momentum
            log_p, grad_log_p = target.log_joint_and_grad(z)
            momentum = momentum + (step_size if step < n_steps - 1 else 0.5 * step_size) * grad_log_p
    return z, momentum, log_p, grad_log_p


def kinetic_energy(momentum: Array, inverse_mass: Array) -> Array:
    """½ pᵀM⁻¹p per chain, shape (C,)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * np.einsum("cd,cd->c", momentum * inverse_mass, momentum)


@dataclass
class DualAveraging:
    """Step-size adaptation of Hoffman & Gelman (2014), Alg. 5, towards a target acceptance δ.

    After m updates with acceptance statistics α_1..α_m:
    H̄_m = (1 - 1/(m+t0)) H̄_{m-1} + (δ - α_m)/(m+t0),  log ε_m = μ - √m/γ H̄_m,
    log ε̄_m = m^-κ log ε_m + (1 - m^-κ) log ε̄_{m-1},  with μ = log(10 ε_0).
    Plain attributes: the state pickles with the kernel.
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
    """Hamiltonian Monte Carlo: ``n_leapfrog`` leapfrog steps of size ``step_size``, Metropolis
    correction; ``mass`` is "identity" or "diagonal" (M⁻¹ = q's marginal variances).

    With ``adapt_steps`` > 0 the step size is tuned by dual averaging towards ``target_accept``
    during the first ``adapt_steps`` transitions (counted from :meth:`init`), then frozen.
    Defaults are the papers' Gaussian setting (ε = 0.4, L = 16; radon: ε = 0.02, L = 64).
    """

    needs_gradient = True

    def __init__(self, step_size: float = 0.4, n_leapfrog: int = 16, mass: MassMatrix = "identity",
                 adapt_steps: int = 0, target_accept: float = 0.8):
        if not step_size > 0:
            raise ConfigurationError(f"step_size must be positive, got {step_size}")
        if isinstance(n_leapfrog, bool) or int(n_leapfrog) != n_leapfrog or n_leapfrog < 1:
            raise ConfigurationError(f"n_leapfrog must be an integer >= 1, got {n_leapfrog}")
        if mass not in MASS_MATRICES:
            raise ConfigurationError(f"unknown mass {mass!r}; allowed: {', '.join(MASS_MATRICES)}")
        if isinstance(adapt_steps, bool) or int(adapt_steps) != adapt_steps or adapt_steps < 0:
            raise ConfigurationError(f"adapt_steps must be an integer >= 0, got {adapt_steps}")
        if not 0 < target_accept < 1:
            raise ConfigurationError(f"target_accept must be in (0, 1), got {target_accept}")
        self.initial_step_size = float(step_size)
        self.n_leapfrog = int(n_leapfrog)
        self.mass = mass
        self.adapt_steps = int(adapt_steps)
        self.target_accept = float(target_accept)
        self._reset_adaptation()

    def _reset_adaptation(self) -> None:
        self.step_size = self.initial_step_size
        self.adaptation = DualAveraging(self.initial_step_size, self.target_accept) if self.adapt_steps else None

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        if self.mass == "diagonal" and family.location_scale(family.init_params()) is None:
            return "with mass=diagonal needs a family with marginal scales (VariationalFamily.location_scale)"
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
        location_scale = proposal.family.location_scale(proposal.prepared)
        if location_scale is None:
            raise ConfigurationError(f"hmc with mass=diagonal: family {type(proposal.family).__name__} has no scales")
        return location_scale[1] ** 2

    def step(self, rng: np.random.Generator, state: ChainState, target: Target, proposal: Proposal,
             n_proposals: int = 1) -> Transition:
        if n_proposals != 1:
            raise ConfigurationError(
                f"the hmc kernel makes one trajectory per transition, got n_proposals={n_proposals}")
        if state.grad_log_p is None:  # a state from a kernel that caches no gradient
            state = ChainState(state.z, *target.log_joint_and_grad(state.z))
        inverse_mass = self._inverse_mass(proposal, state.z.shape[1])
        momentum = rng.standard_normal(state.z.shape) / np.sqrt(inverse_mass)
        z, momentum_end, log_p, grad = leapfrog(
            target, state.z, state.grad_log_p, momentum, self.step_size, self.n_leapfrog, inverse_mass)
        with np.errstate(invalid="ignore"):  # -inf - -inf or inf - inf: NaN, a rejection
            log_ratio = (log_p - kinetic_energy(momentum_end, inverse_mass)) - (
                state.log_p - kinetic_energy(momentum, inverse_mass))
        acceptance = acceptance_probability(log_ratio)
        accept = np.log(rng.random(state.num_chains)) < log_ratio  # NaN: False
        new_state = ChainState(
            np.where(accept[:, None], z, state.z),
            np.where(accept, log_p, state.log_p),
            np.where(accept[:, None], grad, state.grad_log_p),
        )
        self._adapt(mean_acceptance(acceptance))
        return Transition(new_state, acceptance)

    def _adapt(self, acceptance: float) -> None:
        """One dual-averaging update while adapting; freezes ε at ε̄ after ``adapt_steps``."""
        if self.adaptation is None or self.adaptation.count >= self.adapt_steps:
            return
        self.step_size = self.adaptation.update(acceptance)
        if self.adaptation.count == self.adapt_steps:
            self.step_size = self.adaptation.final_step_size


@hookimpl
def register_kernels(register):
    register("hmc", HMC)
