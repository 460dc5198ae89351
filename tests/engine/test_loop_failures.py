"""Non-finite values end a run with an error naming the iteration and the quantity, and carry the
run so far: a NaN or +inf log density in every scheme, a non-finite gradient, λ or optimizer state.
-inf stays a legitimate zero density."""

from dataclasses import replace

import numpy as np
import pytest

from mcsa_bench import get_registry, run
from mcsa_bench.api import DivergenceError, Model, NonFiniteError
from mcsa_bench.builtin.optimizers import SGD
from mcsa_bench.engine import CheckedModel
from tests.builtin.test_estimators import build_estimator

SCHEMES = ("msc", "msc_rb", "jsa", "pmcsa")


class FailingModel(Model):
    """The wrapped target, except that from call ``fail_after + 1`` on the last point of every batch
    gets ``value``. Every scheme makes one call at initialization and one per iteration (Table 2),
    so call k + 1 belongs to iteration k."""

    def __init__(self, inner: Model, fail_after: int, value: float):
        self.inner, self.dim = inner, inner.dim
        self.fail_after, self.value, self.calls = fail_after, value, 0

    def log_joint(self, z):
        self.calls += 1
        log_p = self.inner.log_joint(z)
        if self.calls > self.fail_after:
            log_p[-1] = self.value
        return log_p

    def evaluate(self, q, rng):
        return self.inner.evaluate(q, rng)


@pytest.fixture(scope="module")
def target():
    return get_registry().build("model", "gaussian", dim=3, seed=1)


def short_run(model, scheme, n_iters=20, callbacks=(), optimizer=None, estimator=None):
    registry = get_registry()
    return run(model, registry.build("family", "meanfield_gaussian", dim=model.dim),
               estimator or build_estimator(scheme, 4), optimizer or registry.build("optimizer", "adam"),
               n_iters=n_iters, seed=0, eval_every=5, callbacks=callbacks)


@pytest.mark.parametrize("value,name", [(np.nan, "NaN"), (np.inf, r"\+inf")])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_bad_log_density_fails_every_scheme_naming_the_iteration(target, scheme, value, name):
    k = 12
    iterates = {}
    healthy = short_run(target, scheme, callbacks=[lambda s: iterates.setdefault(s.iteration, s.iterate)])
    with pytest.raises(
        NonFiniteError, match=rf"log density returned {name} for 1 of \d+ points at iteration {k} "
    ) as failure:
        short_run(FailingModel(target, fail_after=k, value=value), scheme)
    error = failure.value
    assert (error.iteration, error.quantity) == (k, "log density")
    # the run so far: the evaluations before iteration k and the last finite λ, λ_{k-1}
    partial = error.partial
    assert [row["iteration"] for row in partial.history] == [0, 5, 10]
    assert partial.history == [{**row, "wall_time": partial.history[i]["wall_time"]}
                               for i, row in enumerate(healthy.history[:3])]
    healthy_at = run_iterates(target, scheme, k - 1)
    assert np.array_equal(partial.iterate, healthy_at) and np.array_equal(partial.params, healthy_at)


def run_iterates(target, scheme, t):
    """λ_t of the healthy run."""
    seen = {}
    registry = get_registry()
    run(target, registry.build("family", "meanfield_gaussian", dim=target.dim), build_estimator(scheme, 4),
        registry.build("optimizer", "adam"), n_iters=t, seed=0, eval_every=t,
        callbacks=[lambda s: seen.__setitem__(s.iteration, s.iterate)])
    return seen[t]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_minus_infinity_is_a_legitimate_zero_density(target, scheme):
    # a chain may even start at a zero density (its 0/0 weight ratios count as rejections)
    with np.errstate(invalid="ignore"):
        result = short_run(FailingModel(target, fail_after=0, value=-np.inf), scheme, n_iters=30)
    assert np.all(np.isfinite(result.params)) and result.history[-1]["iteration"] == 30


def test_a_bad_log_density_while_initializing_is_iteration_0(target):
    with pytest.raises(NonFiniteError, match="at iteration 0 ") as failure:
        short_run(FailingModel(target, fail_after=0, value=np.nan), "pmcsa")
    assert failure.value.partial.history == [] and failure.value.partial.state is None


class BrokenSGD(SGD):
    """SGD that puts ``value`` into λ (or its state) at update ``at``."""

    def __init__(self, at, into):
        super().__init__(lr=0.01)
        self.at, self.into = at, into

    def init(self, params):
        return (0, np.zeros(1))

    def step(self, params, grad, state):
        t = state[0] + 1
        params = params - 0.01 * grad
        if t == self.at and self.into == "parameters":
            params[0] = np.inf
        return params, (t, np.full(1, np.nan) if t >= self.at and self.into == "optimizer state" else state[1])


def test_a_non_finite_parameter_is_a_divergence_at_its_iteration(target):
    with pytest.raises(
        DivergenceError, match=r"non-finite variational parameters λ at iteration 7 \(optimizer BrokenSGD\)"
    ) as failure:
        short_run(target, "msc", optimizer=BrokenSGD(7, "parameters"))
    assert failure.value.quantity == "parameters"
    assert np.all(np.isfinite(failure.value.partial.iterate))


def test_a_non_finite_optimizer_state_is_caught_at_the_next_evaluation(target):
    with pytest.raises(DivergenceError, match="non-finite optimizer state at iteration 10") as failure:
        short_run(target, "jsa", optimizer=BrokenSGD(7, "optimizer state"))
    assert [row["iteration"] for row in failure.value.partial.history] == [0, 5]


def test_a_non_finite_gradient_is_a_divergence_at_its_iteration(target):
    inner = build_estimator("pmcsa", 4)

    class NaNAtNine(type(inner)):
        calls = 0

        def estimate(self, rng, state, model, q):
            estimate = super().estimate(rng, state, model, q)
            self.calls += 1
            return replace(estimate, grad=estimate.grad * np.nan) if self.calls == 9 else estimate

    with pytest.raises(DivergenceError, match="non-finite gradient at iteration 9 .estimator NaNAtNine."):
        short_run(target, "pmcsa", estimator=NaNAtNine(inner.kernel, 4))


class GradientModel(Model):
    dim = 2

    def __init__(self, log_p, grad):
        self.log_p, self.grad = np.array(log_p), np.array(grad)

    def log_joint(self, z):
        return self.log_p

    def log_joint_and_grad(self, z):
        return self.log_p, self.grad


def test_a_non_finite_gradient_of_the_log_density_is_caught_where_the_density_is_positive():
    checked = CheckedModel(GradientModel([0.0, -np.inf], [[1.0, 2.0], [np.nan, np.nan]]))
    checked.log_joint_and_grad(np.zeros((2, 2)))  # NaN gradient at a zero density: fine
    checked = CheckedModel(GradientModel([0.0, -1.0], [[1.0, 2.0], [np.nan, 0.0]]))
    checked.iteration = 4
    with pytest.raises(
        NonFiniteError, match="gradient of the log density is non-finite for 1 of 2 points at iteration 4"
    ):
        checked.log_joint_and_grad(np.zeros((2, 2)))
    assert checked.has_gradient and checked.dim == 2  # the rest is the wrapped model's
