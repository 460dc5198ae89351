"""The local-global Ex2MCMC kernel (CIS, then MALA steps; mcsa_bench/builtin/kernels.py): it conforms (π-invariance
in every usage pattern among the checks), a planted unadjusted Langevin step fails that same check, a long run
from q matches π, and bad options are refused. Its JAX twin: tests/accel/test_twins.py and test_cost.py."""

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin import kernels
from mcsa_bench.testing import Z_LIMIT, assert_conforms, gaussian_target
from mcsa_bench.testing import offset_proposal as fixed_proposal
from mcsa_bench.testing.kernels import check_pi_invariance
from tests.builtin.test_kernels import assert_matches_long_run


@pytest.mark.parametrize("params", [{}, {"mala_steps": 0}, {"mala_steps": 1, "step_size": 0.6}])
def test_ex2mcmc_conforms(params):
    assert_conforms("kernel", "ex2mcmc", params)


def test_an_unadjusted_langevin_step_fails_the_invariance_check(monkeypatch):
    """MALA without its accept/reject (every move accepted: ULA) is biased, and the check sees it."""
    monkeypatch.setattr(kernels, "acceptance_probability", lambda log_ratio: np.ones_like(log_ratio))
    measured = check_pi_invariance(lambda: get_registry().build("kernel", "ex2mcmc", mala_steps=3, step_size=0.8), 5)
    assert measured.measured > Z_LIMIT


def test_a_long_run_from_q_matches_pi():
    target = gaussian_target(5)
    kernel = get_registry().build("kernel", "ex2mcmc", mala_steps=2, step_size=0.3)
    proposal = fixed_proposal(target)
    rng = np.random.default_rng(1)
    state = kernel.init(target, proposal.sample(rng, 200))
    trajectory = []
    for t in range(800):
        state = kernel.step(rng, state, target, proposal, 3).state
        if t >= 200:
            trajectory.append(state.z)
    assert_matches_long_run(target, np.stack(trajectory))


def test_it_reports_both_acceptances_and_cis_ess():
    target = gaussian_target(3)
    kernel = get_registry().build("kernel", "ex2mcmc")
    rng = np.random.default_rng(0)
    state = kernel.init(target, target.sample(rng, 50))
    transition = kernel.step(rng, state, target, fixed_proposal(target), 4)
    assert set(transition.info) == {"cis_ess", "mala_acceptance"} == set(kernel.metric_specs())
    assert np.all((transition.info["mala_acceptance"] > 0) & (transition.info["mala_acceptance"] <= 1))
    assert transition.candidates is None and not kernel.exposes_weights  # its state is past CIS's candidates


@pytest.mark.parametrize("params", [{"mala_steps": -1}, {"mala_steps": 1.5}, {"step_size": 0.0},
                                    {"defensive": 1.0}])
def test_bad_options_are_refused(params):
    with pytest.raises(ConfigurationError):
        get_registry().build("kernel", "ex2mcmc", **params)
