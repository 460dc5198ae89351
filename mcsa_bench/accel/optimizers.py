"""Optimizers in JAX, twins of mcsa_bench/builtin/optimizers.py: SGD, Polyak momentum, Nesterov and
Adam, the stepsize schedules γ_t = lr · schedule(t), and Polyak-Ruppert iterate averaging.

Pure functions of (λ, g, state, t) with t the 1-based update count (the iteration), so that the
whole optimization is one scanned program; the formulas are the numpy optimizers' to the operation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin import optimizers as numpy_optimizers


def schedule_factor(numpy_optimizer, n_iters: int):
    """γ_t / lr as a function of a traced t (optimizers.SCHEDULES)."""
    name = numpy_optimizer.schedule
    if name == "constant":
        return lambda t: jnp.ones_like(t)
    if name == "inverse":
        return lambda t: 1.0 / t
    if name == "inverse_sqrt":
        return lambda t: 1.0 / jnp.sqrt(t)
    if name == "cosine":
        return lambda t: 0.5 * (1.0 + jnp.cos(math.pi * jnp.minimum(t - 1.0, n_iters) / n_iters))
    if name == "step":
        factor, every = numpy_optimizer.decay_factor, numpy_optimizer.decay_every
        return lambda t: factor ** jnp.floor((t - 1.0) / every)
    raise ConfigurationError(
        f"schedule {name!r} has no JAX twin; covered: constant, inverse, inverse_sqrt, cosine, step")


class Moments(NamedTuple):
    first: jnp.ndarray  # momentum buffer / Adam's first moment
    second: jnp.ndarray  # Adam's second moment


class Optimizer:
    """λ_t = λ_{t-1} - γ_t · direction(g) for the numpy optimizer's class and settings, run for
    ``n_iters`` updates (the cosine schedule's horizon, the averaging's start)."""

    def __init__(self, numpy_optimizer, n_iters: int):
        kind = type(numpy_optimizer)
        if kind not in (numpy_optimizers.SGD, numpy_optimizers.Momentum, numpy_optimizers.Nesterov,
                        numpy_optimizers.Adam):
            raise ConfigurationError(
                f"optimizer {kind.__name__} has no JAX twin; covered: sgd, momentum, nesterov, adam")
        self.kind = kind.__name__.lower()
        self.lr = numpy_optimizer.lr
        self.settings = numpy_optimizer
        self._factor = schedule_factor(numpy_optimizer, n_iters)
        average_from = numpy_optimizer.average_from
        #: first averaged iteration, ⌈average_from · T⌉ (engine.Settings.average_start), or None
        self.average_start = None if average_from is None else max(1, math.ceil(average_from * n_iters))

    def init(self, params) -> Moments:
        return Moments(jnp.zeros_like(params), jnp.zeros_like(params))

    def step(self, params, grad, state: Moments, t):
        step_t = jnp.asarray(t, params.dtype)
        gamma = self.lr * self._factor(step_t)
        s = self.settings
        if self.kind == "sgd":
            return params - gamma * grad, state
        if self.kind in ("momentum", "nesterov"):
            velocity = s.momentum * state.first + grad
            direction = velocity if self.kind == "momentum" else grad + s.momentum * velocity
            return params - gamma * direction, Moments(velocity, state.second)
        first = s.beta1 * state.first + (1.0 - s.beta1) * grad
        second = s.beta2 * state.second + (1.0 - s.beta2) * grad * grad
        # γ m̂/(√v̂ + ε) written as γ √c2/c1 · m/(√v + ε √c2), c_i = 1 - β_i^t (as the numpy Adam)
        root_c2 = jnp.sqrt(1.0 - s.beta2**step_t)
        step = first / (jnp.sqrt(second) + s.eps * root_c2) * (gamma * root_c2 / (1.0 - s.beta1**step_t))
        return params - step, Moments(first, second)


class Average(NamedTuple):
    """Running mean of λ_t over t >= the optimizer's average_start (engine.IterateAverage)."""

    mean: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def empty(cls, params) -> Average:
        return cls(jnp.zeros_like(params), jnp.zeros((), params.dtype))

    def add(self, params, active) -> Average:
        count = self.count + active
        mean = jnp.where(active, self.mean + (params - self.mean) / jnp.maximum(count, 1.0), self.mean)
        return Average(mean, count)

    def evaluated(self, params):
        """The averaged iterate once averaging has begun, else λ."""
        return jnp.where(self.count > 0, self.mean, params)
