"""Optimizer checks: explicit state (no hidden mutation) and convergence on a quadratic."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcsa_bench.api import Optimizer
from mcsa_bench.testing.results import Measurement

MakeOptimizer = Callable[[], Optimizer]
CURVATURE = np.array([1.0, 2.0, 0.5])  # f(x) = ½ Σ a_i (x_i - c_i)²: condition number 4
MINIMUM = np.array([1.0, -3.0, 0.5])
ITERATIONS = 5000
CONVERGENCE_TOL = 0.02  # ‖x_T - c‖ / ‖x_0 - c‖ after ITERATIONS exact-gradient steps from x_0 = 0


def check_convergence_quadratic(make_optimizer: MakeOptimizer) -> Measurement:
    optimizer = make_optimizer()
    params = np.zeros(3)
    state = optimizer.init(params)
    for _ in range(ITERATIONS):
        params, state = optimizer.step(params, CURVATURE * (params - MINIMUM), state)
    ratio = float(np.linalg.norm(params - MINIMUM) / np.linalg.norm(MINIMUM))
    detail = (f"{ITERATIONS} exact-gradient steps from x_0 = 0 on a quadratic with curvatures "
              f"{CURVATURE.tolist()}: x_T = {np.round(params, 4).tolist()}, c = {MINIMUM.tolist()}")
    return Measurement(ratio, CONVERGENCE_TOL, detail, "‖x_T - c‖ / ‖x_0 - c‖")


def check_explicit_state(make_optimizer: MakeOptimizer) -> Measurement:
    optimizer = make_optimizer()
    rng = np.random.default_rng(0)
    params = rng.standard_normal(3)
    state = optimizer.init(params)
    for _ in range(3):  # reach a state with non-trivial buffers
        params, state = optimizer.step(params, rng.standard_normal(3), state)
    grad = rng.standard_normal(3)
    arguments = params.copy(), grad.copy()
    first = np.array(optimizer.step(*arguments, state)[0], copy=True)
    second = np.array(optimizer.step(params.copy(), grad.copy(), state)[0], copy=True)
    problems = []
    if not (np.array_equal(arguments[0], params) and np.array_equal(arguments[1], grad)):
        problems.append("step modified its params or grad argument in place")
    difference = float(np.max(np.abs(first - second)))
    if difference != 0.0:
        problems.append(f"the same (params, grad, state) gave different updates (max difference {difference:.3g}): "
                        "state is mutated or hidden")
    return Measurement.problems(problems, "repeating a step from the same state gives the same update")


CHECKS = {
    "explicit_state": check_explicit_state,
    "convergence_quadratic": check_convergence_quadratic,
}
