"""An example mcsa-bench plugin: a model and a kernel registered through the framework's hooks."""

from __future__ import annotations

import numpy as np

from mcsa_bench import hookimpl
from mcsa_bench.api import Array, ChainState, ConfigurationError, Kernel, Model, Transition

_LOG_2PI = float(np.log(2 * np.pi))


class Funnel(Model):
    """Neal's funnel: v ~ N(0, scale²), x_i | v ~ N(0, e^v) for i = 1..dim-1; z = (v, x)."""

    def __init__(self, dim: int = 10, scale: float = 3.0):
        if dim < 2 or scale <= 0:
            raise ConfigurationError(f"funnel needs dim >= 2 and scale > 0, got dim={dim}, scale={scale}")
        self.dim, self.scale = int(dim), float(scale)

    def log_joint(self, z: Array) -> Array:
        return self.log_joint_and_grad(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        v, x = z[:, 0], z[:, 1:]
        k = self.dim - 1
        precision = np.exp(-v)
        squares = np.einsum("bi,bi->b", x, x)
        log_p = (-0.5 * (v / self.scale) ** 2 - np.log(self.scale) - 0.5 * _LOG_2PI
                 - 0.5 * k * (v + _LOG_2PI) - 0.5 * precision * squares)
        grad = np.empty_like(z)
        grad[:, 0] = -v / self.scale**2 - 0.5 * k + 0.5 * precision * squares
        grad[:, 1:] = -precision[:, None] * x
        return log_p, grad

    def latent_names(self) -> list[str]:
        return ["v"] + [f"x[{i}]" for i in range(self.dim - 1)]


class RandomWalkMetropolis(Kernel):
    """Random-walk Metropolis: z* = z + step_size·ε, accepted with min(1, p(z*)/p(z)); ignores q."""

    def __init__(self, step_size: float = 0.5):
        if not step_size > 0:
            raise ConfigurationError(f"step_size must be positive, got {step_size}")
        self.step_size = float(step_size)

    def step(self, rng, state: ChainState, target, proposal, n_proposals: int = 1) -> Transition:
        candidate = state.z + self.step_size * rng.standard_normal(state.z.shape)
        log_p = target.log_joint(candidate)  # one batched call for all chains
        log_ratio = np.nan_to_num(log_p - state.log_p, nan=-np.inf)
        accept = np.log(rng.random(len(log_p))) < log_ratio
        new_state = ChainState(np.where(accept[:, None], candidate, state.z), np.where(accept, log_p, state.log_p))
        return Transition(new_state, np.exp(np.minimum(log_ratio, 0.0)))


@hookimpl
def register_models(register):
    register("funnel", Funnel)


@hookimpl
def register_kernels(register):
    register("rwm", RandomWalkMetropolis)
