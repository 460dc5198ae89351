"""JAX twins of this plugin's components, for mcsa-bench's accelerated backend (backend=jax).

Registered with their components, by name (``register("rwmh", RandomWalkMetropolis,
jax="mcsa_bench_extras.jax_twins:RandomWalkMetropolis")`` in mcsa_bench_extras/__init__.py): mcsa-bench
imports this module only when a twin is asked for, so it may import JAX at its top. A twin factory takes
the built numpy component and returns the JAX one (docs/plugins.md, "A JAX twin");
``mcsa-bench check kernel rwmh --jax`` checks it against the numpy kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mcsa_bench.accel.kernels import Chains, Kernel, Transition, acceptance_probability, density_ok
from mcsa_bench.accel.optimizers import Optimizer


class RandomWalkMetropolis(Kernel):
    """Twin of :class:`mcsa_bench_extras.kernels.RandomWalkMetropolis`: z* = z + step_size·ε, accepted
    with min(1, π(z*)/π(z)); ignores q; reports each chain's jump distance. Sequential steps (JSA)
    come from Kernel.steps's scan."""

    def __init__(self, numpy_kernel):
        self.step_size = numpy_kernel.step_size

    def step_cost(self, num_chains: int, n_proposals: int = 1) -> tuple[int, int]:
        return num_chains, 0  # one log density per chain, no gradient (the numpy kernel's cost axis)

    def step(self, key, chains: Chains, state, target, q, n_proposals: int = 1):
        key_move, key_accept = jax.random.split(key)
        candidate = chains.z + self.step_size * jax.random.normal(key_move, chains.z.shape, chains.z.dtype)
        log_p = target.log_joint(candidate)
        probability = acceptance_probability(log_p - chains.log_p)
        accept = jax.random.uniform(key_accept, probability.shape, probability.dtype) < probability
        moved = Chains(jnp.where(accept[:, None], candidate, chains.z), jnp.where(accept, log_p, chains.log_p))
        info = {"jump_distance": jnp.linalg.norm(moved.z - chains.z, axis=1)}  # as the numpy kernel's info
        return moved, state, Transition(probability, info=info, density_ok=density_ok(log_p))



class RMSpropTwin(Optimizer):
    """Twin of :class:`mcsa_bench_extras.optimizers.RMSprop`: its state is v (λ's shape); lr, ρ, 1 − ρ
    and ε are the programs' arguments, so a sweep over them compiles once."""

    traced = ("lr", "rho", "one_minus_rho", "eps")

    def __init__(self, numpy_optimizer, n_iters: int):
        super().__init__(numpy_optimizer, n_iters)  # T and the averaging's start
        self.lr, self.rho, self.eps = numpy_optimizer.lr, numpy_optimizer.rho, numpy_optimizer.eps
        self.one_minus_rho = numpy_optimizer.one_minus_rho

    def init(self, params):
        return jnp.zeros_like(params)

    def step(self, params, grad, square, t):
        square = self.rho * square + self.one_minus_rho * grad * grad
        return params - self.lr * grad / (jnp.sqrt(square) + self.eps), square
