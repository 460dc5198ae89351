"""The baselines (snis, rws, elbo): the STL gradient against the closed-form ∇ KL(q‖π), ELBO's
convergence to the exclusive-KL optimum, KL(π‖q) reduction by SNIS and RWS, their Table 2 costs,
schemes without a kernel, and one-line configuration errors."""


import numpy as np
import pytest

from mcsa_bench import get_registry, load_registry, run
from mcsa_bench.api import Approximation, ConfigurationError, Model, VariationalFamily
from mcsa_bench.assembly import assemble
from mcsa_bench.builtin.baselines import ELBO, RWS, SNIS
from mcsa_bench.builtin.estimators import MSC
from mcsa_bench.builtin.families import MeanFieldGaussian, MeanFieldStudentT, _sigmoid
from mcsa_bench.builtin.hmc import HMC
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.builtin.models.gaussian import gaussian_kl
from mcsa_bench.builtin.optimizers import Adam
from mcsa_bench.hookspecs import hookimpl
from tests.builtin.test_estimators import CountingFamily as CountingScoreFamily
from tests.engine.test_loop import optimal_kl
from tests.support import assert_unbiased


@pytest.fixture(scope="module")
def target():
    return get_registry().build("model", "gaussian", dim=5, nu=5.0, seed=11)


@pytest.fixture(scope="module")
def poor_q(target):
    family = MeanFieldGaussian(target.dim)
    params = np.concatenate([np.full(target.dim, 0.5), np.full(target.dim, float(np.log(np.expm1(0.6))))])
    return Approximation(family, params)


def exclusive_kl_gradient(target, q):
    """∇_λ KL(q‖π) for the softplus mean-field Gaussian q = N(μ, diag σ²) and π = N(m, Σ), P = Σ⁻¹:
    KL = ½[Σ_i P_ii σ_i² + (μ-m)ᵀP(μ-m) - D + log|Σ| - Σ_i log σ_i²], so
    ∂/∂μ = P(μ - m),  ∂/∂σ_i = P_ii σ_i - 1/σ_i,  ∂/∂ψ_i = ∂/∂σ_i · sigmoid(ψ_i)."""
    mu, psi = q.params[: q.dim], q.params[q.dim :]
    sigma, precision = np.logaddexp(0, psi), target.precision
    return np.concatenate([precision @ (mu - target.mean), (np.diag(precision) * sigma - 1 / sigma) * _sigmoid(psi)])


def exclusive_kl(target, q, params):
    mean, cov = q.family.moments(params).gaussian_moments()
    return gaussian_kl(mean, cov, target.mean, target.cov)


# --- ELBO with the path-derivative (STL) estimator --------------------------------------------


def test_exclusive_kl_gradient_formula_matches_finite_differences(target, poor_q):
    step = 1e-6
    kl = lambda params: exclusive_kl(target, poor_q, params)
    numeric = [(kl(poor_q.params + step * e) - kl(poor_q.params - step * e)) / (2 * step)
               for e in np.eye(len(poor_q.params))]
    np.testing.assert_allclose(exclusive_kl_gradient(target, poor_q), numeric, rtol=1e-6, atol=1e-7)


def elbo_gradients(target, q, replicates=3000, n_samples=4, seed=0):
    estimator, rng = ELBO(None, n_samples), np.random.default_rng(seed)
    state = estimator.init(rng, target, q)
    return np.stack([estimator.estimate(rng, state, target, q).grad for _ in range(replicates)])


def test_stl_gradient_is_unbiased_for_the_exclusive_kl(target, poor_q):
    assert_unbiased(elbo_gradients(target, poor_q), exclusive_kl_gradient(target, poor_q))


def test_the_unbiasedness_check_detects_a_gradient_without_the_entropy_term(target, poor_q, monkeypatch):
    # with ∇_z log q = 0 the estimator differentiates E_q[-log p] only: biased in the scales
    monkeypatch.setattr(MeanFieldGaussian, "grad_log_prob", lambda self, params, z: np.zeros_like(z))
    with pytest.raises(AssertionError):
        assert_unbiased(elbo_gradients(target, poor_q), exclusive_kl_gradient(target, poor_q))


def test_stl_gradient_vanishes_when_q_is_pi():
    # the "sticking the landing" property: zero variance at q = π (an isotropic target a mean-field q can match)
    model = get_registry().build("model", "gaussian", dim=3, nu=5.0, seed=1)
    model.cov, model.precision = np.eye(3) * 4.0, np.eye(3) / 4.0
    family = MeanFieldGaussian(3, scale="exp")
    q = Approximation(family, np.concatenate([model.mean, np.full(3, np.log(2.0))]))
    np.testing.assert_allclose(elbo_gradients(model, q, replicates=5), 0.0, atol=1e-12)


def test_elbo_converges_to_the_exclusive_kl_optimum(target):
    """Mean-field Gaussian on N(m, Σ): μ = m, σ_i² = 1/(Σ⁻¹)_ii (not the inclusive σ_i² = Σ_ii)."""
    family = MeanFieldGaussian(target.dim)
    estimator, optimizer, rng = ELBO(None, 10), Adam(lr=0.01), np.random.default_rng(0)
    params = family.init_params()
    state, opt_state = estimator.init(rng, target, Approximation(family, params)), optimizer.init(params)
    averaged, iterations = np.zeros_like(params), 2000
    for t in range(iterations):
        grad = estimator.estimate(rng, state, target, Approximation(family, params)).grad
        params, opt_state = optimizer.step(params, grad, opt_state)
        if t >= iterations // 2:  # average the iterates that hover around the optimum
            averaged += params / (iterations - iterations // 2)
    mean, std = family.mean_std(averaged)
    exclusive_std, inclusive_std = 1 / np.sqrt(np.diag(target.precision)), np.sqrt(np.diag(target.cov))
    np.testing.assert_allclose(mean, target.mean, atol=0.05)
    np.testing.assert_allclose(std, exclusive_std, rtol=0.03)
    assert np.max(np.abs(std / inclusive_std - 1)) > 0.3  # the two optima are far apart here


# --- SNIS and RWS minimize the inclusive KL ---------------------------------------------------


@pytest.mark.parametrize("scheme", ["snis", "rws"])
def test_snis_and_rws_reduce_the_inclusive_kl(scheme):
    parts = assemble(get_registry(), model=("gaussian", {"dim": 10, "nu": 50.0, "seed": 0}), estimator=scheme,
                     n_samples=10)
    result = run(*parts.run_args(), n_iters=2000, seed=0, eval_every=1000)
    start, end = result.history[0]["kl_inclusive"], result.history[-1]["kl_inclusive"]
    assert end < start / 4, (start, end)
    assert end >= optimal_kl(parts.model)


def test_snis_reports_the_ess_of_its_weights(target, poor_q):
    estimator = SNIS(None, 8)
    estimate = estimator.estimate(np.random.default_rng(3), estimator.init(None, target, poor_q), target, poor_q)
    z, log_q = poor_q.sample_with_log_prob(np.random.default_rng(3), 8)
    weights = np.exp(target.log_joint(z) - log_q)
    weights /= weights.sum()
    assert estimate.metrics["snis_ess"] == pytest.approx(1 / np.sum(weights**2), rel=1e-12)
    np.testing.assert_allclose(estimate.grad, -(weights @ poor_q.family.score(poor_q.params, z)), rtol=1e-12)
    assert estimate.acceptance_rate is None  # no kernel, no transition


# --- Table 2: cost per iteration ---------------------------------------------------------------


class CountingTarget(Model):
    def __init__(self, inner):
        self.inner, self.dim = inner, inner.dim
        self.calls = self.rows = self.grad_calls = self.grad_rows = 0

    def log_joint(self, z):
        self.calls += 1
        self.rows += len(z)
        return self.inner.log_joint(z)

    def log_joint_and_grad(self, z):
        self.grad_calls += 1
        self.grad_rows += len(z)
        return self.inner.log_joint_and_grad(z)

    def reset(self):
        self.calls = self.rows = self.grad_calls = self.grad_rows = 0


class CountingFamily(CountingScoreFamily):
    """Also counts the reparameterization calls of the ELBO."""

    def reset(self):
        self.log_q_rows = self.score_rows = self.grad_z_rows = self.vjp_rows = self.noise_rows = 0

    def base_noise(self, rng, n):
        self.noise_rows += n
        return super().base_noise(rng, n)

    def grad_log_prob(self, params, z):
        self.grad_z_rows += len(z)
        return super().grad_log_prob(params, z)

    def reparameterize_vjp(self, params, eps, cotangent):
        self.vjp_rows += len(eps)
        return super().reparameterize_vjp(params, eps, cotangent)


def count_iteration(estimator, target, state, q, rng):
    counting_target, family = target, q.family
    counting_target.reset()
    family.reset()
    state = estimator.estimate(rng, state, counting_target, q).state
    return state, {"log_p calls": counting_target.calls, "log_p": counting_target.rows,
                   "grad calls": counting_target.grad_calls, "grad": counting_target.grad_rows,
                   "log_q": family.log_q_rows, "score": family.score_rows, "noise": family.noise_rows,
                   "grad_z log q": family.grad_z_rows, "vjp": family.vjp_rows}


def table_2_row(log_p=0, grad_calls=0, grad=0, log_q=0, score=0, reparameterized=0):
    return {"log_p calls": int(log_p > 0), "log_p": log_p, "grad calls": grad_calls, "grad": grad, "log_q": log_q,
            "score": score, "noise": reparameterized, "grad_z log q": reparameterized, "vjp": reparameterized}


@pytest.mark.parametrize("n", [2, 10])
def test_snis_and_elbo_iterations_cost_what_table_2_says(target, n):
    counting_target, family = CountingTarget(target), CountingFamily(target.dim)
    q, rng = Approximation(family, family.init_params()), np.random.default_rng(0)
    for estimator, row in [(SNIS(None, n), table_2_row(log_p=n, log_q=n, score=n)),
                           (ELBO(None, n), table_2_row(grad_calls=1, grad=n, reparameterized=n))]:
        state = estimator.init(rng, counting_target, q)
        for _ in range(3):
            state, cost = count_iteration(estimator, counting_target, state, q, rng)
            assert cost == row, type(estimator).__name__


def test_rws_alternates_snis_with_an_hmc_wake_update_every_k_iterations(target):
    n, n_leapfrog, every = 6, 5, 3
    counting_target, family = CountingTarget(target), CountingFamily(target.dim)
    q, rng = Approximation(family, family.init_params()), np.random.default_rng(0)
    estimator = RWS(HMC(step_size=0.2, n_leapfrog=n_leapfrog), n, every=every)
    wake = table_2_row(grad_calls=n_leapfrog, grad=n_leapfrog, score=1)
    sleep = table_2_row(log_p=n, log_q=n, score=n)
    for _ in range(2):  # init restarts the schedule: the first iteration is a wake update
        state = estimator.init(rng, counting_target, q)
        costs = []
        for _ in range(7):
            state, cost = count_iteration(estimator, counting_target, state, q, rng)
            costs.append(cost)
        assert costs == [wake, sleep, sleep, wake, sleep, sleep, wake]


def test_rws_reports_an_acceptance_only_on_wake_updates(target, poor_q):
    estimator = RWS(HMC(step_size=0.3, n_leapfrog=4), 4, every=2)
    rng = np.random.default_rng(1)
    state = estimator.init(rng, target, poor_q)
    wake = estimator.estimate(rng, state, target, poor_q)
    sleep = estimator.estimate(rng, wake.state, target, poor_q)
    assert 0 <= wake.acceptance_rate <= 1 and sleep.acceptance_rate is None
    np.testing.assert_array_equal(sleep.state.z, wake.state.z)  # the wake chain waits


def test_rws_replicas_of_the_diagnostic_all_make_the_update_of_the_next_iteration(target, poor_q):
    estimator = RWS(HMC(step_size=0.3, n_leapfrog=4), 4, every=2)
    rng = np.random.default_rng(2)
    state = estimator.init(rng, target, poor_q)
    for wake in [True, False, True]:
        replicas = estimator.estimate_replicas(rng, [state] * 5, target, poor_q)
        assert [r.acceptance_rate is not None for r in replicas] == [wake] * 5
        state = estimator.estimate(rng, state, target, poor_q).state  # the run's own iteration


# --- schemes without a kernel, and configuration errors --------------------------------------


@pytest.mark.parametrize("scheme", ["snis", "elbo"])
def test_schemes_without_a_kernel_build_none_and_keep_no_chains(scheme):
    parts = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator=scheme, n_samples=4)
    assert parts.kernel is None and parts.estimator.kernel is None and "kernel" not in parts.sources
    rng = np.random.default_rng(0)
    state = parts.estimator.init(rng, parts.model, Approximation(parts.family, parts.family.init_params()))
    assert state.z.shape == (0, 3) and state.log_p.shape == (0,) and parts.estimator.num_chains == 0
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state


class NoGradient(Model):
    dim = 3

    def log_joint(self, z):
        return -0.5 * np.sum(z * z, axis=1)


class NotReparameterizable(MeanFieldGaussian):
    """A mean-field Gaussian with the contract's defaults (not implemented) for reparameterization."""

    reparameterizable = False
    base_noise = VariationalFamily.base_noise
    reparameterize = VariationalFamily.reparameterize
    reparameterize_vjp = VariationalFamily.reparameterize_vjp
    grad_log_prob = VariationalFamily.grad_log_prob


@pytest.fixture(scope="module")
def registry():
    plugin = type("plugin", (), {
        "register_models": staticmethod(hookimpl(lambda register: register("flat", NoGradient))),
        "register_variational_families": staticmethod(
            hookimpl(lambda register: register("plain", NotReparameterizable))),
    })
    return load_registry([plugin], strict=True)


@pytest.mark.parametrize(
    "setting,message",
    [
        (
            dict(estimator="elbo", kernel="imh"),
            "estimator 'elbo' uses no kernel (it draws from q directly); kernel 'imh' does not fit: leave kernel unset",
        ),
        (
            dict(estimator="snis", kernel="cis"),
            "estimator 'snis' uses no kernel (it draws from q directly); kernel 'cis' does not fit: leave kernel unset",
        ),
        (
            dict(estimator="rws", kernel="imh"),
            "estimator 'rws' needs a gradient-based kernel for its wake update (such as hmc); "
            "kernel 'imh' does not fit. "
            "Kernels that fit: ex2mcmc, hmc",
        ),
        (
            dict(estimator="elbo", model="flat"),
            "estimator 'elbo' needs the gradient of the log joint (Model.log_joint_and_grad); model 'flat' with family "
            "'meanfield_gaussian' does not fit",
        ),
        (
            dict(estimator="rws", model="flat"),
            "kernel 'hmc' needs the gradient of the log joint (Model.log_joint_and_grad); model 'flat' with family "
            "'meanfield_gaussian' does not fit",
        ),
        (
            dict(estimator="elbo", family="plain"),
            "estimator 'elbo' needs a reparameterizable family (base_noise, reparameterize, reparameterize_vjp, "
            "grad_log_prob; meanfield_student_t only with learn_df=false); "
            "model 'gaussian' with family 'plain' does not fit",
        ),
        (
            dict(estimator="elbo", family=("meanfield_student_t", {"learn_df": True})),
            "estimator 'elbo' needs a reparameterizable family (base_noise, reparameterize, reparameterize_vjp, "
            "grad_log_prob; meanfield_student_t only with learn_df=false); model 'gaussian' with family "
            "'meanfield_student_t' does not fit",
        ),
        (dict(estimator=("rws", {"every": 0})), "every (iterations between wake updates) must be an integer >= 1"),
        (dict(estimator="snis", n_samples=1), "needs n_samples >= 2"),
    ],
)
def test_invalid_pairings_are_one_line_errors(registry, setting, message):
    setting = {"model": "gaussian", "n_samples": 4, **setting}
    with pytest.raises(ConfigurationError) as error:
        assemble(registry, **setting)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_estimators_check_their_kernel_when_built_directly():
    with pytest.raises(ConfigurationError, match="uses no kernel"):
        ELBO(IMH(), 4)
    with pytest.raises(ConfigurationError, match="needs a kernel"):
        MSC(None, 4)
    assert MeanFieldGaussian(2).reparameterizable and not NotReparameterizable(2).reparameterizable
    assert MeanFieldStudentT(2).reparameterizable and not MeanFieldStudentT(2, learn_df=True).reparameterizable
