"""Estimator (scheme) checks: the estimate contract, and unbiasedness at stationarity.

With chains started from π the MCSA gradient is an unbiased estimate of ∇_λ KL(π‖q) (NeurIPS
paper Prop. 1), whatever the kernel, as long as it is π-invariant. The check averages the
gradients of independent replicates, each from fresh chains drawn exactly from a 5-D Gaussian π,
under a poor q (narrow, off-centre: large importance weights), and compares the mean with the
closed-form gradient by z-scores. Schemes with ``unbiased_at_stationarity = False`` are "not
applicable".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcsa_bench.api import Array, ChainState, Estimate, Estimator
from mcsa_bench.testing.numerics import Z_LIMIT, worst, z_scores
from mcsa_bench.testing.results import Measurement, NotApplicable
from mcsa_bench.testing.targets import GaussianTarget, gaussian_target, poor_proposal

MakeEstimator = Callable[[], Estimator]  # built with budget N_SAMPLES (or the scheme's minimum)
N_SAMPLES = 4
REPLICATES = 4000


def stationary_state(estimator: Estimator, target: GaussianTarget, rng: np.random.Generator) -> ChainState:
    """The scheme's chains drawn exactly from π."""
    z = target.sample(rng, estimator.num_chains)
    kernel = getattr(estimator, "kernel", None)
    return kernel.init(target, z) if kernel is not None else ChainState(z, target.log_joint(z))


def replicate_gradients(estimator: Estimator, target: GaussianTarget, q, replicates: int, seed: int,
                        start: str = "pi") -> Array:
    """Gradients of independent copies of the scheme's chains, each started from π (or q)."""
    rng = np.random.default_rng(seed)
    grads = np.empty((replicates, q.params.size))
    for r in range(replicates):
        if start == "pi":
            state = stationary_state(estimator, target, rng)
        else:
            state = estimator.kernel.init(target, q.sample(rng, estimator.num_chains))
        grads[r] = estimator.estimate(rng, state, target, q).grad
    return grads


def unbiasedness_measurement(grads: Array, expected: Array) -> Measurement:
    z = z_scores(grads, expected)
    i = worst(z)
    return Measurement(float(abs(z[i])), Z_LIMIT,
                       f"mean gradient over {len(grads)} replicates started at π: grad[{i}] "
                       f"{grads[:, i].mean():.4g} vs exact {expected[i]:.4g}, z = {z[i]:.3g}", "largest |z|")


def check_estimate_contract(make_estimator: MakeEstimator) -> Measurement:
    estimator = make_estimator()
    target = gaussian_target(5)
    q = poor_proposal(target)
    rng = np.random.default_rng(0)
    problems = []
    state = estimator.init(rng, target, q)
    if state.z.shape != (estimator.num_chains, target.dim):
        problems.append(f"init gives chains of shape {state.z.shape}, expected ({estimator.num_chains}, {target.dim})")
    for _ in range(3):
        estimate = estimator.estimate(rng, state, target, q)
        if not isinstance(estimate, Estimate):
            problems.append(f"estimate returned a {type(estimate).__name__}, not an Estimate")
            break
        grad = np.asarray(estimate.grad)
        if grad.shape != q.params.shape or not np.all(np.isfinite(grad)):
            problems.append(f"the gradient has shape {grad.shape} (expected {q.params.shape}) or is not finite")
        if estimate.acceptance_rate is not None and not 0.0 <= estimate.acceptance_rate <= 1.0:
            problems.append(f"acceptance_rate {estimate.acceptance_rate} is outside [0, 1] (None: no transition)")
        bad = {k: v for k, v in estimate.metrics.items() if not np.isfinite(v)}
        if bad:
            problems.append(f"non-finite metrics {bad}")
        if estimate.state.z.shape != state.z.shape:
            problems.append(f"the chains changed shape from {state.z.shape} to {estimate.state.z.shape}")
        state = estimate.state
    return Measurement.problems(problems, "3 estimates with finite (P,) gradients")


def check_unbiased_at_stationarity(make_estimator: MakeEstimator) -> Measurement:
    estimator = make_estimator()
    if not getattr(estimator, "unbiased_at_stationarity", True):
        raise NotApplicable("the scheme does not claim unbiasedness at stationarity (unbiased_at_stationarity = False)")
    target = gaussian_target(5)
    q = poor_proposal(target)
    grads = replicate_gradients(estimator, target, q, REPLICATES, seed=1)
    return unbiasedness_measurement(grads, target.exact_inclusive_gradient(q))


CHECKS = {
    "estimate_contract": check_estimate_contract,
    "unbiased_at_stationarity": check_unbiased_at_stationarity,
}
