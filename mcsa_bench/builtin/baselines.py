"""The baselines the papers compare the MCSA schemes with (docs/methods.md §3).

| baseline | kernel | per iteration (budget N)                              | gradient                          |
|----------|--------|-------------------------------------------------------|-----------------------------------|
| snis     | none   | N fresh draws of q, self-normalized weights w̄         | -Σ_n w̄_n s(λ; z_n)  (≈ ∇ KL(π‖q))  |
| rws      | hmc    | SNIS, and every ``every``-th iteration an HMC wake    | SNIS / -s(λ; z_t) on wake steps   |
| elbo     | none   | N reparameterized draws z = T(ε; λ)                   | STL estimate of ∇ KL(q‖π)         |

``snis`` and ``rws`` descend on the inclusive KL(π‖q) like the MCSA schemes; ``elbo`` descends on
the exclusive KL(q‖π). None of them is an unbiased estimate of ∇ KL(π‖q) from chains at
stationarity (``unbiased_at_stationarity = False``). The kernel-free baselines keep no chains and
report no acceptance rate (nor does ``rws`` on its SNIS iterations, nor its kernel's info);
``snis`` reports ``snis_ess``, the effective sample size 1/Σ_n w̄_n² of its weights (a count between 1 and N).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mcsa_bench.api import (
    Approximation,
    Array,
    ChainState,
    ConfigurationError,
    Estimate,
    Estimator,
    Kernel,
    MetricSpec,
    Model,
    VariationalFamily,
)
from mcsa_bench.builtin.estimators import negative_mean_score, transition_estimate
from mcsa_bench.builtin.kernels import effective_sample_size
from mcsa_bench.hookspecs import hookimpl


def snis_gradient(rng: np.random.Generator, model: Model, q: Approximation, n: int) -> tuple[Array, float]:
    """(-Σ_n w̄_n s(λ; z_n) with z_n ~ q and w̄ ∝ p(x, z)/q(z), the ESS of w̄): one batched log p call."""
    z, log_q = q.sample_with_log_prob(rng, n)
    log_w = model.log_joint(z) - log_q
    weights = np.exp(log_w - log_w.max())
    weights /= weights.sum()
    return -(weights @ q.score(z)), float(effective_sample_size(weights))


class SNIS(Estimator):
    """Adaptive importance sampling with self-normalized weights (ICLR draft §2.1): N fresh draws
    z_n ~ q, w̄_n ∝ p(x, z_n)/q(z_n), gradient -Σ_n w̄_n s(λ; z_n). Consistent, biased for finite N.
    Uses no kernel.
    """

    default_kernel = None
    uses_kernel = False
    unbiased_at_stationarity = False
    min_samples = 2

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        grad, ess = snis_gradient(rng, model, q, self.n_samples)
        return Estimate(grad, state, None, {"snis_ess": ess})

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"snis_ess": MetricSpec("diagnostic", "higher", "effective sample size of the SNIS weights", "draws")}


class RWS(Estimator):
    """Reweighted wake-sleep as the ICLR draft reinterprets it (§5, "Reinterpreting RWS"): cheap
    SNIS "sleep" updates, and instead, every ``every``-th iteration (the first included), an
    expensive "wake" update: one transition of a persistent chain by a gradient-based kernel (HMC)
    and the gradient -s(λ; z_t), as single-HMC. Only wake iterations report an acceptance rate.
    """

    default_kernel = "hmc"
    unbiased_at_stationarity = False
    min_samples = 2

    def __init__(self, kernel: Kernel, n_samples: int, every: int = 5):
        super().__init__(kernel, n_samples)
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise ConfigurationError(f"every (iterations between wake updates) must be an integer >= 1, got {every}")
        self.every = int(every)
        self.iteration = 0  # iterations since init: plain state, stored with the estimator in a checkpoint

    @classmethod
    def kernel_incompatibility(cls, kernel: Kernel | type) -> str | None:
        if not getattr(kernel, "needs_gradient", False):
            return "needs a gradient-based kernel for its wake update (such as hmc)"
        return None

    def init(self, rng: np.random.Generator, model: Model, q: Approximation) -> ChainState:
        """The wake chain, drawn from the initial q; restarts the count of iterations."""
        self.iteration = 0
        return super().init(rng, model, q)

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        wake = self.iteration % self.every == 0
        self.iteration += 1
        if wake:
            transition = self.kernel.step(rng, state, model, q)
            return transition_estimate(negative_mean_score(q, transition.state.z), transition)
        grad, _ = snis_gradient(rng, model, q, self.n_samples)
        return Estimate(grad, state, None)

    def estimate_replicas(self, rng: np.random.Generator, states: Sequence[ChainState], model: Model,
                          q: Approximation) -> list[Estimate]:
        """Every copy makes the update the run's next iteration makes: all wake or all sleep (the
        copies do not count as iterations)."""
        iteration, estimates = self.iteration, []
        for state in states:
            self.iteration = iteration
            estimates.append(self.estimate(rng, state, model, q))
        self.iteration = iteration
        return estimates


class ELBO(Estimator):
    """ADVI (Kucukelbir et al. 2017): descends on the exclusive KL(q‖π) with the path-derivative
    ("sticking the landing", Roeder et al. 2017) estimator from N reparameterized draws,

        g = (1/N) Σ_n (∂T(ε_n; λ)/∂λ)ᵀ (∇_z log q(z_n; λ) - ∇_z log p(x, z_n)),  z_n = T(ε_n; λ),

    where ∇_z log q is taken with λ held fixed: the score term of the total derivative of
    log q(T(ε; λ); λ), which has mean zero, is dropped. Needs a reparameterizable family and the
    model's gradient; uses no kernel.
    """

    default_kernel = None
    uses_kernel = False
    unbiased_at_stationarity = False  # it estimates the gradient of another objective, KL(q‖π)

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        if not model.has_gradient:
            return "needs the gradient of the log joint (Model.log_joint_and_grad)"
        if not family.reparameterizable:
            return ("needs a reparameterizable family (base_noise, reparameterize, reparameterize_vjp, grad_log_prob; "
                    "meanfield_student_t only with learn_df=false)")
        return None

    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        family, params = q.family, q.prepared  # σ(ψ) and the like, computed once per λ
        eps = family.base_noise(rng, self.n_samples)
        z = family.reparameterize(params, eps)
        _, grad_log_p = model.log_joint_and_grad(z)
        cotangent = family.grad_log_prob(params, z) - grad_log_p
        return Estimate(family.reparameterize_vjp(params, eps, cotangent).mean(axis=0), state, None)


@hookimpl
def register_estimators(register):
    register("snis", SNIS, jax="mcsa_bench.accel.schemes:SNIS")
    register("rws", RWS, jax="mcsa_bench.accel.schemes:RWS")
    register("elbo", ELBO, jax="mcsa_bench.accel.schemes:ELBO")
