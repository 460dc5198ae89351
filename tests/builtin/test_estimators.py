"""The MCSA schemes: budget semantics (Table 2), unbiasedness at stationarity (Prop. 1), and the
gradient-variance scaling of the papers (Theorems 1 and 4) against closed forms for a Gaussian target."""

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation, ConfigurationError, Kernel, MetricSpec, Model, Transition, declared_metrics
from mcsa_bench.assembly import assemble
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.testing import (
    Z_LIMIT,
    check_component,
    exact_score_variance,
    poor_proposal,
    replicate_gradients,
    unbiasedness_measurement,
)
from tests.support import exact_inclusive_kl_gradient


def build_estimator(name, n_samples, kernel=None):
    registry = get_registry()
    kernel = registry.build("kernel", kernel or registry.get("estimator", name).factory.default_kernel)
    return registry.build("estimator", name, kernel=kernel, n_samples=n_samples)


@pytest.fixture(scope="module")
def target():
    return get_registry().build("model", "gaussian", dim=5, nu=5.0, seed=11)


@pytest.fixture(scope="module")
def poor_q(target):
    """A narrow, off-centre q: large importance weights w* = sup π/q."""
    return poor_proposal(target)


def total_variance(grads):
    """(tr Cov estimate, its standard error) from replicate gradients."""
    squared = np.sum((grads - grads.mean(axis=0)) ** 2, axis=1) * len(grads) / (len(grads) - 1)
    return squared.mean(), squared.std(ddof=1) / np.sqrt(len(grads))


# --- budget semantics ----------------------------------------------------------------------


class CountingTarget(Model):
    def __init__(self, inner):
        self.inner, self.dim = inner, inner.dim
        self.calls = self.rows = 0

    def log_joint(self, z):
        self.calls += 1
        self.rows += len(z)
        return self.inner.log_joint(z)


class CountingFamily(MeanFieldGaussian):
    log_q_rows = score_rows = 0

    def log_prob(self, params, z):
        self.log_q_rows += len(z)
        return super().log_prob(params, z)

    def sample_with_log_prob(self, params, rng, n):
        self.log_q_rows += n
        return super().sample_with_log_prob(params, rng, n)

    def score(self, params, z):
        self.score_rows += len(z)
        return super().score(params, z)


@pytest.mark.parametrize(
    "scheme,kernel,log_p,log_q,scores",
    [  # Table 2 of the NeurIPS paper, per iteration, for budget N
        ("msc", None, lambda n: n - 1, lambda n: n, lambda n: 1),
        ("msc_rb", None, lambda n: n - 1, lambda n: n, lambda n: n),
        ("jsa", None, lambda n: n, lambda n: n + 1, lambda n: n),
        ("jsa", "cis", lambda n: n, lambda n: n + 1, lambda n: n),  # CIS's sequential steps are batched too
        ("pmcsa", None, lambda n: n, lambda n: 2 * n, lambda n: n),
    ],
)
@pytest.mark.parametrize("n", [2, 10])
def test_each_iteration_costs_what_table_2_says(target, scheme, kernel, log_p, log_q, scores, n):
    estimator = build_estimator(scheme, n, kernel)
    counting_target, family = CountingTarget(target), CountingFamily(target.dim)
    q = Approximation(family, family.init_params())
    rng = np.random.default_rng(0)
    state = estimator.init(rng, counting_target, q)
    counting_target.calls = counting_target.rows = family.log_q_rows = family.score_rows = 0
    iterations = 3
    for _ in range(iterations):
        state = estimator.estimate(rng, state, counting_target, q).state
    assert counting_target.calls == iterations, "one batched log-density call per iteration"
    assert counting_target.rows == iterations * log_p(n)
    assert family.log_q_rows == iterations * log_q(n)
    assert family.score_rows == iterations * scores(n)


# --- unbiasedness at stationarity (tests/testing/test_conformance.py checks every scheme with its default kernel)


def test_the_unbiasedness_check_detects_chains_that_are_not_stationary(target, poor_q):
    grads = replicate_gradients(build_estimator("pmcsa", 4), target, poor_q, replicates=4000, seed=1, start="q")
    assert not unbiasedness_measurement(grads, exact_inclusive_kl_gradient(target, poor_q)).passed


def test_exact_gradient_formula_matches_finite_differences_of_the_exact_kl(target, poor_q):
    def kl(params):
        mean, cov = poor_q.family.moments(params).gaussian_moments()
        return target.evaluate(Approximation(poor_q.family, params), None)["kl_inclusive"]

    step = 1e-6
    numeric = [
        (kl(poor_q.params + step * e) - kl(poor_q.params - step * e)) / (2 * step) for e in np.eye(len(poor_q.params))
    ]
    np.testing.assert_allclose(exact_inclusive_kl_gradient(target, poor_q), numeric, rtol=1e-6, atol=1e-7)


# --- gradient variance versus N ------------------------------------------------------------

BUDGETS = (2, 8, 32)


@pytest.fixture(scope="module")
def variances(target, poor_q):
    return {
        (scheme, n): total_variance(replicate_gradients(build_estimator(scheme, n), target, poor_q, 3000, seed=n))
        for scheme in ("pmcsa", "msc", "jsa")
        for n in BUDGETS
    }


def test_pmcsa_variance_falls_like_one_over_n(target, poor_q, variances):
    score_variance = exact_score_variance(target, poor_q)
    for n in BUDGETS:
        estimate, standard_error = variances["pmcsa", n]
        assert abs(estimate - score_variance / n) < Z_LIMIT * standard_error, (n, estimate, score_variance / n)


def test_msc_variance_does_not_fall_with_n(target, poor_q, variances):
    score_variance = exact_score_variance(target, poor_q)
    for n in BUDGETS:
        estimate, standard_error = variances["msc", n]
        assert abs(estimate - score_variance) < Z_LIMIT * standard_error, (n, estimate, score_variance)


def test_jsa_variance_reduction_is_limited_under_a_poor_q(target, poor_q, variances):
    # Theorem 3: with a large w*, sequential states are correlated and the 1/N rate is lost.
    score_variance = exact_score_variance(target, poor_q)
    estimate, standard_error = variances["jsa", 32]
    assert estimate - Z_LIMIT * standard_error > 4 * score_variance / 32


# --- pairing and budget errors -------------------------------------------------------------


def test_msc_rb_with_a_kernel_without_weights_is_a_clear_error():
    with pytest.raises(
        ConfigurationError,
        match=r"estimator 'msc_rb' needs a kernel that exposes normalized weights.*Kernels that fit: cis",
    ):
        assemble(get_registry(), model="gaussian", estimator="msc_rb", kernel="imh", n_samples=10)
    with pytest.raises(ConfigurationError, match="exposes normalized weights"):
        build_estimator("msc_rb", 10, kernel="imh")


@pytest.mark.parametrize("scheme,minimum", [("msc", 2), ("msc_rb", 2), ("jsa", 1), ("pmcsa", 1)])
def test_budget_below_the_scheme_minimum_is_rejected(scheme, minimum):
    with pytest.raises(ConfigurationError, match=f"n_samples >= {minimum}"):
        build_estimator(scheme, minimum - 1)
    assert build_estimator(scheme, minimum).n_samples == minimum


@pytest.mark.parametrize("scheme,kernel", [("msc", "imh"), ("jsa", "cis"), ("pmcsa", "cis")])
def test_schemes_accept_other_compatible_kernels(scheme, kernel):
    (built, unbiased) = check_component("estimator", scheme, kernel=kernel, checks=["unbiased_at_stationarity"])
    assert built.status == unbiased.status == "passed", unbiased.message


# --- diagnostics -----------------------------------------------------------------------------


@pytest.mark.parametrize("scheme,kernel,n_chains", [("msc", "cis", 1), ("msc_rb", "cis", 1), ("pmcsa", "cis", 4)])
def test_schemes_with_cis_report_the_ess_of_its_weights(target, poor_q, scheme, kernel, n_chains):
    estimator = build_estimator(scheme, 4, kernel=kernel)
    state = estimator.kernel.init(target, target.sample(np.random.default_rng(0), n_chains))
    estimate = estimator.estimate(np.random.default_rng(1), state, target, poor_q)
    # the same transition again, from the same random stream
    n_proposals = 3 if scheme != "pmcsa" else 1
    weights = estimator.kernel.step(np.random.default_rng(1), state, target, poor_q, n_proposals).weights
    assert estimate.metrics["cis_ess"] == pytest.approx(np.mean(1.0 / np.sum(weights**2, axis=1)), rel=1e-12)
    assert 1.0 <= estimate.metrics["cis_ess"] <= n_proposals + 1


def test_cis_ess_counts_slots_from_one_to_all():
    from mcsa_bench.builtin.kernels import effective_sample_size

    np.testing.assert_allclose(effective_sample_size(np.array([[1.0, 0, 0, 0], [0.25] * 4, [0.5, 0.5, 0, 0]])),
                               [1.0, 4.0, 2.0])


@pytest.mark.parametrize("scheme", ["jsa", "pmcsa"])
def test_schemes_with_imh_report_no_weight_diagnostic(target, poor_q, scheme):
    estimator = build_estimator(scheme, 4)
    state = estimator.init(np.random.default_rng(0), target, poor_q)
    assert estimator.estimate(np.random.default_rng(1), state, target, poor_q).metrics == {}


# --- a kernel's own diagnostics (Transition.info) and the metrics' declarations ------------------


class Counting(Kernel):
    """Stays put; reports its number of transitions so far (a number) and each chain's index (an array)."""

    def __init__(self):
        self.calls = 0

    def step(self, rng, state, target, proposal, n_proposals=1):
        self.calls += 1
        return Transition(state, np.zeros(state.num_chains),
                          info={"calls": float(self.calls), "chain": np.arange(state.num_chains, dtype=float)})


class PlainSteps(Counting):
    """A kernel of the old shape: its own ``steps`` returns a plain 3-tuple, without info."""

    def steps(self, rng, state, target, proposal, n_steps):
        return np.repeat(state.z[None], n_steps, axis=0), state, np.zeros((n_steps, state.num_chains))


@pytest.mark.parametrize("scheme,n_samples,expected", [
    ("pmcsa", 4, {"calls": 1.0, "chain": 1.5}),  # one transition of chains 0..3
    ("msc", 4, {"calls": 1.0, "chain": 0.0}),
    ("jsa", 5, {"calls": 3.0, "chain": 0.0}),  # the generic steps: transitions 1..5 of chain 0
])
def test_a_kernels_info_is_logged_as_its_mean_over_chains_and_steps(target, scheme, n_samples, expected):
    estimator = get_registry().build("estimator", scheme, kernel=Counting(), n_samples=n_samples)
    q = Approximation(MeanFieldGaussian(target.dim), MeanFieldGaussian(target.dim).init_params())
    state = estimator.init(np.random.default_rng(0), target, q)
    assert estimator.estimate(np.random.default_rng(1), state, target, q).metrics == expected


def test_generic_steps_stack_each_info_entry_and_a_plain_tuple_has_none(target):
    q = Approximation(MeanFieldGaussian(target.dim), MeanFieldGaussian(target.dim).init_params())
    kernel = Counting()
    state = kernel.init(target, np.zeros((2, target.dim)))
    steps = kernel.steps(np.random.default_rng(0), state, target, q, 3)
    np.testing.assert_array_equal(steps.info["calls"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(steps.info["chain"], [[0.0, 1.0]] * 3)
    estimator = get_registry().build("estimator", "jsa", kernel=PlainSteps(), n_samples=3)
    assert estimator.estimate(np.random.default_rng(1), estimator.init(np.random.default_rng(0), target, q),
                              target, q).metrics == {}


def test_metric_specs_accept_the_documented_kinds_and_directions_only():
    assert MetricSpec("result", "higher", "test LPD", "nats") == MetricSpec("result", "higher", "test LPD", "nats")
    with pytest.raises(ConfigurationError, match="metric kind must be one of result, diagnostic; got 'score'"):
        MetricSpec("score")
    with pytest.raises(ConfigurationError, match="direction must be 'higher', 'lower' or None; got 'up'"):
        MetricSpec("diagnostic", "up")


def test_the_declarations_of_a_runs_components_are_merged_and_a_conflict_is_an_error():
    parts = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="rws", n_samples=4)
    specs = parts.metric_specs()
    assert specs["divergences"] == MetricSpec("diagnostic", "lower", "divergent HMC transitions")
    assert specs["kl_inclusive"].kind == "result" and specs["kl_inclusive"].direction == "lower"
    snis = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="snis", n_samples=4)
    assert snis.kernel is None and snis.metric_specs()["snis_ess"].kind == "diagnostic"

    class Claims(Counting):
        def metric_specs(self):
            return {"kl_inclusive": MetricSpec("diagnostic")}

    with pytest.raises(ConfigurationError, match="metric 'kl_inclusive' is declared as .* by Claims"):
        declared_metrics(parts.model, Claims())


def test_a_kernel_that_reports_divergences_the_old_way_is_still_logged(target):
    # docs/plugins.md promised Transition(..., divergent=...) before kernels had info
    class OldStyle(Counting):
        def step(self, rng, state, target, proposal, n_proposals=1):
            return Transition(state, np.zeros(state.num_chains), divergent=np.arange(state.num_chains) < 1)

    estimator = get_registry().build("estimator", "pmcsa", kernel=OldStyle(), n_samples=4)
    q = Approximation(MeanFieldGaussian(target.dim), MeanFieldGaussian(target.dim).init_params())
    state = estimator.init(np.random.default_rng(0), target, q)
    assert estimator.estimate(np.random.default_rng(1), state, target, q).metrics == {"divergences": 0.25}
