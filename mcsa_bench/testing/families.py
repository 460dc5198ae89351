"""Variational-family checks: shapes, normalization, sampling against the density, the score and
the reparameterization against finite differences.

Every check runs at λ = init_params() plus a fixed random perturbation (so it does not rely on
the symmetry of the starting point). Sampling is tied to the density two ways: in 1-D the
empirical CDF of the draws against the CDF integrated from ``log_prob`` (binomial standard
errors), and in D dimensions E_q[s(λ; z)] = 0 over q's own draws (the moment conditions that
link ``sample`` to ``log_prob`` and ``score``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import integrate

from mcsa_bench.api import Array, Moments, VariationalFamily
from mcsa_bench.testing.numerics import Z_LIMIT, directional_derivative, worst, z_scores
from mcsa_bench.testing.results import Measurement, NotApplicable

MakeFamily = Callable[[int], VariationalFamily]
DIM = 3
DRAWS = 20_000
PERTURBATION = 0.2
FD_RTOL = 1e-6  # finite-difference checks: |analytic - numeric| / max(1, |numeric|)
QUADRATURE_TOL = 1e-6


def check_params(family: VariationalFamily, seed: int = 0) -> Array:
    """init_params() plus a fixed perturbation of size ``PERTURBATION``."""
    init = np.asarray(family.init_params(), dtype=float)
    return init + PERTURBATION * np.random.default_rng(seed + 1000).standard_normal(init.shape)


def _fd_measurement(analytic: Array, numeric: Array, what: str) -> Measurement:
    error = np.abs(analytic - numeric) / np.maximum(1.0, np.abs(numeric))
    i = worst(error)
    return Measurement(float(error.ravel()[i]), FD_RTOL,
                       f"{what}: at entry {tuple(map(int, np.unravel_index(i, error.shape)))}: "
                       f"analytic {analytic.ravel()[i]:.6g} vs finite differences {numeric.ravel()[i]:.6g}",
                       "largest relative error")


def _param_jacobian(f: Callable[[Array], Array], params: Array) -> Array:
    """∂f/∂λ for f: λ (P,) -> (B,) by fourth-order differences; returns (B, P)."""
    columns = [directional_derivative(lambda p: f(p[0]), params[None, :], e[None, :]) for e in np.eye(params.size)]
    return np.stack(columns, axis=-1)


def check_shapes(make_family: MakeFamily) -> Measurement:
    problems = []
    for dim in (1, DIM):
        family = make_family(dim)
        params = check_params(family)
        count = family.num_params
        rng = np.random.default_rng(0)
        z = family.sample(params, rng, 7)
        z_joint, log_q = family.sample_with_log_prob(params, rng, 7)
        shapes = {"init_params": (np.shape(family.init_params()), (count,)), "sample": (np.shape(z), (7, dim)),
                  "sample_with_log_prob z": (np.shape(z_joint), (7, dim)),
                  "sample_with_log_prob log q": (np.shape(log_q), (7,)),
                  "log_prob": (np.shape(family.log_prob(params, z)), (7,)),
                  "score": (np.shape(family.score(params, z)), (7, count))}
        problems += [f"D={dim}: {what} has shape {got}, expected {want}" for what, (got, want) in shapes.items()
                     if got != want]
        if problems:
            break
        if not (np.all(np.isfinite(log_q)) and np.all(np.isfinite(family.score(params, z)))):
            problems.append(f"D={dim}: non-finite log q or score at q's own draws")
        gap = np.max(np.abs(log_q - family.log_prob(params, z_joint)) / np.maximum(1.0, np.abs(log_q)))
        if not gap <= 1e-9:
            problems.append(f"D={dim}: sample_with_log_prob's log q differs from log_prob by {gap:.3g}")
        rows = np.concatenate([family.log_prob(params, row[None]) for row in z])
        if not np.allclose(rows, family.log_prob(params, z), rtol=1e-9, atol=1e-12):
            problems.append(f"D={dim}: log_prob of a batch differs from log_prob row by row")
    return Measurement.problems(problems, "shapes and batch results agree")


def check_score_finite_differences(make_family: MakeFamily) -> Measurement:
    family = make_family(DIM)
    params = check_params(family)
    z = family.sample(params, np.random.default_rng(1), 6)
    numeric = _param_jacobian(lambda p: family.log_prob(p, z), params)
    return _fd_measurement(family.score(params, z), numeric, "score ∇_λ log q")


def _one_d_density(family: VariationalFamily, params: Array) -> Callable[[float], float]:
    return lambda x: float(np.exp(family.log_prob(params, np.array([[x]]))[0]))


def _pilot_quantiles(family: VariationalFamily, params: Array, levels: Array) -> Array:
    """Quantiles of a separate pilot sample: evaluation points independent of the checked draws."""
    return np.quantile(family.sample(params, np.random.default_rng(99), 4000)[:, 0], levels)


def check_log_prob_normalization(make_family: MakeFamily) -> Measurement:
    family = make_family(1)
    params = check_params(family)
    density = _one_d_density(family, params)
    low, middle, high = _pilot_quantiles(family, params, np.array([0.01, 0.5, 0.99]))
    pieces = [integrate.quad(density, -np.inf, low, limit=200),
              integrate.quad(density, low, high, points=[middle], limit=200),
              integrate.quad(density, high, np.inf, limit=200)]
    total = sum(value for value, _ in pieces)
    return Measurement(abs(total - 1.0), QUADRATURE_TOL, f"∫ q(z) dz = {total:.9f} by quadrature in 1-D "
                                                         f"(quadrature error ≤ {sum(e for _, e in pieces):.1g})",
                       "|∫ q - 1|")


def check_sampling_distribution(make_family: MakeFamily) -> Measurement:
    family = make_family(1)
    params = check_params(family)
    density = _one_d_density(family, params)
    middle, *points = _pilot_quantiles(family, params, np.array([0.5, 0.05, 0.25, 0.5, 0.75, 0.95]))
    points = np.array(points)
    draws = family.sample(params, np.random.default_rng(2), DRAWS)[:, 0]
    left = integrate.quad(density, -np.inf, middle, limit=200)[0]
    cdf = np.array([left + integrate.quad(density, middle, t, limit=200)[0] for t in points])
    empirical = (draws[:, None] <= points).mean(axis=0)
    z = (empirical - cdf) / np.sqrt(cdf * (1.0 - cdf) / DRAWS)
    i = worst(z)
    return Measurement(float(abs(z[i])), Z_LIMIT, f"P(z ≤ t) over {DRAWS} draws in 1-D: at t = "
                                                  f"{points[i]:.4g} the draws give {empirical[i]:.4f}, the "
                                                  f"integrated density {cdf[i]:.4f}", "largest |z|")


def check_sampling_moments(make_family: MakeFamily) -> Measurement:
    family = make_family(DIM)
    params = check_params(family)
    z = family.sample(params, np.random.default_rng(3), DRAWS)
    scores = z_scores(family.score(params, z), 0.0)
    checks = {f"mean score[{p}] (zero under q)": scores[p] for p in range(scores.size)}
    moments = family.moments(params)
    if moments is not None:  # the marginals kernels, metrics and exact metrics rely on
        checks.update(_marginal_z_scores(z, moments))
    names = list(checks)
    values = np.array([checks[n] for n in names])
    i = worst(values)
    return Measurement(float(abs(values[i])), Z_LIMIT, f"{DRAWS} draws of q ({DIM}-D): "
                                                       f"{names[i]}, z = {values[i]:.3g}", "largest |z|")


def _marginal_z_scores(z: Array, moments: Moments) -> dict[str, float]:
    """The draws' means against ``moments.mean`` (where the sd is finite), and for a Gaussian q their
    variances against the diagonal of its covariance (standard error √(2/n) σ² under normality)."""
    checks = {}
    for d in np.flatnonzero(np.isfinite(moments.sd)):
        checks[f"mean of z[{d}] vs moments"] = (z[:, d].mean() - moments.mean[d]) / (moments.sd[d] / np.sqrt(len(z)))
    gaussian = moments.gaussian_moments()
    if gaussian is not None:
        variance = np.diag(gaussian[1])
        for d in range(z.shape[1]):
            checks[f"variance of z[{d}] vs moments"] = (z[:, d].var() - variance[d]) / (
                np.sqrt(2.0 / len(z)) * variance[d]
            )
    return checks


def check_entropy(make_family: MakeFamily) -> Measurement:
    family = make_family(DIM)
    params = check_params(family)
    try:
        entropy = float(family.entropy(params))
    except NotImplementedError as error:
        raise NotApplicable(f"no closed-form entropy ({error})") from None
    log_q = family.log_prob(params, family.sample(params, np.random.default_rng(4), DRAWS))
    z = float(z_scores(-log_q[:, None], entropy)[0])
    return Measurement(abs(z), Z_LIMIT, f"entropy {entropy:.6g} vs -E_q[log q] = {-log_q.mean():.6g} "
                                        f"over {DRAWS} draws", "|z|")


def check_reparameterization(make_family: MakeFamily) -> Measurement:
    family = make_family(DIM)
    params = check_params(family)
    rng = np.random.default_rng(5)
    if not family.reparameterizable:
        raise NotApplicable("not reparameterizable (VariationalFamily.reparameterizable is false)")
    try:
        eps = family.base_noise(rng, DRAWS)
    except NotImplementedError:
        raise NotApplicable("not reparameterizable (base_noise raises NotImplementedError)") from None
    z = family.reparameterize(params, eps)  # a family with base_noise must implement the rest
    scores = z_scores(family.score(params, z), 0.0)
    i = worst(scores)
    if not abs(scores[i]) <= Z_LIMIT:
        return Measurement(float(abs(scores[i])), Z_LIMIT,
                           f"T(ε; λ) is not distributed as q: mean score[{i}] over {DRAWS} reparameterized draws "
                           f"has z = {scores[i]:.3g} (zero under q)", "largest |z|")
    eps, cotangent = eps[:4], rng.standard_normal((4, DIM))
    numeric = _param_jacobian(lambda p: np.einsum("bd,bd->b", family.reparameterize(p, eps), cotangent), params)
    fd = _fd_measurement(family.reparameterize_vjp(params, eps, cotangent), numeric, "reparameterize_vjp")
    return Measurement(fd.measured, fd.tolerance, f"{fd.detail}; draws of T(ε; λ) match q (largest mean-score "
                                                  f"|z| {abs(scores[i]):.3g} ≤ {Z_LIMIT})", fd.quantity)


def check_grad_log_prob(make_family: MakeFamily) -> Measurement:
    family = make_family(DIM)
    params = check_params(family)
    z = family.sample(params, np.random.default_rng(6), 6)
    try:
        analytic = family.grad_log_prob(params, z)
    except NotImplementedError:
        raise NotApplicable("no grad_log_prob (raises NotImplementedError)") from None
    numeric = np.stack([directional_derivative(lambda x: family.log_prob(params, x), z, np.tile(e, (len(z), 1)))
                        for e in np.eye(DIM)], axis=1)
    return _fd_measurement(analytic, numeric, "grad_log_prob ∇_z log q")


CHECKS = {
    "shapes": check_shapes,
    "log_prob_normalization": check_log_prob_normalization,
    "sampling_distribution": check_sampling_distribution,
    "sampling_moments": check_sampling_moments,
    "score_finite_differences": check_score_finite_differences,
    "reparameterization": check_reparameterization,
    "grad_log_prob": check_grad_log_prob,
    "entropy": check_entropy,
}
