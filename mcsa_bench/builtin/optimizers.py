"""Built-in optimizers (NeurIPS paper §6.2, Fig. 2): SGD, Polyak momentum, Nesterov, Adam.

All descend: λ_t = λ_{t-1} - γ_t · direction(g). The stepsize γ_t = lr · schedule(t) is
constant by default; ``inverse`` (lr/t) and ``inverse_sqrt`` (lr/√t) are the Robbins-Monro-type
schedules of Table 1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Optimizer
from mcsa_bench.hookspecs import hookimpl

SCHEDULES = {
    "constant": lambda t: 1.0,
    "inverse": lambda t: 1.0 / t,
    "inverse_sqrt": lambda t: 1.0 / math.sqrt(t),
}


class OptimizerState(NamedTuple):
    t: int  # updates done so far
    first: Array | None = None  # momentum buffer / Adam first moment
    second: Array | None = None  # Adam second moment


def _check_unit_interval(name: str, value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise ConfigurationError(f"{name} must lie in [0, 1), got {value}")
    return float(value)


class _ScheduledOptimizer(Optimizer):
    def __init__(self, lr: float, schedule: str):
        if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
            raise ConfigurationError(f"the stepsize lr must be a positive number, got {lr!r}")
        if schedule not in SCHEDULES:
            raise ConfigurationError(f"unknown stepsize schedule {schedule!r}; allowed: {', '.join(SCHEDULES)}")
        self.lr = float(lr)
        self.schedule = schedule
        self._decay = SCHEDULES[schedule]

    def stepsize(self, t: int) -> float:
        """γ_t for the t-th update (t >= 1)."""
        return self.lr * self._decay(t)

    def init(self, params: Array) -> OptimizerState:
        return OptimizerState(0, np.zeros_like(params), np.zeros_like(params))


class SGD(_ScheduledOptimizer):
    """Plain stochastic gradient descent λ -= γ_t g."""

    def __init__(self, lr: float = 0.01, schedule: str = "constant"):
        super().__init__(lr, schedule)

    def init(self, params: Array) -> OptimizerState:
        return OptimizerState(0)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        return params - self.stepsize(t) * grad, OptimizerState(t)


class Momentum(_ScheduledOptimizer):
    """Polyak heavy ball: v = μ v + g, λ -= γ_t v."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.9, schedule: str = "constant"):
        super().__init__(lr, schedule)
        self.momentum = _check_unit_interval("momentum", momentum)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        velocity = self.momentum * state.first + grad
        return params - self.stepsize(t) * velocity, OptimizerState(t, velocity)


class Nesterov(_ScheduledOptimizer):
    """Nesterov accelerated gradient (Sutskever et al. 2013 form): v = μ v + g, λ -= γ_t (g + μ v)."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.9, schedule: str = "constant"):
        super().__init__(lr, schedule)
        self.momentum = _check_unit_interval("momentum", momentum)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        velocity = self.momentum * state.first + grad
        return params - self.stepsize(t) * (grad + self.momentum * velocity), OptimizerState(t, velocity)


class Adam(_ScheduledOptimizer):
    """Adam (Kingma & Ba 2015) with bias correction; the papers use lr = 0.01."""

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 schedule: str = "constant"):
        super().__init__(lr, schedule)
        self.beta1 = _check_unit_interval("beta1", beta1)
        self.beta2 = _check_unit_interval("beta2", beta2)
        if not eps > 0:
            raise ConfigurationError(f"eps must be positive, got {eps}")
        self.eps = float(eps)

    def step(self, params: Array, grad: Array, state: OptimizerState) -> tuple[Array, OptimizerState]:
        t = state.t + 1
        first = self.beta1 * state.first + (1.0 - self.beta1) * grad
        second = self.beta2 * state.second + (1.0 - self.beta2) * grad * grad
        first_hat = first / (1.0 - self.beta1**t)
        second_hat = second / (1.0 - self.beta2**t)
        step = self.stepsize(t) * first_hat / (np.sqrt(second_hat) + self.eps)
        return params - step, OptimizerState(t, first, second)


@hookimpl
def register_optimizers(register):
    register("sgd", SGD)
    register("momentum", Momentum)
    register("nesterov", Nesterov)
    register("adam", Adam)
