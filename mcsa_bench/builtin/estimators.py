"""The four MCSA schemes with budget N (docs/methods.md §3, NeurIPS paper Table 2 and Alg. 1, 4, 5).

Every scheme returns g = -(weighted) mean of scores s(λ; z) = ∇_λ log q(z; λ) at the λ the
kernel used (Prop. 1); the optimizer descends on g. MSC with the HMC kernel is the papers'
"single-HMC". Every scheme passes its kernel's own diagnostics (``Transition.info``: CIS's
``cis_ess``, HMC's ``divergences`` and ``step_size``) on as metrics, each entry's mean over the
iteration's chains and transitions (``mcsa_bench.api.info_means``).

| scheme  | chains | per iteration                               | gradient                   |
|---------|--------|---------------------------------------------|----------------------------|
| msc     | 1      | one transition (CIS: N-1 fresh proposals)   | -s(z_t)                    |
| msc_rb  | 1      | one CIS transition with N-1 fresh proposals | -Σ_i w̄_i s(z_i), N slots   |
| jsa     | 1      | N sequential transitions                    | -(1/N) Σ_n s(z_t^(n))      |
| pmcsa   | N      | one transition of each chain                | -(1/N) Σ_n s(z_t^(n))      |
"""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation, ChainState, Estimate, Estimator, Kernel, Model, Steps, Transition, info_means
from mcsa_bench.builtin.kernels import mean_acceptance
from mcsa_bench.hookspecs import hookimpl


def negative_mean_score(q: Approximation, z: np.ndarray) -> np.ndarray:
    """-(1/B) Σ_b s(λ; z_b) for z of shape (B, D)."""
    grad = np.add.reduce(q.score(z), axis=0)  # what ndarray.mean sums, without its Python layer
    grad /= -len(z)  # -(Σ/B) exactly: rounding is symmetric in sign
    return grad


def transition_estimate(grad: np.ndarray, transition: Transition) -> Estimate:
    """The estimate of a scheme that made one transition: its chains, acceptance and kernel info."""
    return Estimate(grad, transition.state, mean_acceptance(transition.acceptance), info_means(transition.info))


class MSC(Estimator):
    """Markovian score climbing (Naesseth et al. 2020; Alg. 4): one chain, one transition,
    gradient -s(λ; z_t). With CIS the transition uses N-1 fresh proposals; with a single-proposal
    kernel (IMH, HMC) the budget is unused and this is the "single-state" estimator.
    """

    default_kernel = "cis"
    min_samples = 2

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        n_proposals = self.n_samples - 1 if self.kernel.uses_proposal_budget else 1
        transition = self.kernel.step(rng, state, model, q, n_proposals)
        return transition_estimate(negative_mean_score(q, transition.state.z), transition)


class MSCRB(Estimator):
    """MSC with Rao-Blackwellization: one CIS transition with N-1 fresh proposals and the
    gradient -Σ_i w̄_i s(λ; z_i) over all N candidate slots (slot 0: the previous state).
    """

    default_kernel = "cis"
    min_samples = 2

    @classmethod
    def kernel_incompatibility(cls, kernel: Kernel | type) -> str | None:
        if not getattr(kernel, "exposes_weights", False):
            return "needs a kernel that exposes normalized weights over its candidates (such as cis)"
        return None

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        transition = self.kernel.step(rng, state, model, q, self.n_samples - 1)
        candidates, weights = transition.candidates[0], transition.weights[0]
        return transition_estimate(-(weights @ q.score(candidates)), transition)


class JSA(Estimator):
    """Joint stochastic approximation (Ou & Song 2020; Alg. 5): one chain, N sequential
    transitions, gradient -(1/N) Σ_n s(λ; z_t^(n)) over the intermediate states.
    """

    default_kernel = "imh"

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        steps = Steps(*self.kernel.steps(rng, state, model, q, self.n_samples))
        grad = negative_mean_score(q, steps.trajectory.reshape(-1, steps.trajectory.shape[-1]))
        return Estimate(grad, steps.state, mean_acceptance(steps.acceptance), info_means(steps.info))


class PMCSA(Estimator):
    """Parallel MCSA (Alg. 1): N independent chains, one transition each, gradient
    -(1/N) Σ_n s(λ; z_t^(n)). Its variance falls like 1/N whatever w* is (Theorem 4).
    """

    default_kernel = "imh"

    @property
    def num_chains(self) -> int:
        return self.n_samples

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        transition = self.kernel.step(rng, state, model, q)
        return transition_estimate(negative_mean_score(q, transition.state.z), transition)


@hookimpl
def register_estimators(register):
    register("msc", MSC, jax="mcsa_bench.accel.schemes:MSC")
    register("msc_rb", MSCRB, jax="mcsa_bench.accel.schemes:MSCRB")
    register("jsa", JSA, jax="mcsa_bench.accel.schemes:JSA")
    register("pmcsa", PMCSA, jax="mcsa_bench.accel.schemes:PMCSA")
