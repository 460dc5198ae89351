"""The extras' kernels: conformance (π-invariance on 1-D and correlated 5-D Gaussians through
step and steps, acceptance in [0, 1], cached log p and gradient), Barker's acceptance formula,
and parameter errors."""

import numpy as np
import pytest

from mcsa_bench.api import ChainState, ConfigurationError
from mcsa_bench.testing import assert_conforms, gaussian_target, offset_proposal
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


def test_rwmh_jax_twin_is_registered_and_pi_invariant():
    pytest.importorskip("jax")
    from mcsa_bench.accel import twins
    from mcsa_bench.testing.twins import check_twin

    assert "rwmh" in twins.covered("kernel")
    [result] = check_twin("kernel", "rwmh")
    assert not result.failed, result.message
