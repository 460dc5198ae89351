"""Posterior-accuracy metrics of an approximation q against a :class:`PosteriorReference` π.

Logged at every evaluation of a run whose model has a reference (docs/references.md, "The metrics"):

- ``ref_mean_error_max`` / ``_rms``: |μ_q − μ_π| / sd_π over the coordinates (max, root mean square);
- ``ref_log_sd_ratio_max`` / ``_rms``: |log(sd_q / sd_π)|;
  from q's moments in closed form where its family has them, else Monte Carlo estimates from
  :data:`MOMENT_DRAWS` draws of q, each with ``<metric>_se`` its standard error (:func:`marginal_metrics`);
- ``excess_inclusive_kl``: KL(π‖q) − min over the family of KL(π‖q') = E_π[log q* − log q], the
  objective every MCSA scheme minimizes, measured from its optimum q*. For a Gaussian q whose
  family's optimum is moment matching (q* = N(μ_π, Σ_π) full-rank, N(μ_π, diag Σ_π) mean-field:
  :meth:`~mcsa_bench.api.VariationalFamily.moment_matched`), it is exact from π's mean and
  covariance; otherwise a Monte Carlo average over the reference's draws, with
  ``excess_inclusive_kl_se`` its standard error: q* is then the family's maximum-likelihood fit to
  half of the draws (the inclusive optimum of the empirical π) and the average runs over the other
  half, so the fit's own error does not enter the estimate. A family whose fit is not unique (a flow:
  ``VariationalFamily.unique_fit``) has no q* to measure from, and no excess.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri, ndtri  # not scipy.stats: building a model must not import it (a test)

from mcsa_bench.api import Approximation, Array, VariationalFamily
from mcsa_bench.references import PosteriorReference

#: draws of q estimating its marginal moments when the family gives none in closed form
MOMENT_DRAWS = 8192


def expected_log_prob(q: Approximation, mean: Array, cov_factor: Array) -> float:
    """E_π[log q(z)] for a Gaussian q and any π with this mean and covariance C = A Aᵀ, exactly,
    from q's own log density at the 2D + 1 points μ and μ ± a_j (a_j the columns of A):

        log q(μ ± a) = log q(μ) ± gᵀa − ½ aᵀΣ_q⁻¹a  ⇒  E_π[log q] = log q(μ) − ½ tr(Σ_q⁻¹ C)
                     = log q(μ) + ½ Σ_j [log q(μ + a_j) + log q(μ − a_j) − 2 log q(μ)].

    No second factorization of q's covariance: a q far from π (whose covariance, formed as L Lᵀ,
    need not factor again in floating point) is scored as reliably as a good one."""
    points = np.concatenate([mean[None], mean + cov_factor.T, mean - cov_factor.T])
    with np.errstate(all="ignore"):
        log_q = q.log_prob(points)
    centre, plus, minus = log_q[0], log_q[1:1 + mean.size], log_q[1 + mean.size:]
    return float(centre + 0.5 * np.sum(plus + minus - 2.0 * centre))


#: the posterior-accuracy metrics of q's marginal moments
MARGINAL_METRICS = ("ref_mean_error_max", "ref_mean_error_rms", "ref_log_sd_ratio_max", "ref_log_sd_ratio_rms")


def _max_and_rms(name: str, errors: Array) -> dict[str, float]:
    return {f"{name}_max": float(np.max(errors)), f"{name}_rms": float(np.sqrt(np.mean(errors**2)))}


def _max_and_rms_se(name: str, signed: Array, influence: Array) -> dict[str, float]:
    """Delta-method standard errors (van der Vaart 1998, Asymptotic Statistics, Thm 3.1) of max_j |x_j| and
    sqrt(mean_j x_j²) of the estimates x (D,) whose influence functions over the M draws are ``influence``
    (M, D): for a statistic f(x), x̂ − x ≈ mean_i φ_i, so se f = sd_i(∇f · φ_i) / √M, with
    ∇ max_j |x_j| = sign(x_k) e_k at the largest |x_k| and ∇ sqrt(mean x²) = x / (D rms). The coordinates'
    covariance enters through the shared draws: one linear combination per draw."""
    size = influence.shape[0]
    largest = int(np.argmax(np.abs(signed)))
    rms = np.sqrt(np.mean(signed**2))
    gradients = {f"{name}_max": np.sign(signed[largest]) * np.eye(signed.size)[largest],
                 f"{name}_rms": signed / (signed.size * rms) if rms > 0 else np.zeros(signed.size)}
    return {f"{metric}_se": float(np.std(influence @ gradient, ddof=1) / np.sqrt(size))
            for metric, gradient in gradients.items()}


def marginal_metrics(q: Approximation, reference: PosteriorReference, rng: np.random.Generator) -> dict[str, float]:
    """``ref_mean_error_*`` and ``ref_log_sd_ratio_*`` of q against the reference: from q's marginal mean
    and sd in closed form where its family gives them (``moments``), else :func:`monte_carlo_marginal_metrics`
    of :data:`MOMENT_DRAWS` draws of q from ``rng`` (the evaluation's stream)."""
    moments = q.moments()
    if moments is None:
        return monte_carlo_marginal_metrics(q.sample(rng, MOMENT_DRAWS), reference)
    return moment_metrics(moments.mean, moments.sd, reference.mean, reference.sd)


def moment_metrics(mean: Array, sd: Array, ref_mean: Array, ref_sd: Array) -> dict[str, float]:
    """The marginal metrics of q's marginal means and sds (D,) against π's (of any coordinates: a subset too)."""
    with np.errstate(divide="ignore"):
        log_sd_ratio = np.log(sd / ref_sd)
    return (_max_and_rms("ref_mean_error", np.abs(mean - ref_mean) / ref_sd)
            | _max_and_rms("ref_log_sd_ratio", np.abs(log_sd_ratio)))


def monte_carlo_marginal_metrics(draws: Array, reference: PosteriorReference) -> dict[str, float]:
    """The marginal metrics from draws (M, D) of q, with ``<metric>_se`` each: q's mean and sd estimated by
    the draws' mean and sd. Influence functions of one draw z_i: (z_ij − μ̂_j) / sd_π,j on the mean error's
    coordinate j (so se = sd_q / (√M sd_π) there), ((z_ij − μ̂_j)² − σ̂_j²) / (2 σ̂_j²) on log σ̂_j (the delta
    method on σ̂² = mean (z − μ̂)²); :func:`_max_and_rms_se` combines them."""
    with np.errstate(all="ignore"):  # a diverged q's draws (inf, NaN) give non-finite metrics, not warnings
        mean, var = draws.mean(axis=0), draws.var(axis=0, ddof=1)
        centred = draws - mean
        signed_mean_error = (mean - reference.mean) / reference.sd
        signed_log_sd_ratio = 0.5 * np.log(var) - np.log(reference.sd)
        log_sd_influence = (centred**2 - var) / (2.0 * var)
        return (_max_and_rms("ref_mean_error", np.abs(signed_mean_error))
                | _max_and_rms("ref_log_sd_ratio", np.abs(signed_log_sd_ratio))
                | _max_and_rms_se("ref_mean_error", signed_mean_error, centred / reference.sd)
                | _max_and_rms_se("ref_log_sd_ratio", signed_log_sd_ratio, log_sd_influence))


def fit_family(family: VariationalFamily, draws: Array) -> Array:
    """λ maximizing the mean of log q(z; λ) over the draws (L-BFGS with the family's score), computed once per
    process, family (its pickled state) and draws: every run of a sweep's cell with a family that needs the
    fit (the Student-t: about 1 s of L-BFGS on a 1,000-draw reference) asks for the same one."""
    key = (hashlib.sha256(pickle.dumps(family)).hexdigest(), hashlib.sha256(draws.tobytes()).hexdigest(),
           draws.shape)
    if key not in _FITS:
        _FITS[key] = _maximize_mean_log_q(family, draws)
    return _FITS[key].copy()


#: fit_family's optima in this process
_FITS: dict[tuple, Array] = {}


def _maximize_mean_log_q(family: VariationalFamily, draws: Array) -> Array:
    from scipy.optimize import minimize  # here: a run whose optimum is moment matching does not import it (0.3 s)

    def objective(params: Array) -> tuple[float, Array]:
        mean_log_q, mean_score = family.mean_log_prob_and_score(params, draws)
        return -mean_log_q, -mean_score

    return minimize(objective, family.init_params(), jac=True, method="L-BFGS-B",
                    options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-15}).x


class ReferenceScore:
    """The metrics of one run's approximations against one reference; the family's optimum is
    computed once, at the first evaluation."""

    def __init__(self, reference: PosteriorReference, family: VariationalFamily):
        self.reference = reference
        self.family = family
        self._optimum: Approximation | None = None
        self._cov_factor: Array | None = None  # A with A Aᵀ = Σ_π, when the excess KL is exact
        self._test_draws: Array | None = None

    def __call__(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        metrics = marginal_metrics(q, self.reference, rng)
        metrics.update(self.excess_inclusive_kl(q))
        return metrics

    def _prepare_optimum(self) -> None:
        ref, family = self.reference, self.family
        if ref.cov is not None:
            matched = family.moment_matched(ref.mean, ref.cov)
            if matched is not None:
                self._optimum, self._cov_factor = Approximation(family, matched), np.linalg.cholesky(ref.cov)
                return
        if ref.draws is not None and family.unique_fit:
            draws = np.asarray(ref.draws, dtype=float)
            fit_half, test_half = draws[0::2], draws[1::2]
            self._optimum, self._test_draws = Approximation(family, fit_family(family, fit_half)), test_half

    def excess_inclusive_kl(self, q: Approximation) -> dict[str, float]:
        if self._optimum is None:
            self._prepare_optimum()
            if self._optimum is None:
                return {}
        if self._cov_factor is not None:  # set only for a family whose optimum is moment matching: Gaussian
            mean = self.reference.mean
            excess = (expected_log_prob(self._optimum, mean, self._cov_factor)
                      - expected_log_prob(q, mean, self._cov_factor))
            return {"excess_inclusive_kl": excess}
        if self._test_draws is None:
            return {}
        differences = self._optimum.log_prob(self._test_draws) - q.log_prob(self._test_draws)
        return {"excess_inclusive_kl": float(np.mean(differences)),
                "excess_inclusive_kl_se": float(np.std(differences, ddof=1) / np.sqrt(differences.size))}


# ------------------------------------------------------------------------------ noise floors

#: the floors' level: a floor is the value two independent references of the shipped precision exceed
#: with this probability (docs/references.md, "Noise floors")
FLOOR_LEVEL = 0.05


def _floor_of_max(scales: Array) -> float:
    """The (1 − FLOOR_LEVEL) bound of max_j |x_j| for independent x_j ~ N(0, scales_j²) (Bonferroni)."""
    return float(ndtri(1.0 - FLOOR_LEVEL / (2 * scales.size)) * np.max(scales))


def _floor_of_rms(scales: Array) -> float:
    """The (1 − FLOOR_LEVEL) quantile of sqrt(mean_j x_j²), x_j ~ N(0, scales_j²), with every scale at their RMS."""
    return float(np.sqrt(np.mean(scales**2) * chdtri(scales.size, FLOOR_LEVEL) / scales.size))


def noise_floors(reference: PosteriorReference, family: VariationalFamily) -> dict[str, float]:
    """``<metric>_floor`` of each posterior-accuracy metric: what it reads between two independent
    references of this one's precision, so that a difference below it says nothing about q.

    Per coordinate j, two references' means differ by N(0, 2 mcse_j²), i.e. √2 mcse_j / sd_j posterior
    sds; their log sds by N(0, 1/ESS_j) (the sd of n Gaussian draws has var(log sd) = 1/(2n)). Two
    Gaussians fitted to independent samples of n draws differ by KL ≈ χ²_k / n with k the moments
    fitted (the family's parameter count: 2D mean-field, D + D(D+1)/2 full-rank), here with n the
    smallest bulk ESS. An exact reference has floors 0."""
    names = ("ref_mean_error_max", "ref_mean_error_rms", "ref_log_sd_ratio_max", "ref_log_sd_ratio_rms",
             "excess_inclusive_kl")
    if reference.exact or not np.all(np.isfinite(reference.ess)):
        return {f"{name}_floor": 0.0 for name in names}
    mean_scales = np.sqrt(2.0) * reference.mean_mcse / reference.sd
    log_sd_scales = 1.0 / np.sqrt(reference.ess)
    values = (_floor_of_max(mean_scales), _floor_of_rms(mean_scales), _floor_of_max(log_sd_scales),
              _floor_of_rms(log_sd_scales), float(chdtri(family.num_params, FLOOR_LEVEL) / reference.ess.min()))
    return {f"{name}_floor": value for name, value in zip(names, values)}


# ---------------------------------------------------------------------------------- verdict

#: the accuracy levels, best first, each with the largest value of the metrics it admits (docs/references.md,
#: "The accuracy verdict"): "accurate" is the blackjax benchmark's bias² < 0.01 (mean error under 0.1
#: posterior sd) with the same bound on the sd's log ratio, and VIABEL's KL bound of 0.1; "rough" is
#: every mean within one posterior sd and every sd within a factor of 2. Anything else is "off".
ACCURACY_THRESHOLDS: dict[str, dict[str, float]] = {
    "accurate": {"ref_mean_error_max": 0.1, "ref_log_sd_ratio_max": 0.1, "excess_inclusive_kl": 0.1},
    "rough": {"ref_mean_error_max": 1.0, "ref_log_sd_ratio_max": float(np.log(2.0))},
}
OFF = "off"


@dataclass(frozen=True)
class Verdict:
    level: str  # a level of ACCURACY_THRESHOLDS, or OFF (the run record's ACCURACY_LEVELS)
    reason: str  # what kept it from the better levels, and the metrics its reference cannot resolve


def accuracy_verdict(final: dict[str, float], floors: dict[str, float]) -> Verdict:
    """The best level whose thresholds the final metrics meet, each threshold widened by its metric's
    noise floor (q is not blamed for the reference's error). A metric whose floor exceeds a threshold
    cannot decide that level and is left out of it (said in the reason); a non-finite or missing metric
    fails every level it enters."""
    unresolved, failures = [], []
    for level, thresholds in ACCURACY_THRESHOLDS.items():
        failures = []
        for name, threshold in thresholds.items():
            floor = floors.get(f"{name}_floor", 0.0)
            if floor > threshold:
                unresolved.append(f"{name} cannot resolve {level} (floor {floor:.3g} > {threshold:g})")
            elif name in final or name != "excess_inclusive_kl":  # the excess KL may be unavailable
                value = final.get(name, float("nan"))
                if not value <= threshold + floor:
                    failures.append(f"{name} {value:.3g} > {threshold:g}" + (f" + floor {floor:.2g}" if floor else ""))
        if not failures:
            return Verdict(level, "; ".join(unresolved))
        unresolved = [f"not {level}: {', '.join(failures)}", *unresolved]
    return Verdict(OFF, "; ".join(unresolved))
