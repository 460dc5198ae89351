"""Model checks: latent names, finite values at random points, batch against row-by-row
evaluation, the gradient against finite differences, and ``evaluate``.

Random points are z ~ N(0, I) in the unconstrained space (fixed seed): every model must give a
finite log joint (and gradient) there.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from mcsa_bench.api import Approximation, Array, Model
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.testing.numerics import directional_derivative, worst
from mcsa_bench.testing.results import Measurement, NotApplicable, declaration_problems

POINTS = 8
BATCH_RTOL = 1e-9  # batch against rows: |batch - row| / max(1, |row|)
FD_RTOL = 1e-6  # |analytic - numeric| / max(|numeric|, 1e-3 (1 + |log p|))
DIRECTIONS = 6


def random_points(model: Model, n: int = POINTS, seed: int = 0, scale: float = 1.0) -> Array:
    return scale * np.random.default_rng(seed).standard_normal((n, model.dim))


def check_latent_names(model: Model) -> Measurement:
    names = model.latent_names()
    problems = []
    if len(names) != model.dim:
        problems.append(f"{len(names)} names for dim = {model.dim}")
    if not all(isinstance(n, str) and n for n in names):
        problems.append("names must be non-empty strings")
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        problems.append(f"duplicate names {duplicates[:5]}")
    return Measurement.problems(problems, f"{len(names)} distinct names, e.g. {names[:3]}")


def check_finite_values(model: Model) -> Measurement:
    z = random_points(model)
    log_p = np.asarray(model.log_joint(z))
    problems = []
    if log_p.shape != (len(z),):
        problems.append(f"log_joint of {z.shape} has shape {log_p.shape}, expected ({len(z)},)")
    elif not np.all(np.isfinite(log_p)):
        problems.append(f"log_joint is not finite at {int(np.sum(~np.isfinite(log_p)))} of {len(z)} points z ~ N(0, I)")
    if model.has_gradient:
        value, grad = model.log_joint_and_grad(z)
        if np.shape(grad) != z.shape:
            problems.append(f"the gradient has shape {np.shape(grad)}, expected {z.shape}")
        elif not np.all(np.isfinite(grad)):
            problems.append("the gradient is not finite at some points z ~ N(0, I)")
    fine = f"log p in [{log_p.min():.4g}, {log_p.max():.4g}] at {len(z)} points z ~ N(0, I)"
    return Measurement.problems(problems, fine)


def check_batch_consistency(model: Model) -> Measurement:
    z = random_points(model, seed=1)
    batch = np.asarray(model.log_joint(z))
    rows = np.concatenate([np.asarray(model.log_joint(row[None])) for row in z])
    comparisons = {"log_joint of the batch vs row by row": (batch, rows)}
    if model.has_gradient:
        value, grad = model.log_joint_and_grad(z)
        grad_rows = np.concatenate([model.log_joint_and_grad(row[None])[1] for row in z])
        comparisons["log_joint_and_grad's value vs log_joint"] = (np.asarray(value), rows)
        comparisons["gradient of the batch vs row by row"] = (np.asarray(grad), grad_rows)
    worst_error, where = 0.0, ""
    for what, (got, expected) in comparisons.items():
        error = np.abs(got - expected) / np.maximum(1.0, np.abs(expected))
        i = worst(error)
        if not error.ravel()[i] <= worst_error:
            worst_error, where = float(error.ravel()[i]), (f"{what}: {got.ravel()[i]:.12g} vs "
                                                           f"{expected.ravel()[i]:.12g}")
    return Measurement(worst_error, BATCH_RTOL, where or "batch and row-by-row results are identical",
                       "largest relative difference")


def check_gradient_finite_differences(model: Model) -> Measurement:
    if not model.has_gradient:
        raise NotApplicable("the model provides no gradient (log_joint_and_grad)")
    z = random_points(model, n=4, seed=2, scale=0.5)
    value, grad = model.log_joint_and_grad(z)
    rng = np.random.default_rng(3)
    worst_error, where = 0.0, ""
    for _ in range(DIRECTIONS):
        v = rng.standard_normal(z.shape)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        analytic = np.einsum("bd,bd->b", grad, v)
        numeric = directional_derivative(model.log_joint, z, v)
        error = np.abs(analytic - numeric) / np.maximum(np.abs(numeric), 1e-3 * (1.0 + np.abs(value)))
        i = worst(error)
        if not error[i] <= worst_error:
            worst_error, where = float(error[i]), (f"directional derivative {analytic[i]:.8g} vs finite "
                                                   f"differences {numeric[i]:.8g} at log p = {value[i]:.6g}")
    return Measurement(worst_error, FD_RTOL, f"{DIRECTIONS} random directions at {len(z)} points, {where}",
                       "largest relative error")


def check_evaluate(model: Model) -> Measurement:
    family = MeanFieldGaussian(model.dim)
    q = Approximation(family, np.concatenate([np.zeros(model.dim), np.full(model.dim, np.log(np.expm1(0.5)))]))
    metrics = model.evaluate(q, np.random.default_rng(4))
    bad = {k: v for k, v in metrics.items() if not (isinstance(k, str) and isinstance(v, (int, float, np.floating))
                                                    and np.isfinite(v))}
    # k-hat is NaN by definition when too few weights are distinct; other metrics must be finite
    bad = {k: v for k, v in bad.items() if not (str(k).endswith("khat") and isinstance(v, float))}
    problems = [f"metric {k!r} = {v!r} is not a finite float" for k, v in bad.items()]
    problems += declaration_problems(model.metric_specs(), metrics, "evaluate returns")
    return Measurement.problems(problems, f"metrics for q = N(0, 0.5² I): {', '.join(metrics) or '(none)'}")


def check_reference(model: Model) -> Measurement:
    """A model's own reference posterior (:meth:`Model.reference`) must describe the model: same
    latent names, finite means, positive sds, and, when it stores check points, the model's log
    joint must agree with their densities up to a constant (mcsa_bench.references)."""
    reference = model.reference()
    if reference is None:
        raise NotApplicable("the model has no reference of its own (shipped references are checked in tests)")
    problems = []
    if list(reference.latent_names) != list(model.latent_names()):
        problems.append(f"the reference's latent names {reference.latent_names[:3]}... are not the model's")
    if not (np.all(np.isfinite(reference.mean)) and np.all(reference.sd > 0) and np.all(np.isfinite(reference.sd))):
        problems.append("the reference needs finite means and positive finite sds")
    if reference.check_points is not None and not reference.describes(model):
        problems.append(f"the model's log joint differs from the reference's check densities by "
                        f"{reference.discrepancy(model):.3g} beyond a constant")
    return Measurement.problems(problems, f"reference {reference.name!r} ({'exact' if reference.exact else 'sampled'}, "
                                          f"D = {reference.dim}) describes the model")


CHECKS = {
    "latent_names": check_latent_names,
    "finite_values": check_finite_values,
    "batch_consistency": check_batch_consistency,
    "gradient_finite_differences": check_gradient_finite_differences,
    "evaluate": check_evaluate,
    "reference": check_reference,
}
