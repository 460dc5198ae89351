"""The four MCSA schemes with budget N (docs/methods.md §3, NeurIPS paper Table 2 and Alg. 1, 4, 5).

Every scheme returns g = -(weighted) mean of scores s(λ; z) = ∇_λ log q(z; λ) at the λ the
kernel used (Prop. 1); the optimizer descends on g. MSC with the HMC kernel is the papers'
"single-HMC". Schemes whose kernel exposes candidate weights (CIS) report ``cis_ess``, the
effective sample size 1/Σ_i w̄_i² of the normalized weights as a count of slots (1 to the number
of slots), averaged over chains; with a kernel that can diverge (HMC) they report ``divergences``,
the fraction of the iteration's transitions whose trajectory diverged (and was rejected).

| scheme  | chains | per iteration                               | gradient                   |
|---------|--------|---------------------------------------------|----------------------------|
| msc     | 1      | one transition (CIS: N-1 fresh proposals)   | -s(z_t)                    |
| msc_rb  | 1      | one CIS transition with N-1 fresh proposals | -Σ_i w̄_i s(z_i), N slots   |
| jsa     | 1      | N sequential transitions                    | -(1/N) Σ_n s(z_t^(n))      |
| pmcsa   | N      | one transition of each chain                | -(1/N) Σ_n s(z_t^(n))      |
"""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation, Array, ChainState, Estimate, Estimator, Kernel, Model, Steps, Transition
from mcsa_bench.builtin.kernels import mean_acceptance
from mcsa_bench.hookspecs import hookimpl


def negative_mean_score(q: Approximation, z: np.ndarray) -> np.ndarray:
    """-(1/B) Σ_b s(λ; z_b) for z of shape (B, D)."""
    grad = np.add.reduce(q.score(z), axis=0)  # what ndarray.mean sums, without its Python layer
    grad /= -len(z)  # -(Σ/B) exactly: rounding is symmetric in sign
    return grad


def effective_sample_size(weights: np.ndarray) -> np.ndarray:
    """1/Σ_i w̄_i² of normalized weights along the last axis (Kong's ESS, a count of samples)."""
    return 1.0 / np.sum(weights * weights, axis=-1)


def divergence_metrics(divergent: Array | None) -> dict[str, float]:
    """``divergences``, the fraction of transitions that diverged, when the kernel reports them."""
    if divergent is None:
        return {}
    return {"divergences": float(np.count_nonzero(divergent)) / divergent.size}


def transition_metrics(transition: Transition) -> dict[str, float]:
    """``cis_ess`` (mean over chains) when the kernel exposes its candidate weights, ``divergences``
    when it reports them."""
    metrics = divergence_metrics(transition.divergent)
    if transition.weights is not None:
        metrics["cis_ess"] = float(effective_sample_size(transition.weights).mean())
    return metrics


def _estimate(grad: np.ndarray, transition: Transition) -> Estimate:
    return Estimate(grad, transition.state, mean_acceptance(transition.acceptance), transition_metrics(transition))


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
        return _estimate(negative_mean_score(q, transition.state.z), transition)


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
        return _estimate(-(weights @ q.score(candidates)), transition)


class JSA(Estimator):
    """Joint stochastic approximation (Ou & Song 2020; Alg. 5): one chain, N sequential
    transitions, gradient -(1/N) Σ_n s(λ; z_t^(n)) over the intermediate states.
    """

    default_kernel = "imh"

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        steps = Steps(*self.kernel.steps(rng, state, model, q, self.n_samples))
        grad = negative_mean_score(q, steps.trajectory.reshape(-1, steps.trajectory.shape[-1]))
        return Estimate(grad, steps.state, mean_acceptance(steps.acceptance), divergence_metrics(steps.divergent))


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
        return _estimate(negative_mean_score(q, transition.state.z), transition)


@hookimpl
def register_estimators(register):
    register("msc", MSC)
    register("msc_rb", MSCRB)
    register("jsa", JSA)
    register("pmcsa", PMCSA)
