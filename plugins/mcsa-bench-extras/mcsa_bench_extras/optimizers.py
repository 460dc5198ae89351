"""RMSprop (Tieleman and Hinton 2012): Adam without momentum or bias correction, the stepsize of each
coordinate divided by a running root mean square of its gradients."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Optimizer


class RMSpropState(NamedTuple):
    square: Array  # v, the running mean of g²


class RMSprop(Optimizer):
    """v_t = ρ v_{t-1} + (1 − ρ) g_t², λ_t = λ_{t-1} − lr · g_t / (√v_t + ε), v_0 = 0; iterate averaging
    from ``average_from`` · T as the built-ins do."""

    def __init__(self, lr: float = 0.001, rho: float = 0.9, eps: float = 1e-8, average_from: float | None = None):
        if not (lr > 0 and math.isfinite(lr)):
            raise ConfigurationError(f"the stepsize lr must be a positive number, got {lr!r}")
        if not 0.0 <= rho < 1.0:
            raise ConfigurationError(f"rho must lie in [0, 1), got {rho}")
        if not eps > 0:
            raise ConfigurationError(f"eps must be positive, got {eps}")
        if average_from is not None and not 0.0 < average_from < 1.0:
            raise ConfigurationError(f"average_from must lie in (0, 1), or be null for no averaging; "
                                     f"got {average_from}")
        self.lr, self.rho, self.eps = float(lr), float(rho), float(eps)
        self.one_minus_rho = 1.0 - self.rho  # computed once, here, and taken as it is by the JAX twin
        self.average_from = None if average_from is None else float(average_from)

    def init(self, params: Array) -> RMSpropState:
        return RMSpropState(np.zeros_like(params))

    def step(self, params: Array, grad: Array, state: RMSpropState) -> tuple[Array, RMSpropState]:
        square = self.rho * state.square + self.one_minus_rho * grad * grad
        return params - self.lr * grad / (np.sqrt(square) + self.eps), RMSpropState(square)
