"""Built-in optimizers (NeurIPS paper §6.2, Fig. 2): SGD, Polyak momentum, Nesterov, Adam.

All descend: λ_t = λ_{t-1} - γ_t · direction(g), t = 1..T. The stepsize γ_t = lr · schedule(t):

- ``constant`` (default): lr;
- ``inverse``: lr/t and ``inverse_sqrt``: lr/√t, the Robbins-Monro-type schedules of Table 1;
- ``cosine``: lr · ½(1 + cos(π (t-1)/T)), from lr at t = 1 towards 0 at the end of the run; T is the
  run's number of iterations, which the engine passes through :meth:`Optimizer.set_horizon`;
- ``step``: lr · decay_factor^⌊(t-1)/decay_every⌋, e.g. halved every ``decay_every`` updates.

Every optimizer also takes ``average_from`` (None: off): Polyak-Ruppert averaging of the iterates
from iteration ⌈average_from · T⌉ on, done by the engine (see ``Optimizer.average_from``).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Optimizer
from mcsa_bench.hookspecs import hookimpl

# name -> the factor γ_t / lr of the t-th update (t >= 1), given the optimizer (for its settings)
SCHEDULES = {
    "constant": lambda t, opt: 1.0,
    "inverse": lambda t, opt: 1.0 / t,
    "inverse_sqrt": lambda t, opt: 1.0 / math.sqrt(t),
    "cosine": lambda t, opt: 0.5 * (1.0 + math.cos(math.pi * min(t - 1, opt.horizon) / opt.horizon)),
    "step": lambda t, opt: opt.decay_factor ** ((t - 1) // opt.decay_every),
}
Schedule = Literal["constant", "inverse", "inverse_sqrt", "cosine", "step"]  # run --help lists them


class OptimizerState(NamedTuple):
    t: int  # updates done so far
    first: Array | None = None  # momentum buffer / Adam first moment
    second: Array | None = None  # Adam second moment


def _check_unit_interval(name: str, value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise ConfigurationError(f"{name} must lie in [0, 1), got {value}")
    return float(value)


def _check_decay(schedule: Schedule, decay_every: int | None, decay_factor: float) -> None:
    if schedule != "step":
        if decay_every is not None:
            raise ConfigurationError(f"decay_every applies only to schedule=step, got schedule={schedule!r}")
        return
    if isinstance(decay_every, bool) or not isinstance(decay_every, int) or decay_every < 1:
        raise ConfigurationError(
            f"schedule=step needs decay_every, an integer >= 1 (updates between decays), got {decay_every!r}")
    if not 0.0 < decay_factor < 1.0:
        raise ConfigurationError(f"decay_factor must lie in (0, 1), got {decay_factor}")


def _check_average_from(average_from: float | None) -> float | None:
    if average_from is not None and not 0.0 < average_from < 1.0:
        raise ConfigurationError(f"average_from must lie in (0, 1), or be null for no averaging; got {average_from}")
    return None if average_from is None else float(average_from)


class _ScheduledOptimizer(Optimizer):
    def __init__(self, lr: float, schedule: Schedule, decay_every: int | None, decay_factor: float,
                 average_from: float | None):
        if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
            raise ConfigurationError(f"the stepsize lr must be a positive number, got {lr!r}")
        if schedule not in SCHEDULES:
            raise ConfigurationError(f"unknown stepsize schedule {schedule!r}; allowed: {', '.join(SCHEDULES)}")
        _check_decay(schedule, decay_every, decay_factor)
        self.lr = float(lr)
        self.schedule = schedule
        self.decay_every = decay_every
        self.decay_factor = float(decay_factor)
        self.average_from = _check_average_from(average_from)
        self._factor = SCHEDULES[schedule]
        self._horizon: int | None = None

    def set_horizon(self, n_iters: int) -> None:
        self._horizon = int(n_iters)

    @property
    def horizon(self) -> int:
        """T, the number of updates of the run, as told by :meth:`set_horizon`."""
        if self._horizon is None:
            raise ConfigurationError(f"schedule={self.schedule!r} needs the number of iterations: call "
                                     "set_horizon(n_iters) first (engine.run does)")
        return self._horizon

    def stepsize(self, t: int) -> float:
        """γ_t for the t-th update (t >= 1)."""
        return self.lr * self._factor(t, self)

    def init(self, params: Array) -> OptimizerState:
        return OptimizerState(0, np.zeros_like(params), np.zeros_like(params))


class SGD(_ScheduledOptimizer):
    """Plain stochastic gradient descent λ -= γ_t g."""

    def __init__(self, lr: float = 0.01, schedule: Schedule = "constant", decay_every: int | None = None,
                 decay_factor: float = 0.5, average_from: float | None = None):
        super().__init__(lr, schedule, decay_every, decay_factor, average_from)

    def init(self, params: Array) -> OptimizerState:
        return OptimizerState(0)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        return params - self.stepsize(t) * grad, OptimizerState(t)


class Momentum(_ScheduledOptimizer):
    """Polyak heavy ball: v = μ v + g, λ -= γ_t v."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.9, schedule: Schedule = "constant",
                 decay_every: int | None = None, decay_factor: float = 0.5, average_from: float | None = None):
        super().__init__(lr, schedule, decay_every, decay_factor, average_from)
        self.momentum = _check_unit_interval("momentum", momentum)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        velocity = self.momentum * state.first + grad
        return params - self.stepsize(t) * self._direction(grad, velocity), OptimizerState(t, velocity)

    def _direction(self, grad: Array, velocity: Array) -> Array:
        return velocity


class Nesterov(Momentum):
    """Nesterov accelerated gradient (Sutskever et al. 2013 form): v = μ v + g, λ -= γ_t (g + μ v)."""

    def _direction(self, grad: Array, velocity: Array) -> Array:
        return grad + self.momentum * velocity


class Adam(_ScheduledOptimizer):
    """Adam (Kingma & Ba 2015) with bias correction; the papers use lr = 0.01."""

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 schedule: Schedule = "constant", decay_every: int | None = None, decay_factor: float = 0.5,
                 average_from: float | None = None):
        super().__init__(lr, schedule, decay_every, decay_factor, average_from)
        self.beta1 = _check_unit_interval("beta1", beta1)
        self.beta2 = _check_unit_interval("beta2", beta2)
        if not eps > 0:
            raise ConfigurationError(f"eps must be positive, got {eps}")
        self.eps = float(eps)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        beta1, beta2 = self.beta1, self.beta2
        # the moments, each built in one fresh array: m = β1 m + (1-β1) g, v = β2 v + (1-β2) g²
        first = grad * (1.0 - beta1)
        first += beta1 * state.first
        second = grad * grad
        second *= 1.0 - beta2
        second += beta2 * state.second
        # γ m̂/(√v̂ + ε) with m̂ = m/c1, v̂ = v/c2 (c_i = 1 - β_i^t) is γ√c2/c1 · m/(√v + ε√c2):
        # the bias corrections become two scalars
        root_c2 = math.sqrt(1.0 - beta2**t)
        step = np.sqrt(second)
        step += self.eps * root_c2
        np.divide(first, step, out=step)
        step *= self.stepsize(t) * root_c2 / (1.0 - beta1**t)
        return params - step, OptimizerState(t, first, second)


#: the built-in optimizers' JAX twin: one class for the four, with their schedules and averaging
TWIN = "mcsa_bench.accel.optimizers:Scheduled"


@hookimpl
def register_optimizers(register):
    register("sgd", SGD, jax=TWIN)
    register("momentum", Momentum, jax=TWIN)
    register("nesterov", Nesterov, jax=TWIN)
    register("adam", Adam, jax=TWIN)
