"""JAX twins of this plugin's components, for mcsa-bench's accelerated backend (backend=jax).

Registered through the entry-point group ``mcsa_bench.jax_twins`` (pyproject.toml), which
mcsa-bench loads only when a twin is asked for: this module may import JAX at its top. A twin
factory takes the built numpy component and returns the JAX one (docs/plugins.md, "A JAX twin");
``mcsa-bench check kernel rwmh --jax`` checks it against the numpy kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mcsa_bench.accel.kernels import Chains, Kernel, Transition, acceptance_probability, density_ok


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


def register_jax_twins(register):
    register("kernel", "rwmh", RandomWalkMetropolis)
