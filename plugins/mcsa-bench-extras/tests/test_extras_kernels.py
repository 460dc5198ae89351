"""The extras' kernels: conformance (π-invariance on 1-D and correlated 5-D Gaussians through
step and steps, acceptance in [0, 1], cached log p and gradient), Barker's acceptance formula,
rwmh's own diagnostic (``jump_distance``, through the transition's info into the run's metrics), and
parameter errors."""

import math

import numpy as np
import pytest
from scipy.special import gammaln

from mcsa_bench import get_registry, run
from mcsa_bench.api import ChainState, ConfigurationError, MetricSpec, Model, declared_metrics
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.testing import Z_LIMIT, assert_conforms, gaussian_target, offset_proposal
from mcsa_bench_extras.kernels import MALA, BarkerIMH, RandomWalkMetropolis


@pytest.mark.parametrize("name,params", [("rwmh", {}), ("mala", {}), ("mala", {"step_size": 0.7}), ("barker_imh", {})])
def test_kernel_conforms(name, params):
    assert_conforms("kernel", name, params)


def test_barker_steps_accept_with_w_new_over_w_new_plus_w_old():
    target = gaussian_target(1)
    q = offset_proposal(target)
    rng = np.random.default_rng(0)
    kernel = BarkerIMH()
    start = kernel.init(target, target.sample(rng, 1))
    trajectory, final, acceptance = kernel.steps(rng, start, target, q, 60)
    log_w = lambda z: target.log_joint(z) - q.log_prob(z)
    before = np.concatenate([start.z[None], trajectory[:-1]])
    moved = [k for k in range(60) if not np.array_equal(trajectory[k], before[k])]
    assert 10 < len(moved) < 60
    for k in moved:
        w_new, w_old = np.exp(log_w(trajectory[k])[0]), np.exp(log_w(before[k])[0])
        assert acceptance[k, 0] == pytest.approx(w_new / (w_new + w_old), rel=1e-10)
    np.testing.assert_allclose(final.log_p, target.log_joint(final.z), rtol=1e-12)


def test_barker_accepts_less_often_than_metropolis():
    # Peskun: w*/(w* + w) <= min(1, w*/w) for every pair, with equality only in the limit.
    ratio = np.exp(np.linspace(-5, 5, 11))
    from mcsa_bench_extras.kernels import _barker_probability, _metropolis_probability

    assert np.all(_barker_probability(np.log(ratio)) < _metropolis_probability(np.log(ratio)))
    assert _barker_probability(np.array([np.nan, -np.inf, np.inf])).tolist() == [0.0, 0.0, 1.0]


def test_mala_computes_a_missing_gradient_and_rejects_non_finite_candidates():
    target = gaussian_target(5)
    rng = np.random.default_rng(1)
    z = target.sample(rng, 4)
    bare = ChainState(z, target.log_joint(z))  # no cached gradient
    transition = MALA(step_size=0.3).step(rng, bare, target, None)
    np.testing.assert_allclose(transition.state.grad_log_p, target.log_joint_and_grad(transition.state.z)[1])
    far = ChainState(np.full((3, 5), 1e200), np.full(3, -np.inf), np.full((3, 5), -np.inf))
    with np.errstate(all="ignore"):
        stuck = MALA().step(rng, far, target, None)
    assert np.all(stuck.acceptance == 0.0) and np.array_equal(stuck.state.z, far.z)


@pytest.mark.parametrize("kernel", [RandomWalkMetropolis, MALA])
def test_bad_step_sizes_and_proposal_counts_are_clear_errors(kernel):
    with pytest.raises(ConfigurationError, match="step_size must be a positive number"):
        kernel(step_size=0.0)
    target = gaussian_target(1)
    state = kernel().init(target, np.zeros((1, 1)))
    with pytest.raises(ConfigurationError, match="one proposal per transition"):
        kernel().step(np.random.default_rng(0), state, target, None, n_proposals=3)


def test_rwmh_reports_how_far_each_chain_jumped_zero_where_it_stayed():
    target = gaussian_target(3)
    rng = np.random.default_rng(3)
    kernel = RandomWalkMetropolis(step_size=1.5)
    state = kernel.init(target, target.sample(rng, 400))
    transition = kernel.step(rng, state, target, None)
    jump = transition.info["jump_distance"]
    np.testing.assert_array_equal(jump, np.linalg.norm(transition.state.z - state.z, axis=1))
    stayed = np.all(transition.state.z == state.z, axis=1)
    assert 0 < stayed.sum() < len(stayed) and np.all(jump[stayed] == 0.0) and np.all(jump[~stayed] > 0.0)


class Flat(Model):
    """log p = 0 on R^D: rwmh accepts every proposal, so each jump is step_size · |ε|, ε ~ N(0, I_D)."""

    def __init__(self, dim: int):
        self.dim = dim

    def log_joint(self, z):
        return np.zeros(len(z))


def test_the_jump_distance_reaches_the_runs_metrics_with_its_declared_spec():
    # Through the engine: the logged window mean over 300 iterations × 8 chains of i.i.d. jumps
    # step·χ_D, against its exact mean step·√2·Γ((D+1)/2)/Γ(D/2) within Z_LIMIT standard errors.
    dim, step, chains, iterations = 3, 0.5, 8, 300
    registry = get_registry()
    estimator = registry.build("estimator", "pmcsa", kernel=RandomWalkMetropolis(step), n_samples=chains)
    result = run(Flat(dim), MeanFieldGaussian(dim), estimator, registry.build("optimizer", "adam"),
                 n_iters=iterations, eval_every=iterations, seed=0)
    chi_mean = math.sqrt(2.0) * math.exp(gammaln((dim + 1) / 2) - gammaln(dim / 2))
    standard_error = step * math.sqrt(dim - chi_mean**2) / math.sqrt(chains * iterations)
    logged = result.history[-1]["jump_distance"]
    assert abs(logged - step * chi_mean) < Z_LIMIT * standard_error, (logged, step * chi_mean)
    assert result.history[-1]["acceptance_rate"] == 1.0
    assert declared_metrics(Flat(dim), estimator, estimator.kernel) == {
        "jump_distance": MetricSpec("diagnostic", "higher", "mean jump distance of the chains")}


def test_rwmh_jax_twin_is_registered_and_pi_invariant():
    pytest.importorskip("jax")
    from mcsa_bench import get_registry
    from mcsa_bench.testing.twins import check_twin

    assert "rwmh" in get_registry().covered("kernel")
    results = check_twin("kernel", "rwmh")
    assert [r.check for r in results] == ["jax twin π-invariance", "jax twin cost"]
    for result in results:
        assert not result.failed, result.message
