"""The numpy engine's face of a component written in JAX: its one-point functions vmapped over a batch and
compiled, called with numpy arrays and returning numpy arrays (float64: importing mcsa_bench.accel switches
JAX to 64 bits).

XLA compiles a program per batch shape. A batch size seen for the first times is padded to the next power
of two (its first row repeated, a point the caller asked for) and the result cut back, so that a
conformance check's dozens of sizes compile once per octave; a size asked for again and again (a run's:
its chains, its proposals) gets a program of its own from its :data:`EXACT_AFTER`-th call, so a run's
iterations compute no padding rows."""

from __future__ import annotations

from collections import Counter

import jax
import numpy as np

import mcsa_bench.accel  # noqa: F401  (float64, and JAX's persistent compilation cache)

#: calls of one batch size after which it is compiled for that size exactly
EXACT_AFTER = 3


def _padded(batch: np.ndarray) -> np.ndarray:
    """``batch`` (B, ...) with rows appended up to the next power of two."""
    rows = len(batch)
    size = 1 << max(rows - 1, 0).bit_length()
    if size == rows:
        return batch
    return np.concatenate([batch, np.broadcast_to(batch[:1], (size - rows, *batch.shape[1:]))])


class Batched:
    """A jitted function of (λ or nothing, then batches of equal length) called on numpy arrays: its
    results as writable numpy copies (the engines may update what a component returns), padded or exact
    by the rule of the module's docstring."""

    def __init__(self, function, fixed: int = 0):
        self.function, self.fixed, self.calls = jax.jit(function), fixed, Counter()

    def __call__(self, *args):
        rows = len(args[self.fixed])
        self.calls[rows] += 1
        if self.calls[rows] > EXACT_AFTER:
            return jax.tree_util.tree_map(np.array, self.function(*args))
        padded = args[:self.fixed] + tuple(_padded(np.asarray(a)) for a in args[self.fixed:])
        # cut on the numpy side: slicing the JAX array would dispatch a computation of its own
        return jax.tree_util.tree_map(lambda value: np.asarray(value)[:rows].copy(), self.function(*padded))


class ModelFunctions:
    """log p(x, z) of a batch z (B, D), alone and with ∇_z, from ``log_density`` of one z (D,)."""

    def __init__(self, log_density):
        self.log_joint = Batched(jax.vmap(log_density))
        self.log_joint_and_grad = Batched(jax.vmap(jax.value_and_grad(log_density)))


class FamilyFunctions:
    """A family's batched log q, draws, scores and reparameterization from its one-point ``log_density``
    (λ, z) and ``transform`` (λ, ε); λ is each function's first argument, the batches follow."""

    def __init__(self, log_density, transform):
        log_q = jax.vmap(log_density, (None, 0))
        draws = jax.vmap(transform, (None, 0))

        def with_log_q(params, eps):
            z = draws(params, eps)
            return z, log_q(params, z)

        def transform_vjp(params, eps, cotangent):
            """(∂T(ε_b; λ)/∂λ)ᵀ v_b for each row b."""
            def one(e, v):
                return jax.vjp(lambda p: transform(p, e), params)[1](v)[0]
            return jax.vmap(one)(eps, cotangent)

        self.log_prob = Batched(log_q, fixed=1)
        self.reparameterize = Batched(draws, fixed=1)
        self.sample_with_log_prob = Batched(with_log_q, fixed=1)
        self.score = Batched(jax.vmap(jax.grad(log_density, 0), (None, 0)), fixed=1)
        # the gradient of the mean by one reverse pass: a fit to thousands of draws never forms their (B, P) scores
        self.mean_log_prob_and_score = jax.jit(jax.value_and_grad(lambda params, z: log_q(params, z).mean()))
        self.grad_log_prob = Batched(jax.vmap(jax.grad(log_density, 1), (None, 0)), fixed=1)
        self.reparameterize_vjp = Batched(transform_vjp, fixed=1)
