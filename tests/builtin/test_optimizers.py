"""Optimizers: updates against hand-computed formulas, convergence on a quadratic, stepsize schedules
against their closed forms, and the validation of every setting."""

import math

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")


def build(name, **params):
    return get_registry().build("optimizer", name, **params)


def take_steps(optimizer, params, grads):
    state = optimizer.init(params)
    for grad in grads:
        params, state = optimizer.step(params, grad, state)
    return params


G1, G2 = np.array([1.0, -2.0]), np.array([0.5, 4.0])
X0 = np.array([0.3, -0.1])


def test_sgd_update():
    np.testing.assert_allclose(take_steps(build("sgd", lr=0.1), X0, [G1, G2]), X0 - 0.1 * G1 - 0.1 * G2)


def test_momentum_update():
    v1 = G1
    v2 = 0.9 * v1 + G2
    np.testing.assert_allclose(take_steps(build("momentum", lr=0.1), X0, [G1, G2]), X0 - 0.1 * v1 - 0.1 * v2)


def test_nesterov_update():
    v1 = G1
    v2 = 0.5 * v1 + G2
    expected = X0 - 0.1 * (G1 + 0.5 * v1) - 0.1 * (G2 + 0.5 * v2)
    np.testing.assert_allclose(take_steps(build("nesterov", lr=0.1, momentum=0.5), X0, [G1, G2]), expected)


def test_adam_update():
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.01
    m1, v1 = (1 - b1) * G1, (1 - b2) * G1**2
    x1 = X0 - lr * (m1 / (1 - b1)) / (np.sqrt(v1 / (1 - b2)) + eps)
    m2, v2 = b1 * m1 + (1 - b1) * G2, b2 * v1 + (1 - b2) * G2**2
    x2 = x1 - lr * (m2 / (1 - b1**2)) / (np.sqrt(v2 / (1 - b2**2)) + eps)
    np.testing.assert_allclose(take_steps(build("adam", lr=lr), X0, [G1, G2]), x2, rtol=1e-12)
    # the first Adam step has length lr in every coordinate
    np.testing.assert_allclose(np.abs(x1 - X0), lr, rtol=1e-6)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_descends_to_the_minimum_of_a_quadratic(name):
    target = np.array([1.0, -3.0, 0.5])
    optimizer = build(name, lr=0.01)
    params, state = np.zeros(3), optimizer.init(np.zeros(3))
    for _ in range(3000):
        params, state = optimizer.step(params, params - target, state)  # ∇ ½‖x - c‖²
    np.testing.assert_allclose(params, target, atol=0.02)


@pytest.mark.parametrize("schedule,expected", [("constant", [0.1, 0.1, 0.1]), ("inverse", [0.1, 0.05, 0.1 / 3]),
                                               ("inverse_sqrt", [0.1, 0.1 / np.sqrt(2), 0.1 / np.sqrt(3)])])
def test_stepsize_schedules(schedule, expected):
    optimizer = build("sgd", lr=0.1, schedule=schedule)
    np.testing.assert_allclose([optimizer.stepsize(t) for t in (1, 2, 3)], expected)
    np.testing.assert_allclose(take_steps(optimizer, np.zeros(1), [np.ones(1)] * 3), [-sum(expected)])


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("lr", [0.0, -0.1, float("nan")])
def test_non_positive_stepsize_is_rejected(name, lr):
    with pytest.raises(ConfigurationError, match="positive"):
        build(name, lr=lr)


def test_other_bad_parameters_name_the_allowed_values():
    with pytest.raises(ConfigurationError, match="constant, inverse, inverse_sqrt, cosine, step"):
        build("adam", schedule="linear")
    with pytest.raises(ConfigurationError, match=r"momentum must lie in \[0, 1\)"):
        build("momentum", momentum=1.5)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_cosine_schedule_follows_its_closed_form_over_the_horizon(name):
    horizon = 8
    optimizer = build(name, lr=0.2, schedule="cosine")
    optimizer.set_horizon(horizon)
    # math.cos, the schedule's own: np.cos may differ from it by an ulp of |cos|, which 1 + cos amplifies
    # |cos|/(1 + cos) = 12-fold at t = 8 (1.5e-15 relative), beyond the 1e-15 the products' roundings need
    expected = [0.2 * 0.5 * (1 + math.cos(math.pi * (t - 1) / horizon)) for t in range(1, horizon + 1)]
    np.testing.assert_allclose([optimizer.stepsize(t) for t in range(1, horizon + 1)], expected, rtol=1e-15)
    assert optimizer.stepsize(1) == 0.2 and 0 < optimizer.stepsize(horizon) < 0.2 * 0.04
    if name == "sgd":
        np.testing.assert_allclose(take_steps(optimizer, np.zeros(1), [np.ones(1)] * horizon), [-sum(expected)])


def test_cosine_schedule_needs_the_horizon():
    optimizer = build("adam", schedule="cosine")
    with pytest.raises(ConfigurationError, match=r"needs the number of iterations: call set_horizon"):
        optimizer.stepsize(1)


@pytest.mark.parametrize("decay_every,decay_factor", [(1, 0.5), (3, 0.1), (4, 0.9)])
def test_step_decay_follows_its_closed_form(decay_every, decay_factor):
    optimizer = build("sgd", lr=0.3, schedule="step", decay_every=decay_every, decay_factor=decay_factor)
    ts = np.arange(1, 13)
    expected = 0.3 * decay_factor ** ((ts - 1) // decay_every)
    np.testing.assert_allclose([optimizer.stepsize(int(t)) for t in ts], expected, rtol=1e-15)
    np.testing.assert_allclose(take_steps(optimizer, np.zeros(1), [np.ones(1)] * 12), [-expected.sum()])


@pytest.mark.parametrize("params,match", [
    ({"schedule": "step"}, r"schedule=step needs decay_every, an integer >= 1"),
    ({"schedule": "step", "decay_every": 0}, "decay_every, an integer >= 1"),
    ({"schedule": "step", "decay_every": 2.5}, "decay_every, an integer >= 1"),
    ({"schedule": "step", "decay_every": 10, "decay_factor": 1.0}, r"decay_factor must lie in \(0, 1\)"),
    ({"schedule": "step", "decay_every": 10, "decay_factor": 0.0}, r"decay_factor must lie in \(0, 1\)"),
    ({"schedule": "cosine", "decay_every": 10}, "decay_every applies only to schedule=step"),
    ({"average_from": 1.0}, r"average_from must lie in \(0, 1\), or be null"),
    ({"average_from": 0.0}, r"average_from must lie in \(0, 1\)"),
])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_bad_schedule_and_averaging_settings_are_clear_errors(name, params, match):
    with pytest.raises(ConfigurationError, match=match):
        build(name, **params)


def test_averaging_is_off_by_default_and_a_fraction_when_set():
    assert all(build(name).average_from is None for name in OPTIMIZERS)
    assert build("adam", average_from=0.5).average_from == 0.5
