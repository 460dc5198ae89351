"""The conformance checks (mcsa_bench.testing, `mcsa-bench check`): every built-in component
passes them, and deliberately broken components fail them with a message that names the
component, the check, the measured value and the tolerance."""

from pathlib import Path

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError, MetricSpec, Model, Transition
from mcsa_bench.builtin.estimators import PMCSA
from mcsa_bench.builtin.families import MeanFieldGaussian, MeanFieldStudentT
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.builtin.optimizers import SGD, OptimizerState
from mcsa_bench.testing import CHECKS, Z_LIMIT, assert_conforms, check_component, check_factory

#: the slowest models run their checks on a smaller training set (still the component's own
#: parameter), the flow with two small coupling layers (its spline: tests/autodiff/test_flow.py); the GP
#: classifier's evaluate (10^3 GP predictive solves, tens of seconds) is left to tests/builtin/models/test_gp.py
PPL_FILES = Path(__file__).resolve().parents[1] / "data" / "ppl"
FAST = {"gp_classification": {"test_fraction": 0.8}, "gp_regression": {"test_fraction": 0.8},
        "flow": {"layers": 2, "width": 8}, "posteriordb": {"posterior": "kidiq-kidscore_interaction"},
        **{ppl: {"source": f"{PPL_FILES / f'eight_schools_{ppl}.py'}:model",
                 "data": str(PPL_FILES / "eight_schools.json")} for ppl in ("numpyro", "pymc")}}
SKIPPED = {"gp_classification": {"evaluate"}}

BUILTINS = [(c.kind, c.name) for c in get_registry().components() if c.plugin.distribution == "mcsa-bench"]


@pytest.mark.parametrize("kind,name", BUILTINS, ids=[f"{k}-{n}" for k, n in BUILTINS])
def test_every_builtin_component_passes_its_checks(kind, name):
    checks = [c for c in CHECKS[kind] if c not in SKIPPED.get(name, ())]
    results = assert_conforms(kind, name, FAST.get(name), checks=checks)
    assert [r.check for r in results] == ["builds", *checks]
    assert all(r.status in ("passed", "not applicable") for r in results)


def failed(results, check):
    """The failed result of ``check``; the other checks' statuses are returned for inspection."""
    result = next(r for r in results if r.check == check)
    assert result.status == "failed", result.message
    return result


def assert_names_the_culprit(result, name, check, quantity):
    message = result.message
    assert message.startswith("FAILED ") and f"'{name}'" in message and f"{check}: {quantity} " in message
    assert f" > {result.tolerance:.3g}" in message and result.measured > result.tolerance


# --- kernels -------------------------------------------------------------------------------


class IgnoresQ(IMH):
    """Accepts with min(1, π(z*)/π(z)) while proposing from q: its stationary law is ∝ π·q."""

    def step(self, rng, state, target, proposal, n_proposals=1):
        return super().step(rng, state, target, FlatProposal(proposal))


class FlatProposal:
    def __init__(self, q):
        self.q = q

    def sample_with_log_prob(self, rng, n):
        return self.q.sample_with_log_prob(rng, n)[0], np.zeros(n)

    def log_prob(self, z):
        return np.zeros(len(z))


def test_a_kernel_that_is_not_pi_invariant_fails_with_the_numbers():
    results = check_factory("kernel", IgnoresQ, name="ignores_q", checks=["pi_invariance_1d", "pi_invariance_5d"])
    for check in ("pi_invariance_1d", "pi_invariance_5d"):
        result = failed(results, check)
        assert_names_the_culprit(result, "ignores_q", check, "largest |z|")
        assert result.tolerance == Z_LIMIT and "vs exact" in result.detail and "started at π" in result.detail


class OverAccepts(IMH):
    def step(self, rng, state, target, proposal, n_proposals=1):
        transition = super().step(rng, state, target, proposal)
        return type(transition)(transition.state, 2.0 * transition.acceptance)


class StaleCache(IMH):
    """Moves the chains but keeps the old log p: every later ratio is wrong."""

    def step(self, rng, state, target, proposal, n_proposals=1):
        transition = super().step(rng, state, target, proposal)
        return type(transition)(type(state)(transition.state.z, state.log_p), transition.acceptance)


def test_acceptance_outside_the_unit_interval_and_a_stale_cache_are_caught():
    result = failed(check_factory("kernel", OverAccepts, checks=["acceptance_in_unit_interval"]),
                    "acceptance_in_unit_interval")
    assert result.measured == pytest.approx(1.0) and "ranged over [" in result.detail
    result = failed(check_factory("kernel", StaleCache, checks=["transition_contract"]), "transition_contract")
    assert "cached log p differs from log_joint" in result.detail


# --- families ------------------------------------------------------------------------------


class SignError(MeanFieldGaussian):
    """The score of the means has the wrong sign."""

    def score(self, params, z):
        score = super().score(params, z)
        score[:, : self.dim] *= -1
        return score


class Unnormalized(MeanFieldGaussian):
    def log_prob(self, params, z):
        return super().log_prob(params, z) + 0.01


class WrongSampler(MeanFieldGaussian):
    """Draws and reparameterizes with twice the scale its density says."""

    def sample(self, params, rng, n):
        return self.reparameterize(params, self.base_noise(rng, n))

    def sample_with_log_prob(self, params, rng, n):
        z = self.sample(params, rng, n)
        return z, self.log_prob(params, z)

    def reparameterize(self, params, eps):
        return super().reparameterize(params, 2.0 * eps)


class NoReparameterization(MeanFieldGaussian):
    def base_noise(self, rng, n):
        raise NotImplementedError("no base noise")

    def grad_log_prob(self, params, z):
        raise NotImplementedError("no gradient in z")


class ScoreOfTheMeansOnly(MeanFieldGaussian):
    """Returns ∇_μ log q only: (B, D) instead of (B, P)."""

    def score(self, params, z):
        return super().score(params, z)[:, : self.dim]


class BatchDependentDensity(MeanFieldGaussian):
    """log q of each row shifted by the batch's mean of z[0]."""

    def log_prob(self, params, z):
        return super().log_prob(params, z) + 0.01 * z[:, 0].mean()


def test_wrong_shapes_and_a_batch_dependent_density_fail_the_shapes_check():
    result = failed(check_factory("family", ScoreOfTheMeansOnly, name="means_only", checks=["shapes"]), "shapes")
    assert_names_the_culprit(result, "means_only", "shapes", "problems")
    assert result.detail.startswith("D=1: score has shape (7, 1), expected (7, 2)")
    result = failed(check_factory("family", BatchDependentDensity, checks=["shapes"]), "shapes")
    assert "D=1: log_prob of a batch differs from log_prob row by row" in result.detail


def test_a_score_with_a_sign_error_fails():
    results = check_factory("family", SignError, name="sign_error")
    assert_names_the_culprit(failed(results, "score_finite_differences"), "sign_error", "score_finite_differences",
                             "largest relative error")
    assert "analytic" in failed(results, "score_finite_differences").detail
    assert [r.check for r in results if r.failed] == ["score_finite_differences"]  # E_q[s] = 0 still holds


def test_normalization_and_sampling_errors_fail_and_missing_methods_are_not_applicable():
    result = failed(check_factory("family", Unnormalized, checks=["log_prob_normalization"]), "log_prob_normalization")
    assert result.measured == pytest.approx(np.expm1(0.01), rel=1e-6) and "1.0100" in result.detail
    results = check_factory("family", WrongSampler, checks=["sampling_distribution", "sampling_moments",
                                                            "reparameterization"])
    assert all(r.failed for r in results[1:])
    results = check_factory("family", NoReparameterization, checks=["reparameterization", "grad_log_prob"])
    assert [r.status for r in results[1:]] == ["not applicable", "not applicable"]
    assert "not reparameterizable" in results[1].detail and "no grad_log_prob" in results[2].detail
    # a family whose setting disables the reparameterization (learned degrees of freedom) says so
    result = check_factory("family", MeanFieldStudentT, {"learn_df": True}, checks=["reparameterization"])[-1]
    assert result.status == "not applicable" and "not reparameterizable" in result.detail


# --- models --------------------------------------------------------------------------------


class BatchDependent(Model):
    """log p of each row depends on the batch it is evaluated in (a sum over the wrong axis)."""

    dim = 3

    def log_joint(self, z):
        return -0.5 * np.sum(z * z, axis=1) - 0.01 * np.sum(z[:, 0])


class GradientOffByTwo(Model):
    dim = 4

    def log_joint(self, z):
        return -0.5 * np.sum(z**2, axis=1) + np.sin(z[:, 0])

    def log_joint_and_grad(self, z):
        grad = -z.copy()
        grad[:, 0] += np.cos(z[:, 0])
        return self.log_joint(z), 2.0 * grad


class NaNsAndNames(Model):
    dim = 2

    def log_joint(self, z):
        return np.where(z[:, 0] > 1.0, np.nan, -np.sum(z**2, axis=1))

    def latent_names(self):
        return ["a", "a"]


def test_a_log_joint_whose_batch_and_rows_differ_fails():
    results = check_factory("model", BatchDependent, name="batch_dependent")
    result = failed(results, "batch_consistency")
    assert_names_the_culprit(result, "batch_dependent", "batch_consistency", "largest relative difference")
    assert "log_joint of the batch vs row by row" in result.detail
    assert next(r for r in results if r.check == "gradient_finite_differences").status == "not applicable"


def test_a_model_gradient_off_by_a_factor_fails():
    results = check_factory("model", GradientOffByTwo, name="off_by_two")
    result = failed(results, "gradient_finite_differences")
    assert_names_the_culprit(result, "off_by_two", "gradient_finite_differences", "largest relative error")
    assert result.measured == pytest.approx(1.0, rel=1e-6)  # (2g - g) / g
    assert [r.check for r in results if r.failed] == ["gradient_finite_differences"]


def test_non_finite_values_and_duplicate_names_fail():
    results = check_factory("model", NaNsAndNames)
    assert "not finite at" in failed(results, "finite_values").detail
    assert "duplicate names ['a']" in failed(results, "latent_names").detail


class HalfDeclared(Model):
    """Declares one of the two metrics it evaluates, and the other's spec as a plain string."""

    dim = 2

    def log_joint(self, z):
        return -0.5 * np.sum(z**2, axis=1)

    def evaluate(self, q, rng):
        return {"test_lpd": -1.0, "sharpness": 2.0}

    def metric_specs(self):
        return {"test_lpd": "result"}


def test_a_model_that_declares_its_metrics_in_part_fails():
    detail = failed(check_factory("model", HalfDeclared), "evaluate").detail
    assert "metric_specs()['test_lpd'] is 'result', not a MetricSpec" in detail
    assert "evaluate returns sharpness, which metric_specs() does not declare" in detail
    undeclared = next(r for r in check_factory("model", NaNsAndNames) if r.check == "evaluate")
    assert undeclared.status == "passed", undeclared.message  # declaring nothing is allowed


# --- estimators and optimizers -------------------------------------------------------------


class Inflated(PMCSA):
    """pMCSA with a gradient 10% too large: biased at stationarity."""

    def estimate(self, rng, state, model, q):
        estimate = super().estimate(rng, state, model, q)
        return type(estimate)(1.1 * estimate.grad, estimate.state, estimate.acceptance_rate)


class Baseline(Inflated):
    unbiased_at_stationarity = False


def test_a_biased_scheme_fails_unbiasedness_unless_it_does_not_claim_it():
    result = failed(check_factory("estimator", Inflated, name="inflated"), "unbiased_at_stationarity")
    assert_names_the_culprit(result, "inflated", "unbiased_at_stationarity", "largest |z|")
    assert "4000 replicates started at π" in result.detail
    results = check_factory("estimator", Baseline, checks=["unbiased_at_stationarity"])
    assert results[1].status == "not applicable" and "unbiased_at_stationarity = False" in results[1].detail


class Stalled(SGD):
    """Forgets the stepsize after 10 updates."""

    def step(self, params, grad, state):
        return (params, OptimizerState(state.t + 1)) if state.t >= 10 else super().step(params, grad, state)


class Hidden(SGD):
    def __init__(self):
        super().__init__(lr=0.1)
        self.calls = 0

    def step(self, params, grad, state):
        self.calls += 1
        params -= self.calls * 1e-3 * grad  # in place, and depends on hidden state
        return params, state


def test_optimizers_that_stall_or_hide_state_fail():
    result = failed(check_factory("optimizer", Stalled, name="stalled"), "convergence_quadratic")
    assert_names_the_culprit(result, "stalled", "convergence_quadratic", "‖x_T - c‖ / ‖x_0 - c‖")
    detail = failed(check_factory("optimizer", Hidden, checks=["explicit_state"]), "explicit_state").detail
    assert "in place" in detail and "different updates" in detail


# --- building ------------------------------------------------------------------------------


def test_a_component_that_does_not_build_fails_the_build_check_only():
    def explode(**params):
        raise RuntimeError("kaput")

    (result,) = check_factory("kernel", explode, name="explode")
    assert (result.check, result.status) == ("builds", "failed") and "RuntimeError: kaput" in result.detail
    (result,) = check_factory("optimizer", lambda: object(), name="not_an_optimizer")
    assert "not a mcsa_bench.api.Optimizer" in result.detail
    with pytest.raises(ConfigurationError, match="unknown parameter 'speed'.*allowed: lr"):
        check_component("optimizer", "sgd", {"speed": 1})
    with pytest.raises(ConfigurationError, match="unknown kernel check 'nope'; checks: transition_contract"):
        check_factory("kernel", IMH, checks=["nope"])


def test_estimator_checks_run_with_the_kernel_asked_for():
    results = check_component("estimator", "pmcsa", kernel="cis")
    assert all(r.status == "passed" for r in results)
    with pytest.raises(ConfigurationError, match="exposes normalized weights"):
        check_component("estimator", "msc_rb", kernel="imh")


class HalfDeclaredInfo(IMH):
    """IMH reporting two statistics in its info, of which it declares one, and one of the wrong shape."""

    def step(self, rng, state, target, proposal, n_proposals=1):
        moved = super().step(rng, state, target, proposal, n_proposals)
        return Transition(moved.state, moved.acceptance,
                          info={"moved": moved.acceptance, "undeclared": 1.0, "matrix": np.ones((2, 2))})

    def metric_specs(self):
        return {"moved": MetricSpec("diagnostic"), "matrix": MetricSpec("diagnostic")}


def test_a_kernel_whose_info_is_undeclared_or_misshapen_fails():
    detail = failed(check_factory("kernel", HalfDeclaredInfo), "transition_contract").detail
    assert "info['matrix'] must be a finite number or (64,) array, got shape (2, 2)" in detail
    assert "info reports undeclared, which metric_specs() does not declare" in detail
