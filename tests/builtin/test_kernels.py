"""The built-in kernels beyond the conformance checks (tests/testing/test_conformance.py runs those: chains
started exactly from π stay π-distributed through every usage pattern, on 1-D and correlated 5-D
Gaussian targets, with a negative control).

Here: long runs started from q converge to π (per-chain time averages after burn-in are
independent across chains, so their spread gives the standard error of the long-run mean and
variance), the batched sequential sweeps (IMH: Metropolis-Hastings, CIS: Barker) report each
step's acceptance probability and CIS's moves at Barker's rate, CIS's
weights are the normalized importance weights with the current state in slot 0, and the
independence kernels stay π-invariant with a defensive mixture in their proposal, while the
schemes' gradient still uses q's score (unbiased from π). (HMC: tests/builtin/test_hmc.py.)
"""

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench import get_registry, load_registry
from mcsa_bench.api import Approximation, ConfigurationError
from mcsa_bench.assembly import assemble
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.builtin.kernels import DefensiveMixture
from mcsa_bench.hookspecs import hookimpl
from mcsa_bench.testing import Z_LIMIT, gaussian_target, invariance_z_scores, poor_proposal, replicate_gradients
from mcsa_bench.testing import offset_proposal as fixed_proposal
from tests.support import assert_unbiased


def advance(kernel, mode, rng, state, target, proposal):
    """One 'unit' of each kernel usage pattern; returns the new state."""
    if mode == "step":
        return kernel.step(rng, state, target, proposal).state
    if mode == "step4":
        return kernel.step(rng, state, target, proposal, n_proposals=4).state
    if mode == "steps5":
        return kernel.steps(rng, state, target, proposal, 5)[1]
    raise ValueError(mode)


KERNEL_MODES = [("imh", "step"), ("imh", "steps5"), ("cis", "step"), ("cis", "step4"), ("cis", "steps5")]


def assert_matches_long_run(target, trajectory):
    """trajectory (T, C, D) after burn-in; chains independent, so chain averages give the error."""
    chain_means = trajectory.mean(axis=0)
    chain_second = ((trajectory - target.mean) ** 2).mean(axis=0)
    n = trajectory.shape[1]
    for estimate, truth, name in [
        (chain_means, target.mean, "mean"),
        (chain_second, np.diag(target.cov), "variance"),
    ]:
        error = np.abs(estimate.mean(0) - truth)
        standard_error = estimate.std(0, ddof=1) / np.sqrt(n)
        assert np.all(error < Z_LIMIT * standard_error), f"{name}: error {error} vs s.e. {standard_error}"


@pytest.mark.parametrize("dim", [1, 5])
@pytest.mark.parametrize("kernel_name,mode", KERNEL_MODES)
def test_long_run_mean_and_variance_match_pi(kernel_name, mode, dim):
    target = gaussian_target(dim)
    kernel = get_registry().build("kernel", kernel_name)
    proposal = fixed_proposal(target)
    rng = np.random.default_rng(1)
    state = kernel.init(target, proposal.sample(rng, 200))  # start from q, not π
    trajectory = []
    for t in range(1500):
        state = advance(kernel, mode, rng, state, target, proposal)
        if t >= 300:
            trajectory.append(state.z)
    assert_matches_long_run(target, np.stack(trajectory))


@pytest.mark.parametrize("kernel_name,move_probability", [
    ("imh", lambda r: min(1.0, np.exp(r))),  # Metropolis-Hastings
    ("cis", lambda r: 1.0 / (1.0 + np.exp(-r))),  # CIS with one proposal: Barker, w*/(w* + w)
])
def test_sequential_steps_report_each_steps_acceptance_probability(kernel_name, move_probability):
    # The batched sweep must report the acceptance probability of each sequential step.
    target = gaussian_target(5)
    proposal = fixed_proposal(target)
    rng = np.random.default_rng(2)
    kernel = get_registry().build("kernel", kernel_name)
    state = kernel.init(target, target.sample(rng, 1))
    trajectory, final, acceptance = kernel.steps(rng, state, target, proposal, 50)
    assert trajectory.shape == (50, 1, 5) and acceptance.shape == (50, 1)
    np.testing.assert_array_equal(final.z, trajectory[-1])
    np.testing.assert_allclose(final.log_p, target.log_joint(final.z))
    # recompute each step's acceptance probability from the states before and after
    before = np.concatenate([state.z[None], trajectory[:-1]])
    log_w = lambda z: target.log_joint(z) - proposal.log_prob(z)
    moves = 0
    for k in range(50):
        if not np.array_equal(trajectory[k], before[k]):  # moved: the rule's probability for w(new)/w(old)
            moves += 1
            expected = move_probability(log_w(trajectory[k])[0] - log_w(before[k])[0])
            assert acceptance[k, 0] == pytest.approx(expected, rel=1e-10)
    assert 10 <= moves < 50  # both outcomes occurred


def test_cis_sequential_steps_move_with_barkers_probability():
    """steps of CIS: Barker's rule (not Metropolis-Hastings'): over many chains, the fraction that
    moves at the first step matches the mean of w*/(w* + w), and differs from the mean of min(1, w*/w)."""
    target = gaussian_target(3)
    proposal = fixed_proposal(target)
    rng = np.random.default_rng(4)
    kernel = get_registry().build("kernel", "cis")
    state = kernel.init(target, target.sample(rng, 20_000))
    trajectory, _, acceptance = kernel.steps(rng, state, target, proposal, 1)
    moved = np.any(trajectory[0] != state.z, axis=1)
    standard_error = np.sqrt(acceptance[0].mean() * (1 - acceptance[0].mean()) / len(moved))
    assert abs(moved.mean() - acceptance[0].mean()) < Z_LIMIT * standard_error
    # negative control: Metropolis-Hastings would move these chains far more often (min(1, e^r), e^r = p/(1-p))
    barker = acceptance[0]
    metropolis = np.minimum(1.0, barker / (1.0 - barker)).mean()
    assert abs(moved.mean() - metropolis) > 10 * standard_error


def test_cis_weights_are_normalized_and_slot_zero_is_the_current_state():
    target = gaussian_target(5)
    proposal = fixed_proposal(target)
    kernel = get_registry().build("kernel", "cis")
    rng = np.random.default_rng(3)
    state = kernel.init(target, target.sample(rng, 7))
    transition = kernel.step(rng, state, target, proposal, n_proposals=9)
    assert transition.candidates.shape == (7, 10, 5) and transition.weights.shape == (7, 10)
    np.testing.assert_allclose(transition.weights.sum(axis=1), 1.0)
    np.testing.assert_array_equal(transition.candidates[:, 0], state.z)
    log_w = target.log_joint(transition.candidates.reshape(-1, 5)) - proposal.log_prob(
        transition.candidates.reshape(-1, 5)
    )
    log_w = log_w.reshape(7, 10)
    expected = np.exp(log_w - log_w.max(1, keepdims=True))
    np.testing.assert_allclose(transition.weights, expected / expected.sum(1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(transition.acceptance, 1 - transition.weights[:, 0])


# --- defensive mixtures ----------------------------------------------------------------------


def assert_matches_exact_marginal(target, z):
    """z (C, D) are independent draws that should be π: every moment within Z_LIMIT standard errors."""
    worst = max(invariance_z_scores(target, z).items(), key=lambda item: abs(item[1][0]))
    assert abs(worst[1][0]) < Z_LIMIT, worst


def narrow_proposal(target):
    """A q narrower than π: its tails are too light, where a defensive mixture changes the weights most."""
    family = get_registry().build("family", "meanfield_gaussian", dim=target.dim, init_mean=0.3, init_std=0.7)
    return Approximation(family, family.init_params())


DEFENSIVE = {"defensive": 0.3, "defensive_df": 1.0}
DEFENSIVE_MODES = [("imh", "step"), ("imh", "steps5"), ("cis", "step4")]


def defensive_marginal_after(kernel_name, mode, dim, seed=0, n_chains=20_000):
    target = gaussian_target(dim)
    kernel = get_registry().build("kernel", kernel_name, **DEFENSIVE)
    rng = np.random.default_rng(seed)
    state = kernel.init(target, target.sample(rng, n_chains))
    for _ in range(3):
        state = advance(kernel, mode, rng, state, target, narrow_proposal(target))
    return target, state.z


@pytest.mark.parametrize("dim", [1, 5])
@pytest.mark.parametrize("kernel_name,mode", DEFENSIVE_MODES)
def test_kernels_with_a_defensive_mixture_leave_pi_invariant(kernel_name, mode, dim):
    target, z = defensive_marginal_after(kernel_name, mode, dim)
    assert_matches_exact_marginal(target, z)


@pytest.mark.parametrize("kernel_name,mode", [("imh", "step"), ("cis", "step4")])
def test_the_defensive_check_rejects_weights_that_ignore_the_mixture(monkeypatch, kernel_name, mode):
    # Drawing from q_def but weighting by p/q targets π·q_def/q, not π.
    monkeypatch.setattr(DefensiveMixture, "log_prob", lambda self, z: self.q.log_prob(z))
    target, z = defensive_marginal_after(kernel_name, mode, 5)
    with pytest.raises(AssertionError):
        assert_matches_exact_marginal(target, z)


def test_long_run_with_a_defensive_mixture_matches_pi():
    target = gaussian_target(5)
    kernel = get_registry().build("kernel", "imh", **DEFENSIVE)
    proposal = fixed_proposal(target)  # the narrow q mixes too slowly for a short run
    rng = np.random.default_rng(1)
    state = kernel.init(target, proposal.sample(rng, 200))
    trajectory = []
    for t in range(1200):
        state = kernel.step(rng, state, target, proposal).state
        if t >= 200:
            trajectory.append(state.z)
    assert_matches_long_run(target, np.stack(trajectory))


def defensive_gradients(scheme, kernel_name, seed=5):
    """Gradients of 2000 copies of the scheme's chains started from π, under a narrow q (poor_proposal)."""
    target = gaussian_target(5)
    q = poor_proposal(target)
    kernel = get_registry().build("kernel", kernel_name, **DEFENSIVE)
    estimator = get_registry().build("estimator", scheme, kernel=kernel, n_samples=4)
    return replicate_gradients(estimator, target, q, replicates=2000, seed=seed), target.exact_inclusive_gradient(q)


@pytest.mark.parametrize("scheme,kernel_name", [("pmcsa", "imh"), ("msc_rb", "cis")])
def test_with_a_defensive_mixture_the_gradient_is_still_q_s_and_unbiased(scheme, kernel_name):
    # The mixture only proposes: from chains at π the schemes still estimate ∇ KL(π‖q) = -E_π[s(λ; z)]
    # with q's score (|z| 1.2-2.1 on seeds 5 and 6 for pmcsa, msc_rb, msc and jsa).
    assert_unbiased(*defensive_gradients(scheme, kernel_name))


def test_the_defensive_gradient_check_detects_weights_that_ignore_the_mixture(monkeypatch):
    # weights p/q on draws from q_def: |z| 9-10 for msc_rb (7-10 for the other schemes)
    monkeypatch.setattr(DefensiveMixture, "log_prob", lambda self, z: self.q.log_prob(z))
    with pytest.raises(AssertionError):
        assert_unbiased(*defensive_gradients("msc_rb", "cis"))


@pytest.mark.parametrize("df", [1.0, 4.0])
def test_defensive_mixture_density_and_draws_match_scipy(df):
    q = narrow_proposal(gaussian_target(3))
    mixture = DefensiveMixture(q, 0.2, df)
    mean, std = q.family.mean_std(q.params)
    rng = np.random.default_rng(8)
    z = mean + 3 * std * rng.standard_t(2, (50, 3))
    expected = np.logaddexp(np.log(0.8) + st.norm(mean, std).logpdf(z).sum(1),
                            np.log(0.2) + st.t(df, mean, std).logpdf(z).sum(1))
    np.testing.assert_allclose(mixture.log_prob(z), expected, rtol=1e-12)

    draws, log_q = mixture.sample_with_log_prob(rng, 20_000)
    np.testing.assert_array_equal(log_q, mixture.log_prob(draws))
    for d in range(3):  # each coordinate's marginal is the 1-D mixture
        cdf = lambda x, d=d: 0.8 * st.norm(mean[d], std[d]).cdf(x) + 0.2 * st.t(df, mean[d], std[d]).cdf(x)
        assert st.kstest(draws[:, d], cdf).pvalue > 1e-3


@pytest.mark.parametrize("kernel_name,mode", [("imh", "step"), ("imh", "steps5"), ("cis", "step4")])
def test_no_defensive_mixture_means_todays_kernel_bit_for_bit(kernel_name, mode):
    """defensive = 0 proposes from q itself and draws nothing extra: Alg. 3 / Alg. 2 verbatim."""
    target = gaussian_target(5)
    proposal = fixed_proposal(target)
    kernel = get_registry().build("kernel", kernel_name, defensive=0.0)
    state = kernel.init(target, target.sample(np.random.default_rng(0), 6))
    rng, oracle = np.random.default_rng(9), np.random.default_rng(9)
    new_z = advance(kernel, mode, rng, state, target, proposal).z

    n_draws = {"step": 1, "steps5": 5, "step4": 4}[mode]
    z, log_q = proposal.sample_with_log_prob(oracle, 6 * n_draws)
    log_w_new = target.log_joint(z) - log_q
    current_z, current_log_w = state.z, state.log_p - proposal.log_prob(state.z)
    if kernel_name == "imh":  # draws ordered (step, chain); sequential accept/reject
        z, log_w_new = z.reshape(n_draws, 6, 5), log_w_new.reshape(n_draws, 6)
        log_u = np.log(oracle.random((n_draws, 6)))
        for k in range(n_draws):
            accept = log_u[k] < log_w_new[k] - current_log_w
            current_z = np.where(accept[:, None], z[k], current_z)
            current_log_w = np.where(accept, log_w_new[k], current_log_w)
    else:  # draws ordered (chain, proposal); slot 0 is the current state; inverse-CDF resampling
        log_w = np.concatenate([current_log_w[:, None], log_w_new.reshape(6, n_draws)], axis=1)
        weights = np.exp(log_w - log_w.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        chosen = np.minimum((np.cumsum(weights, axis=1) < oracle.random((6, 1))).sum(1), n_draws)
        candidates = np.concatenate([current_z[:, None], z.reshape(6, n_draws, 5)], axis=1)
        current_z = candidates[np.arange(6), chosen]
    np.testing.assert_array_equal(new_z, current_z)
    assert rng.bit_generator.state == oracle.bit_generator.state  # no extra random draws


def test_defensive_weight_must_be_below_one():
    with pytest.raises(ConfigurationError, match=r"defensive .* must be in \[0, 1\), got 1.0"):
        get_registry().build("kernel", "imh", defensive=1.0)
    with pytest.raises(ConfigurationError, match="defensive_df .* must be positive"):
        get_registry().build("kernel", "cis", defensive=0.1, defensive_df=0.0)


class ScalelessFamily(MeanFieldGaussian):
    """A family that reports no location and scale."""

    def moments(self, params):
        return None


def test_a_defensive_mixture_needs_a_family_with_location_and_scale():
    plugin = type("plugin", (), {"register_variational_families": staticmethod(
        hookimpl(lambda register: register("scaleless", ScalelessFamily)))})
    registry = load_registry([plugin], strict=True)
    with pytest.raises(ConfigurationError, match=r"^kernel 'imh' with defensive > 0 needs a family with a location "
                                                 r"and scale.*family 'scaleless'"):
        assemble(registry, model="gaussian", family="scaleless", estimator="pmcsa", kernel=("imh", {"defensive": 0.1}),
                 n_samples=4)
    without = assemble(registry, model="gaussian", family="scaleless", estimator="pmcsa", n_samples=4)
    assert without.kernel.defensive == 0
