"""Finite differences and Monte Carlo z-scores shared by the checks (and the project's tests)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcsa_bench.api import Array

#: |z| limit of every Monte Carlo comparison: two-sided p ≈ 7e-6 per comparison, so a few hundred
#: comparisons over a whole check run fail by chance with probability ~1e-3 (and the seeds are fixed)
Z_LIMIT = 4.5


def central_differences(f: Callable[[Array], Array], x: Array, step: float = 1e-5) -> Array:
    """∂f/∂x by central differences for a batched f: x (B, D) -> (B,) [or (B, K)]; returns (B, D[, K])."""
    columns = []
    for d in range(x.shape[1]):
        shift = np.zeros_like(x)
        shift[:, d] = step
        columns.append((f(x + shift) - f(x - shift)) / (2 * step))
    return np.stack(columns, axis=1)


def directional_derivative(f: Callable[[Array], Array], x: Array, direction: Array, step: float = 1e-4) -> Array:
    """d/dt f(x + t v) at t = 0 by the fourth-order central stencil (Richardson extrapolation).

    Truncation error O(step⁴), rounding error ~ 1e-16·|f|/step: both far below 1e-8 relative
    for smooth f of moderate size. Works row-wise for a batched f: x, v (B, D) -> (B,).
    """
    near = f(x + step * direction) - f(x - step * direction)
    far = f(x + 2 * step * direction) - f(x - 2 * step * direction)
    return (8.0 * near - far) / (12.0 * step)


def assert_gradient_matches(
    value_and_grad: Callable[[Array], tuple[Array, Array]],
    z: Array,
    *,
    n_directions: int | None = None,
    step: float = 1e-5,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """The analytic gradient of a batched log density agrees with central finite differences.

    With ``n_directions`` it compares directional derivatives along random unit directions (cheap
    for large D); otherwise every coordinate. Also checks the returned value equals f itself.
    """
    value, grad = value_and_grad(z)
    assert value.shape == (z.shape[0],) and grad.shape == z.shape

    def f(x: Array) -> Array:
        return value_and_grad(x)[0]

    if n_directions is None:
        np.testing.assert_allclose(grad, central_differences(f, z, step), rtol=rtol, atol=atol)
        return
    rng = np.random.default_rng(seed)
    for _ in range(n_directions):
        v = rng.standard_normal(z.shape)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        numeric = (f(z + step * v) - f(z - step * v)) / (2 * step)
        np.testing.assert_allclose(np.einsum("bd,bd->b", grad, v), numeric, rtol=rtol, atol=atol)


def z_scores(samples: Array, expected: Array) -> Array:
    """(sample mean - expected) / standard error, per column of ``samples`` (n, K) -> (K,).

    Columns with zero spread and an exact match give 0 (not NaN); zero spread with a mismatch
    gives infinity.
    """
    samples = np.asarray(samples, dtype=float)
    error = samples.mean(axis=0) - expected
    standard_error = samples.std(axis=0, ddof=1) / np.sqrt(len(samples))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = error / standard_error
    return np.where(error == 0, 0.0, z)


def worst(values: Array) -> int:
    """Index of the largest |value| (NaN counts as the largest)."""
    magnitude = np.abs(np.asarray(values, dtype=float)).ravel()
    return int(np.argmax(np.where(np.isnan(magnitude), np.inf, magnitude)))
