"""The HMC kernel: π-invariance on 1-D, independent 5-D and strongly correlated 5-D Gaussian targets
(identity and diagonal mass), the leapfrog's second order, acceptance at the extremes, dual
averaging and the delayed per-chain tracking after it, divergent trajectories (rejected and counted,
never an error) against NaN at finite points (a model bug, an error), the Table 2 cost of
single-HMC, and configuration errors.

Invariance checks reuse tests/builtin/test_kernels.py: chains started exactly from π must still be
π-distributed after a few transitions (tolerances from the Monte Carlo error of independent chains).
"""

import pickle
import warnings

import numpy as np
import pytest

from mcsa_bench import get_registry, load_registry
from mcsa_bench.api import Approximation, ChainState, ConfigurationError, Estimate, Model, NonFiniteError
from mcsa_bench.assembly import assemble
from mcsa_bench.builtin import hmc
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.builtin.hmc import DIVERGENCE_THRESHOLD, HMC, DualAveraging, kinetic_energy, leapfrog
from mcsa_bench.builtin.models.gaussian import GaussianTarget
from mcsa_bench.engine import CheckedModel, Window, run
from mcsa_bench.hookspecs import hookimpl
from tests.builtin.test_estimators import CountingFamily
from tests.builtin.test_kernels import assert_matches_exact_marginal, assert_matches_long_run


def Gaussian(mean, cov):
    return GaussianTarget.from_moments(mean, cov)


SCALES = np.array([0.5, 1.0, 1.5, 1.0, 2.0])
MEAN = np.array([1.0, -0.5, 0.0, 2.0, 0.3])


def one_dimensional():
    return Gaussian([0.7], [[1.5**2]])


def independent():
    return Gaussian(MEAN, np.diag(SCALES**2))


def correlated(rho=0.9):
    """Equicorrelated with ρ = 0.9 and unequal scales: condition number ≈ 270."""
    return Gaussian(MEAN, (rho * np.ones((5, 5)) + (1 - rho) * np.eye(5)) * np.outer(SCALES, SCALES))


def q_with_scales(scales):
    """A fixed q = N(0, diag(scales²)); HMC's diagonal mass reads its scales."""
    family = MeanFieldGaussian(len(scales), scale="exp")
    return Approximation(family, np.concatenate([np.zeros(len(scales)), np.log(scales)]))


# (target, step size, leapfrog steps, mass): settings with acceptance ≈ 0.6-0.9, where the
# Metropolis correction matters (the uncorrected integrator fails the same check, below).
SETTINGS = {
    "1d": (one_dimensional, 2.4, 3, "identity"),
    "independent-5d": (independent, 0.8, 4, "identity"),
    "correlated-5d": (correlated, 0.3, 10, "identity"),
    "correlated-5d-diagonal-mass": (correlated, 0.3, 6, "diagonal"),
}


def fixed(step_size, n_leapfrog, mass="identity"):
    """HMC with a fixed step size: no adaptation."""
    return HMC(step_size=step_size, n_leapfrog=n_leapfrog, mass=mass, adapt_steps=0, adapt_rate=0)


def run_from_pi(setting, transitions=4, n_chains=20_000, seed=0, corrected=True):
    make_target, step_size, n_leapfrog, mass = SETTINGS[setting]
    target = make_target()
    kernel = fixed(step_size, n_leapfrog, mass)
    q = q_with_scales(SCALES[: target.dim] * 1.3)
    rng = np.random.default_rng(seed)
    state = kernel.init(target, target.sample(rng, n_chains))
    acceptance = []
    for _ in range(transitions):
        if corrected:
            transition = kernel.step(rng, state, target, q)
            state, _ = transition.state, acceptance.append(transition.acceptance.mean())
        else:  # the leapfrog end point, always kept
            momentum = rng.standard_normal(state.z.shape)
            end = leapfrog(target, state.z, state.log_p, state.grad_log_p, momentum, step_size, n_leapfrog,
                           np.ones(target.dim))
            state = ChainState(end.z, end.log_p, end.grad_log_p)
    return target, state, np.mean(acceptance) if acceptance else None


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_chains_started_from_pi_stay_pi_distributed(setting):
    target, state, acceptance = run_from_pi(setting)
    assert 0.5 < acceptance < 0.95, acceptance  # the chains move, and the correction rejects
    assert_matches_exact_marginal(target, state.z)
    np.testing.assert_allclose(state.log_p, target.log_joint(state.z))
    np.testing.assert_allclose(state.grad_log_p, target.log_joint_and_grad(state.z)[1])


@pytest.mark.parametrize("setting", ["1d", "correlated-5d"])
def test_the_invariance_check_rejects_the_uncorrected_integrator(setting):
    target, state, _ = run_from_pi(setting, corrected=False)
    with pytest.raises(AssertionError):
        assert_matches_exact_marginal(target, state.z)


def test_long_run_from_a_far_start_matches_pi_with_diagonal_mass():
    make_target, step_size, n_leapfrog, mass = SETTINGS["correlated-5d-diagonal-mass"]
    target = make_target()
    kernel = fixed(step_size, n_leapfrog, mass)
    q = q_with_scales(SCALES * 1.3)
    rng = np.random.default_rng(1)
    state = kernel.init(target, target.mean + 5.0 + rng.standard_normal((100, 5)))
    trajectory = []
    for t in range(700):
        state = kernel.step(rng, state, target, q).state
        if t >= 100:
            trajectory.append(state.z)
    assert_matches_long_run(target, np.stack(trajectory))


def test_diagonal_mass_is_q_s_inverse_variance():
    # M⁻¹ = diag(σ_q²): the momentum draws have variance 1/σ_q², read from the kinetic energy.
    q = q_with_scales(np.array([0.5, 2.0]))
    kernel = HMC(mass="diagonal")
    np.testing.assert_allclose(kernel._inverse_mass(q, 2), [0.25, 4.0])
    np.testing.assert_allclose(kinetic_energy(np.array([[2.0, 0.5]]), np.array([0.25, 4.0])), [0.5 * (1.0 + 1.0)])


# --- the integrator ------------------------------------------------------------------------


def energy_errors(target, step_size, n_leapfrog, z, momentum):
    log_p, grad = target.log_joint_and_grad(z)
    inverse_mass = np.ones(target.dim)
    end = leapfrog(target, z, log_p, grad, momentum, step_size, n_leapfrog, inverse_mass)
    expected = (kinetic_energy(end.momentum, inverse_mass) - end.log_p) - (
        kinetic_energy(momentum, inverse_mass) - log_p
    )
    np.testing.assert_allclose(end.energy_error, expected, rtol=1e-9, atol=1e-12)
    assert not end.divergent.any()
    return end.energy_error


@pytest.mark.parametrize("make_target", [correlated, one_dimensional])
def test_energy_error_of_a_trajectory_falls_like_step_size_squared(make_target):
    target = make_target()
    rng = np.random.default_rng(4)
    z, momentum = target.sample(rng, 500), rng.standard_normal((500, target.dim))
    duration = 1.2  # ε L fixed while ε halves
    errors = [np.mean(np.abs(energy_errors(target, duration / steps, steps, z, momentum))) for steps in (40, 80, 160)]
    ratios = [errors[0] / errors[1], errors[1] / errors[2]]
    np.testing.assert_allclose(ratios, 4.0, rtol=0.05)


def test_tiny_steps_accept_almost_everything_and_huge_steps_almost_nothing():
    target = correlated()
    q = q_with_scales(SCALES)
    rng = np.random.default_rng(5)
    start = target.sample(rng, 2000)
    tiny = fixed(1e-3, 5)
    transition = tiny.step(rng, tiny.init(target, start), target, q)
    assert transition.acceptance.mean() > 0.999 and not transition.info["divergences"].any()
    huge = fixed(50.0, 64)  # the trajectories diverge
    state = huge.init(target, start)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings escape
        transition = huge.step(rng, state, target, q)
    assert transition.info["divergences"].mean() > 0.99
    np.testing.assert_array_equal(transition.acceptance[transition.info["divergences"]], 0.0)
    assert np.all(np.isfinite(transition.acceptance))
    moved = np.any(transition.state.z != start, axis=1)
    assert not moved[transition.info["divergences"]].any() and np.all(np.isfinite(transition.state.z))
    np.testing.assert_array_equal(transition.state.log_p[~moved], state.log_p[~moved])


# --- dual averaging ------------------------------------------------------------------------


def test_dual_averaging_follows_hoffman_and_gelman_algorithm_5():
    adaptation = DualAveraging(initial_step_size=0.5, target_accept=0.8)
    h_bar, log_bar, mu = 0.0, 0.0, np.log(5.0)
    for m, alpha in enumerate([0.1, 0.9, 0.5, 1.0], start=1):
        step = adaptation.update(alpha)
        h_bar = (1 - 1 / (m + 10)) * h_bar + (0.8 - alpha) / (m + 10)
        log_step = mu - np.sqrt(m) / 0.05 * h_bar
        log_bar = m**-0.75 * log_step + (1 - m**-0.75) * log_bar
        assert step == pytest.approx(np.exp(log_step), rel=1e-12)
        assert adaptation.final_step_size == pytest.approx(np.exp(log_bar), rel=1e-12)


@pytest.mark.parametrize("target_accept", [0.8, 0.6])
def test_dual_averaging_reaches_the_target_acceptance_then_freezes(target_accept, seed=6):
    # 20-D, scales from 0.5 to 2: acceptance falls monotonically with ε (no resonance at L = 8).
    scales = np.exp(np.linspace(np.log(0.5), np.log(2.0), 20))
    target, q = Gaussian(np.zeros(20), np.diag(scales**2)), q_with_scales(np.ones(20))
    kernel = HMC(step_size=0.05, n_leapfrog=8, mass="identity", adapt_steps=500, adapt_rate=0,
                 target_accept=target_accept)
    rng = np.random.default_rng(seed)
    state = kernel.init(target, target.sample(rng, 10))
    for _ in range(500):
        state = kernel.step(rng, state, target, q).state
    frozen = kernel.step_size
    assert frozen == kernel.adaptation.final_step_size and frozen > 0.4  # moved far from ε0 = 0.05
    acceptance = []
    for _ in range(300):
        transition = kernel.step(rng, state, target, q)
        state = transition.state
        acceptance.append(transition.acceptance.mean())
    assert kernel.step_size == frozen
    assert abs(np.mean(acceptance) - target_accept) < 0.05, (frozen, np.mean(acceptance))


def test_adaptation_state_pickles_and_resumes_identically():
    target = correlated()
    q = q_with_scales(SCALES)
    kernel = HMC(step_size=0.1, n_leapfrog=5, adapt_steps=30)  # dual averaging, then tracking
    rng = np.random.default_rng(7)
    state = kernel.init(target, target.sample(rng, 4))
    for _ in range(20):
        state = kernel.step(rng, state, target, q).state
    copy = pickle.loads(pickle.dumps(kernel))
    rng_copy = pickle.loads(pickle.dumps(rng))
    for _ in range(40):
        state_a = kernel.step(rng, state, target, q).state
        state_b = copy.step(rng_copy, state, target, q).state
        np.testing.assert_array_equal(state_a.z, state_b.z)
        state = state_a
    np.testing.assert_array_equal(kernel.step_size, copy.step_size)
    assert np.shape(kernel.step_size) == (4,)  # one per chain once tracking has begun


def test_after_warm_up_each_chain_s_step_size_follows_its_acceptance_a_few_transitions_late():
    target, q = correlated(), q_with_scales(SCALES)
    rate, delta, delay = 0.2, 0.8, hmc.ADAPTATION_DELAY
    kernel = HMC(step_size=0.2, n_leapfrog=5, adapt_steps=0, adapt_rate=rate, target_accept=delta)
    rng = np.random.default_rng(8)
    state = kernel.init(target, target.sample(rng, 50))
    acceptance = []
    for _ in range(delay + 3):
        transition = kernel.step(rng, state, target, q)
        state = transition.state
        acceptance.append(transition.acceptance)
        if len(acceptance) <= delay:  # nothing old enough yet
            assert kernel.step_size == 0.2
    expected = 0.2 * np.exp(rate * np.sum(np.array(acceptance[:3]) - delta, axis=0))
    np.testing.assert_allclose(kernel.step_size, expected, rtol=1e-12)
    assert np.ptp(kernel.step_size) > 0  # the chains' step sizes differ


@pytest.mark.slow
def test_chains_started_from_pi_stay_pi_distributed_while_their_step_sizes_track(monkeypatch):
    # A step size that follows the chain's own last acceptance depends on its current state and
    # breaks π-invariance (the negative control, without the delay: Mahalanobis z-score ≈ 15, the
    # mean distance 7 % too large); following the acceptance of a few transitions before keeps the
    # chains at π. Independent 5-D target, ε0 = 0.6, L = 4: acceptance 0.8 near ε0.
    target, q = independent(), q_with_scales(SCALES)

    def run_tracking():
        kernel = HMC(step_size=0.6, n_leapfrog=4, mass="identity", adapt_steps=0, adapt_rate=0.2)
        rng = np.random.default_rng(0)
        state = kernel.init(target, target.sample(rng, 20_000))
        for _ in range(100):
            state = kernel.step(rng, state, target, q).state
        assert np.ptp(np.log(kernel.step_size)) > 0.2  # the step sizes did move, chain by chain
        return state.z

    assert_matches_exact_marginal(target, run_tracking())
    monkeypatch.setattr(hmc, "ADAPTATION_DELAY", 0)
    with pytest.raises(AssertionError):
        assert_matches_exact_marginal(target, run_tracking())


# --- divergences ---------------------------------------------------------------------------


class Quartic(Model):
    """log p(z) = -Σ z⁴/4: tails so light that a leapfrog trajectory started a few units out grows
    like z³ per step and overflows. Records every point it is asked about."""

    def __init__(self, dim=2):
        self.dim, self.asked = dim, []

    def log_joint(self, z):
        return self.log_joint_and_grad(z)[0]

    def log_joint_and_grad(self, z):
        self.asked.append(z.copy())
        with np.errstate(over="ignore", invalid="ignore"):
            return -0.25 * np.sum(z**4, axis=1), -(z**3)


def test_a_divergent_trajectory_is_rejected_and_counted_and_never_evaluated_at_non_finite_points():
    model = Quartic()
    target = CheckedModel(model)  # what kernels get from the engine: it raises on NaN log densities
    kernel = fixed(0.5, 20)
    start = np.array([[0.3, -0.2], [6.0, -6.0], [0.1, 0.5]])  # the middle chain's trajectory overflows
    state = kernel.init(target, start)
    transition = kernel.step(np.random.default_rng(0), state, target, q_with_scales(np.ones(2)))
    np.testing.assert_array_equal(transition.info["divergences"], [False, True, False])
    assert transition.acceptance[1] == 0.0 and transition.acceptance[[0, 2]].min() > 0.5
    np.testing.assert_array_equal(transition.state.z[1], start[1])
    np.testing.assert_array_equal(transition.state.log_p[1], state.log_p[1])
    assert len(model.asked) == 1 + 20 and all(np.isfinite(z).all() for z in model.asked)


def test_an_energy_error_above_the_threshold_is_a_divergence_though_every_value_is_finite():
    # N(0, 0.01²) with ε = 0.05: the leapfrog is unstable (ε/σ = 5 > 2). From z = σ at rest the energy
    # error is about 410 nats after one step and 3.5·10⁴ after two: a divergence, with finite values.
    target = Gaussian([0.0], [[1e-4]])
    z = np.array([[0.01]])
    log_p, grad = target.log_joint_and_grad(z)
    one = leapfrog(target, z, log_p, grad, np.zeros((1, 1)), 0.05, 1, np.ones(1))
    assert not one.divergent[0] and 300 < one.energy_error[0] < DIVERGENCE_THRESHOLD
    three = leapfrog(target, z, log_p, grad, np.zeros((1, 1)), 0.05, 3, np.ones(1))
    assert three.divergent[0] and np.isfinite(three.z).all() and np.isfinite(three.log_p).all()
    np.testing.assert_array_equal(three.z, one.z)  # frozen at its last point within the threshold


def optimize(model, kernel, scheme="msc", n_iters=20, seed=0):
    registry = get_registry()
    estimator = registry.build("estimator", scheme, kernel=kernel, n_samples=4)
    return run(model, MeanFieldGaussian(model.dim), estimator, registry.build("optimizer", "adam"),
               n_iters=n_iters, eval_every=10, seed=seed)


@pytest.mark.parametrize("scheme", ["msc", "pmcsa", "jsa", "rws"])
def test_a_run_whose_trajectories_diverge_finishes_and_logs_the_fraction_that_diverged(scheme):
    result = optimize(Quartic(), fixed(2.0, 20), scheme)  # failed with "log density returned NaN" before
    divergences = [row["divergences"] for row in result.history[1:]]
    assert all(0.0 < fraction <= 1.0 for fraction in divergences), divergences


def test_the_issue_s_pima_run_at_the_papers_gaussian_setting_finishes():
    # logistic on pima, ε = 0.4, L = 16, identity mass: |z| reached inf by the third leapfrog step and
    # the run failed at iteration 1; now every such trajectory is a counted rejection
    model = get_registry().build("model", "logistic", dataset="pima")
    result = optimize(model, fixed(0.4, 16), "pmcsa", n_iters=10)
    assert result.history[-1]["divergences"] > 0.5


class NaNAtFinitePoints(Model):
    """N(0, I), except a NaN log density wherever z_0 > 1: a bug of the model at finite points."""

    dim = 2

    def log_joint(self, z):
        return self.log_joint_and_grad(z)[0]

    def log_joint_and_grad(self, z):
        return np.where(z[:, 0] > 1.0, np.nan, -0.5 * np.sum(z * z, axis=1)), -z


def test_a_nan_log_density_at_a_finite_point_fails_the_run_naming_the_model_bug():
    expected = (r"log density returned NaN for 1 of 1 points at iteration \d+ \(model NaNAtFinitePoints; "
                r"at finite points, largest \|z\| among them [\d.]+: a bug in the model's log density\)")
    with pytest.raises(NonFiniteError, match=expected):
        optimize(NaNAtFinitePoints(), fixed(0.5, 10), n_iters=200)


def test_a_log_density_asked_at_non_finite_points_blames_what_diverged():
    target = CheckedModel(NaNAtFinitePoints())
    with pytest.raises(NonFiniteError, match=r"asked at non-finite points: q or the chains diverged"):
        target.log_joint(np.array([[0.0, 0.0], [np.inf, 0.0]]))


def test_a_metric_reported_by_some_iterations_is_averaged_over_those():
    # rws reports divergences on its wake iterations only: their fraction, not diluted by the others
    window, state = Window(), ChainState(np.zeros((1, 1)), np.zeros(1))
    window.add_iteration(1.0, Estimate(np.zeros(1), state, 0.5, {"divergences": 1.0}))
    window.add_iteration(1.0, Estimate(np.zeros(1), state, None))
    window.add_iteration(1.0, Estimate(np.zeros(1), state, 0.5, {"divergences": 0.0}))
    assert window.means()["divergences"] == 0.5


# --- cost and configuration ----------------------------------------------------------------


class CountingGradientTarget(Model):
    def __init__(self, inner):
        self.inner, self.dim = inner, inner.dim
        self.log_joint_calls = self.grad_calls = self.grad_rows = 0

    def log_joint(self, z):
        self.log_joint_calls += 1
        return self.inner.log_joint(z)

    def log_joint_and_grad(self, z):
        self.grad_calls += 1
        self.grad_rows += len(z)
        return self.inner.log_joint_and_grad(z)


@pytest.mark.parametrize(
    "scheme,calls,rows_per_call,scores",
    [  # single-HMC (Table 2: L + 1 gradient evaluations, the starting point's cached) and HMC in the other schemes
        ("msc", lambda n, L: L, lambda n: 1, lambda n: 1),
        ("pmcsa", lambda n, L: L, lambda n: n, lambda n: n),
        ("jsa", lambda n, L: n * L, lambda n: 1, lambda n: n),
    ],
)
def test_each_iteration_with_hmc_costs_l_batched_gradient_calls(scheme, calls, rows_per_call, scores):
    n, n_leapfrog = 6, 7
    registry = get_registry()
    estimator = registry.build("estimator", scheme, kernel=HMC(step_size=0.2, n_leapfrog=n_leapfrog), n_samples=n)
    target, family = CountingGradientTarget(independent()), CountingFamily(5)
    q = Approximation(family, family.init_params())
    rng = np.random.default_rng(0)
    state = estimator.init(rng, target, q)
    assert target.grad_calls == 1  # the initial states' log p and gradient, cached from then on
    target.grad_calls = target.grad_rows = family.log_q_rows = family.score_rows = 0
    iterations = 3
    for _ in range(iterations):
        state = estimator.estimate(rng, state, target, q).state
    assert target.log_joint_calls == 0 and family.log_q_rows == 0
    assert target.grad_calls == iterations * calls(n, n_leapfrog)
    assert target.grad_rows == iterations * calls(n, n_leapfrog) * rows_per_call(n)
    assert family.score_rows == iterations * scores(n)


@pytest.mark.parametrize("scheme", ["msc", "pmcsa"])
def test_hmc_gradients_are_unbiased_when_chains_start_from_pi(scheme):
    from mcsa_bench.testing import replicate_gradients
    from tests.support import assert_unbiased

    target = get_registry().build("model", "gaussian", dim=5, nu=5.0, seed=11)
    family = MeanFieldGaussian(5)
    poor_q = Approximation(family, np.concatenate([np.full(5, 0.5), np.full(5, np.log(np.expm1(0.6)))]))
    estimator = get_registry().build("estimator", scheme, kernel=HMC(step_size=0.3, n_leapfrog=4), n_samples=2)
    grads = replicate_gradients(estimator, target, poor_q, replicates=2000, seed=3)
    assert_unbiased(grads, target.exact_inclusive_gradient(poor_q))


def test_a_state_without_a_cached_gradient_costs_one_more_call():
    target = CountingGradientTarget(independent())
    kernel = HMC(n_leapfrog=3)
    state = ChainState(np.zeros((2, 5)), target.inner.log_joint(np.zeros((2, 5))))
    kernel.step(np.random.default_rng(0), state, target, q_with_scales(SCALES))
    assert target.grad_calls == 4


class NoGradient(Model):
    """A model that provides no gradient of its log joint."""

    dim = 3

    def log_joint(self, z):
        return -0.5 * np.sum(z * z, axis=1)


def test_hmc_on_a_model_without_gradient_is_one_clear_error():
    plugin = type("plugin", (), {"register_models": staticmethod(
        hookimpl(lambda register: register("flat", NoGradient)))})
    registry = load_registry([plugin], strict=True)
    expected = r"^kernel 'hmc' needs the gradient of the log joint.*model 'flat'"
    with pytest.raises(ConfigurationError, match=expected) as error:
        assemble(registry, model="flat", estimator="msc", kernel="hmc", n_samples=10)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "params,match",
    [
        ({"step_size": 0.0}, "step_size must be positive"),
        ({"n_leapfrog": 0}, "n_leapfrog must be an integer >= 1"),
        ({"mass": "dense"}, "mass must be one of identity, diagonal; got 'dense'"),
        ({"adapt_steps": -1}, "adapt_steps must be an integer >= 0"),
        ({"adapt_rate": -0.1}, r"adapt_rate must be in \[0, 1\)"),
        ({"target_accept": 1.0}, r"target_accept must be in \(0, 1\)"),
    ],
)
def test_bad_hmc_parameters_are_named(params, match):
    with pytest.raises(ConfigurationError, match=match):
        get_registry().build("kernel", "hmc", **params)


def test_hmc_takes_one_trajectory_per_transition():
    kernel = HMC()
    target = independent()
    state = kernel.init(target, np.zeros((1, 5)))
    with pytest.raises(ConfigurationError, match="one trajectory per transition"):
        kernel.step(np.random.default_rng(0), state, target, q_with_scales(SCALES), n_proposals=4)


def test_divergences_are_a_diagnostic_where_lower_is_better_not_a_result():
    from mcsa_bench.jobs.summary import result_columns
    from mcsa_bench.tracking.record import METRICS, MetricSpec

    assert METRICS["divergences"] == MetricSpec("diagnostic", "lower", "divergent HMC transitions")
    assert result_columns(["divergences", "test_lpd", "wall_time"]) == ["test_lpd", "wall_time"]
