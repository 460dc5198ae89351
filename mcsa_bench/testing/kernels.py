"""Kernel checks: the transition contract, acceptance probabilities, and π-invariance.

π-invariance is checked exactly: chains started from exact draws of a Gaussian π must still be
π-distributed after a few transitions, whatever the (fixed, deliberately wrong) proposal q. The
chains are independent, so the mean and variance of every coordinate and the mean Mahalanobis
distance E[(z-m)ᵀΣ⁻¹(z-m)] = D have exact standard errors; every z-score must stay below
:data:`~mcsa_bench.testing.numerics.Z_LIMIT`. Each way a scheme drives a kernel is checked: one
transition, one transition with several proposals (kernels with ``uses_proposal_budget``), and
``steps`` (sequential transitions, as JSA uses them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcsa_bench.api import Array, ChainState, Kernel, Steps, Transition
from mcsa_bench.testing.numerics import Z_LIMIT
from mcsa_bench.testing.results import Measurement, declaration_problems
from mcsa_bench.testing.targets import GaussianTarget, gaussian_target, offset_proposal

INVARIANCE_CHAINS = 20_000
INVARIANCE_TRANSITIONS = 3
SEQUENTIAL_STEPS = 5
CACHE_RTOL = 1e-9  # cached log p (and its gradient) against a fresh evaluation

MakeKernel = Callable[[], Kernel]
Advance = Callable[[Kernel, np.random.Generator, ChainState, GaussianTarget, object], ChainState]


def usage_modes(kernel: Kernel) -> dict[str, Advance]:
    """The ways schemes drive a kernel, each advancing every chain by one 'unit'."""
    modes: dict[str, Advance] = {"step": lambda k, rng, s, t, q: k.step(rng, s, t, q).state}
    if kernel.uses_proposal_budget:
        modes["step with 4 proposals"] = lambda k, rng, s, t, q: k.step(rng, s, t, q, 4).state
    modes[f"steps({SEQUENTIAL_STEPS})"] = lambda k, rng, s, t, q: k.steps(rng, s, t, q, SEQUENTIAL_STEPS)[1]
    return modes


def invariance_z_scores(target: GaussianTarget, z: Array) -> dict[str, tuple[float, float, float]]:
    """{statistic: (z-score, measured, exact)} for independent draws z (C, D) that should be π."""
    n = len(z)
    sd = target.std
    scores = {}
    for d in range(target.dim):
        mean, var = z[:, d].mean(), z[:, d].var()
        scores[f"mean of z[{d}]"] = ((mean - target.mean[d]) / (sd[d] / np.sqrt(n)), mean, target.mean[d])
        scores[f"variance of z[{d}]"] = ((var - sd[d] ** 2) / (np.sqrt(2.0 / n) * sd[d] ** 2), var, sd[d] ** 2)
    r = z - target.mean
    mahalanobis = np.einsum("bi,ij,bj->b", r, target.precision, r).mean()  # χ²_D: mean D, variance 2D
    scores["mean Mahalanobis distance"] = ((mahalanobis - target.dim) / np.sqrt(2.0 * target.dim / n),
                                           mahalanobis, float(target.dim))
    return scores


def check_pi_invariance(make_kernel: MakeKernel, dim: int, *, chains: int = INVARIANCE_CHAINS,
                        transitions: int = INVARIANCE_TRANSITIONS, seed: int = 0) -> Measurement:
    target = gaussian_target(dim)
    proposal = offset_proposal(target)
    worst_z, where, moved = 0.0, "no statistic", []
    for mode, advance in usage_modes(make_kernel()).items():
        kernel = make_kernel()
        rng = np.random.default_rng(seed)
        state = start = kernel.init(target, target.sample(rng, chains))
        for _ in range(transitions):
            state = advance(kernel, rng, state, target, proposal)
        moved.append(f"{mode} {np.mean(np.any(state.z != start.z, axis=1)):.0%}")
        for statistic, (z, measured, exact) in invariance_z_scores(target, state.z).items():
            if not abs(z) <= worst_z:  # NaN counts as worst
                worst_z, where = abs(z), f"{mode}: {statistic} {measured:.4g} vs exact {exact:.4g}, z = {z:.3g}"
    return Measurement(worst_z, Z_LIMIT, f"{transitions} transitions of {chains} chains started at π "
                                         f"({dim}-D Gaussian), {where}; chains moved: {', '.join(moved)}",
                       "largest |z|")


def _relative_gap(cached: Array, fresh: Array) -> float:
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(cached - fresh) / np.maximum(1.0, np.abs(fresh)), initial=0.0))


def _state_problems(label: str, state: object, target: GaussianTarget, kernel: Kernel, chains: int) -> list[str]:
    if not isinstance(state, ChainState):
        return [f"{label} is a {type(state).__name__}, not a ChainState"]
    if state.z.shape != (chains, target.dim) or np.shape(state.log_p) != (chains,):
        return [f"{label} has z {state.z.shape} and log_p {np.shape(state.log_p)}, "
                f"expected ({chains}, {target.dim}) and ({chains},)"]
    fresh, grad = target.log_joint_and_grad(state.z)
    problems = []
    gap = _relative_gap(state.log_p, fresh)
    if not gap <= CACHE_RTOL:
        problems.append(f"{label}: cached log p differs from log_joint by {gap:.3g} (relative; tolerance {CACHE_RTOL})")
    if kernel.needs_gradient:
        if state.grad_log_p is None:
            problems.append(f"{label}: needs_gradient but no cached grad_log_p")
        else:
            gap = _relative_gap(state.grad_log_p, grad)
            if not gap <= CACHE_RTOL:
                problems.append(f"{label}: cached grad_log_p differs from the gradient by {gap:.3g} (relative)")
    return problems


def _weight_problems(transition: Transition, state: ChainState, n_proposals: int) -> list[str]:
    chains, dim = state.z.shape
    candidates, weights = transition.candidates, transition.weights
    if candidates is None or weights is None:
        return ["exposes_weights but the transition has no candidates or weights"]
    if candidates.shape != (chains, n_proposals + 1, dim) or weights.shape != (chains, n_proposals + 1):
        return [f"candidates {candidates.shape} and weights {weights.shape}, expected "
                f"({chains}, {n_proposals + 1}, {dim}) and ({chains}, {n_proposals + 1})"]
    problems = []
    if not (np.all(weights >= 0) and np.allclose(weights.sum(axis=1), 1.0, rtol=0, atol=1e-12)):
        problems.append(f"weights are not normalized: row sums {np.round(weights.sum(axis=1), 6)}")
    if not np.array_equal(candidates[:, 0], state.z):
        problems.append("candidate slot 0 is not the current state")
    if not all(any(np.array_equal(z, c) for c in cs) for z, cs in zip(transition.state.z, candidates)):
        problems.append("the new state is not one of the candidates")
    return problems


def check_transition_contract(make_kernel: MakeKernel, *, chains: int = 64, seed: int = 0) -> Measurement:
    kernel = make_kernel()
    target = gaussian_target(5)
    proposal = offset_proposal(target)
    rng = np.random.default_rng(seed)
    state = kernel.init(target, proposal.sample(rng, chains))  # from q: most proposals are accepted
    problems = _state_problems("init", state, target, kernel, chains)
    n_proposals = 4 if kernel.uses_proposal_budget else 1
    transition = kernel.step(rng, state, target, proposal, n_proposals)
    if not isinstance(transition, Transition):
        problems.append(f"step returned a {type(transition).__name__}, not a Transition")
    else:
        problems += _state_problems("step", transition.state, target, kernel, chains)
        if np.shape(transition.acceptance) != (chains,):
            problems.append(f"step acceptance has shape {np.shape(transition.acceptance)}, expected ({chains},)")
        if kernel.exposes_weights:
            problems += _weight_problems(transition, state, n_proposals)
        problems += _info_problems(kernel, transition, chains)
    trajectory, final, acceptance = Steps(*kernel.steps(rng, state, target, proposal, 3))[:3]
    if trajectory.shape != (3, chains, target.dim) or np.shape(acceptance) != (3, chains):
        problems.append(f"steps(3) returned a trajectory {trajectory.shape} and acceptance {np.shape(acceptance)}, "
                        f"expected (3, {chains}, {target.dim}) and (3, {chains})")
    else:
        problems += _state_problems("steps", final, target, kernel, chains)
        if not np.array_equal(final.z, trajectory[-1]):
            problems.append("steps: the final state is not the last state of the trajectory")
    return Measurement.problems(problems, "shapes, cached log p, weights, info and steps agree")


def _info_problems(kernel: Kernel, transition: Transition, chains: int) -> list[str]:
    """The kernel's own diagnostics (``Transition.info``): finite numbers or arrays over the chains,
    each declared as a MetricSpec when the kernel declares any (``Kernel.metric_specs``)."""
    problems = []
    for name, value in transition.info.items():
        if np.shape(value) not in ((), (chains,)) or not np.all(np.isfinite(np.asarray(value, dtype=float))):
            problems.append(f"info[{name!r}] must be a finite number or ({chains},) array, got shape {np.shape(value)}")
    return problems + declaration_problems(kernel.metric_specs(), transition.info, "info reports")


def check_acceptance_in_unit_interval(make_kernel: MakeKernel, *, chains: int = 200, seed: int = 0) -> Measurement:
    kernel = make_kernel()
    target = gaussian_target(5)
    proposal = offset_proposal(target)
    rng = np.random.default_rng(seed)
    starts = {"π": target.sample(rng, chains), "q": proposal.sample(rng, chains),
              "the tails (8 sd out)": target.mean + 8.0 * target.std * rng.choice([-1.0, 1.0], (chains, target.dim))}
    values = []
    for z in starts.values():
        state = kernel.init(target, z)
        for _ in range(3):
            transition = kernel.step(rng, state, target, proposal)
            values.append(np.ravel(transition.acceptance))
            state = transition.state
        values.append(np.ravel(kernel.steps(rng, state, target, proposal, 3)[2]))
    values = np.concatenate(values).astype(float)
    outside = np.maximum(np.maximum(-values, values - 1.0), 0.0)
    distance = float(np.inf if np.isnan(values).any() else outside.max())
    detail = (f"acceptance ranged over [{np.nanmin(values):.3g}, {np.nanmax(values):.3g}], "
              f"{int(np.isnan(values).sum())} NaN, from π, q and the tails")
    return Measurement(distance, 0.0, detail, "distance outside [0, 1]")


CHECKS = {
    "transition_contract": check_transition_contract,
    "acceptance_in_unit_interval": check_acceptance_in_unit_interval,
    "pi_invariance_1d": lambda make_kernel: check_pi_invariance(make_kernel, 1),
    "pi_invariance_5d": lambda make_kernel: check_pi_invariance(make_kernel, 5),
}
