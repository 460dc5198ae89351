"""Optimizers in JAX: the twin contract (:class:`Optimizer`), the built-ins' twin (:class:`Scheduled`: SGD,
Polyak momentum, Nesterov and Adam of mcsa_bench/builtin/optimizers.py with their stepsize schedules
γ_t = lr · schedule(t), computed by the numpy optimizer), and Polyak-Ruppert iterate averaging
(:class:`Average`), for every optimizer.

Pure functions of (λ, g, state, t) with t the 1-based update count (the iteration), so that the
whole optimization is one scanned program; the formulas are the numpy optimizers' to the operation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin import optimizers as numpy_optimizers


class Moments(NamedTuple):
    first: jnp.ndarray  # momentum buffer / Adam's first moment
    second: jnp.ndarray  # Adam's second moment


class Optimizer:
    """The twin contract of an optimizer (docs/plugins.md, "A JAX twin"): built from the numpy optimizer
    and T (``n_iters``), pure functions of (λ, g, state, t) with t the 1-based update count (the
    iteration), so that the whole optimization is one scanned program. ``init(λ)`` gives the state (a
    pytree of arrays); ``step(λ, g, state, t)`` -> (λ, state). ``average_start``: the first averaged
    iteration ⌈average_from · T⌉ of the numpy optimizer's ``average_from`` (engine.IterateAverage), or None.
    ``traced``: the names of numeric attributes that become the compiled programs' arguments
    (accel/programs.py), so configurations that differ only in them share one program."""

    traced: tuple[str, ...] = ()

    def __init__(self, numpy_optimizer, n_iters: int):
        self.n_iters = n_iters
        average_from = getattr(numpy_optimizer, "average_from", None)
        self.average_start = None if average_from is None else max(1, math.ceil(average_from * n_iters))

    def init(self, params):
        return ()

    def step(self, params, grad, state, t):
        raise NotImplementedError


class Scheduled(Optimizer):
    """The built-ins' twin: λ_t = λ_{t-1} - γ_t · direction(g) for the numpy optimizer's class and settings.

    The schedule is written once, in the numpy optimizer: γ_1, ..., γ_T are its own ``stepsize(t)``,
    computed on the host and handed to the programs as one array (``stepsizes``), so that every schedule
    gives both backends the same floating-point numbers and a sweep over learning rates or schedules shares
    one program. The numeric settings in ``traced`` are the programs' arguments; the class, T and the
    averaging's start shape the program. Values the numpy optimizer computes in Python (1 - β) are taken as
    computed there, for the same reason."""

    traced = ("stepsizes", "momentum", "beta1", "beta2", "one_minus_beta1", "one_minus_beta2", "eps")

    def __init__(self, numpy_optimizer, n_iters: int):
        super().__init__(numpy_optimizer, n_iters)
        kind = type(numpy_optimizer)
        if kind not in (numpy_optimizers.SGD, numpy_optimizers.Momentum, numpy_optimizers.Nesterov,
                        numpy_optimizers.Adam):
            raise ConfigurationError(
                f"optimizer {kind.__name__} has no JAX twin; covered: sgd, momentum, nesterov, adam")
        self.kind = kind.__name__.lower()
        numpy_optimizer.set_horizon(n_iters)  # as the numpy engine does before its first update
        self.stepsizes = np.array([numpy_optimizer.stepsize(t) for t in range(1, n_iters + 1)])
        self.momentum = getattr(numpy_optimizer, "momentum", None)
        self.beta1, self.beta2 = getattr(numpy_optimizer, "beta1", None), getattr(numpy_optimizer, "beta2", None)
        adam = self.kind == "adam"
        self.one_minus_beta1 = 1.0 - self.beta1 if adam else None
        self.one_minus_beta2 = 1.0 - self.beta2 if adam else None
        self.eps = getattr(numpy_optimizer, "eps", None)

    def init(self, params) -> Moments:
        return Moments(jnp.zeros_like(params), jnp.zeros_like(params))

    def step(self, params, grad, state: Moments, t):
        step_t = jnp.asarray(t, params.dtype)
        gamma = self.stepsizes[jnp.asarray(t, jnp.int32) - 1]
        if self.kind == "sgd":
            return params - gamma * grad, state
        if self.kind in ("momentum", "nesterov"):
            velocity = self.momentum * state.first + grad
            direction = velocity if self.kind == "momentum" else grad + self.momentum * velocity
            return params - gamma * direction, Moments(velocity, state.second)
        first = self.beta1 * state.first + self.one_minus_beta1 * grad
        second = self.beta2 * state.second + self.one_minus_beta2 * grad * grad
        # γ m̂/(√v̂ + ε) written as γ √c2/c1 · m/(√v + ε √c2), c_i = 1 - β_i^t (as the numpy Adam)
        root_c2 = jnp.sqrt(1.0 - self.beta2**step_t)
        step = first / (jnp.sqrt(second) + self.eps * root_c2) * (gamma * root_c2 / (1.0 - self.beta1**step_t))
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
