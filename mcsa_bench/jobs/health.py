"""Run health: did a finished run's fit fail, and does anything doubt its q? (docs/estimators.md, "Run health")

A run can end FINISHED with a useless q: the papers' schemes with a full-rank Gaussian on raw-feature
logistic regression end 15–330 posterior sd off, their IMH acceptance near 0 from the first hundred
iterations on. Three criteria say that the fit **diverged**, each measured on the shipped settings
(benchmarks in the doc):

- **acceptance collapse**: the kernel's mean acceptance over the evaluations of the run's second half
  is below :data:`ACCEPTANCE_FLOOR` (diverged full-rank fits: ≤ 0.003; converged fits of the shipped
  settings: ≥ 0.04, JSA on heart and radon the lowest);
- **scales without bound**: some coordinate of q's scale grew more than :data:`SCALE_GROWTH`-fold
  from its initial value;
- **a non-finite metric** at the last evaluation (Pareto k̂, NaN by definition for degenerate
  weights, excepted).

Runs that end 5–40 sd off pass those; four signals make such a run **suspect**, one more is advisory
(docs/reliability.md, "What the health signals catch", measures each on the posterior-accuracy grid and on
every grid of docs/results.md kept as a bundle):

- ``iterate_mcse`` (suspect): the Monte Carlo standard error of the mean of the iterates over the run's
  second half is above :data:`MCSE_BAR` of q's sd: the optimization has not converged to a point the run
  can report (VIABEL's FASO, Dhaka et al. 2020, Alg. 1: its stopping rule, with its default); the iterates
  are q's locations in units of its final scale and its log scales (the engine's
  :class:`~mcsa_bench.engine.IterateTrace`);
- ``iterate_sd`` (suspect, for a run that reports its last iterate): the iterates' sd over the second half
  above the same bar: a last iterate is one draw of the iterates' wander, so its Monte Carlo error is their
  sd, not the MCSE of their mean (FASO's bar on the error of what the run reports);
- ``snis_ess`` (suspect): the schemes without a kernel have no acceptance to collapse; SNIS is judged by
  its own weights' effective sample size over the second half, below :data:`SNIS_ESS_FLOOR` of its N draws;
- ``khat`` (suspect): Pareto k̂ of the importance weights p(x, z)/q(z) at the final q above
  :func:`~mcsa_bench.metrics.khat_threshold` of the number of draws (PSIS, Vehtari et al. 2024, §3; Yao
  et al. 2018 for VI), from :data:`KHAT_FIRST_DRAWS` draws, continued to :data:`KHAT_DRAWS` when the
  estimate is within :data:`KHAT_Z` standard errors of the bar (:func:`final_khat`): q does not cover π.
  It is the signal for a fit that converged to the wrong place (ELBO at the exclusive optimum, a q whose
  sds are 10 times too small), which the others cannot see;
- ``iterate_rhat`` (advisory): FASO's stationarity test, split R̂ of those iterates above :data:`RHAT_BAR`.

The advisory one flags every run of the grid that ends > 1 sd off, but also more than 5 % of those
within 0.1 sd (Adam's iterates at a constant stepsize wander slowly), so it is recorded, not a
verdict. A diverged run is tagged
``mcsa_bench.health=diverged`` and logs ``diverged`` = 1; a suspect one ``suspect``; else ``ok``.
``mcsa_bench.health_reason`` says why, ``mcsa_bench.health_signals`` names every signal that flagged the
run, the advisory one included; ``iterate_rhat``, ``iterate_mcse``, ``iterate_sd`` and ``final_khat`` are
logged. Runs shorter than :data:`MIN_ITERATIONS` are judged by the scale and non-finite criteria only: one
that passes them is tagged ``too_short`` (too short to judge), never ``ok``. Each flag carries the remedy
that usually helps (:func:`remedy`: more iterations, iterate averaging, a smaller stepsize, a richer
family), which a single run prints beside its signal (:meth:`Health.advice`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mcsa_bench.api import Approximation, Array, Model, VariationalFamily
from mcsa_bench.assembly import Assembly
from mcsa_bench.metrics import importance_log_weights, khat_standard_error, khat_threshold, pareto_khat
from mcsa_bench.references.diagnostics import mean_mcse, rhat
from mcsa_bench.tracking.record import (
    HEALTH_DIVERGED,
    HEALTH_OK,
    HEALTH_REASON_TAG,
    HEALTH_SIGNALS_TAG,
    HEALTH_SUSPECT,
    HEALTH_TAG,
    HEALTH_TOO_SHORT,
)

ACCEPTANCE_FLOOR = 0.01
#: the criteria that read the run's course judge runs of at least this many iterations: a smoke test's
#: 20 iterations from q's initial N(0, I) accept almost nothing yet
MIN_ITERATIONS = 1000
SCALE_GROWTH = 1e3
DIVERGED_METRIC = "diverged"
#: FASO's stationarity and precision bars (VIABEL's defaults); the precision bar is also iterate_sd's
RHAT_BAR, MCSE_BAR = 1.1, 0.1
#: fewest traced iterates R̂ is computed from (split into two chains of 10)
MIN_TRACE = 20
SNIS_ESS_FLOOR = 0.2  # of N
#: draws of the final q for its k̂, and when more: from 2^12 draws k̂'s standard error is about 0.12 near
#: the bar, which put good runs above it and runs 2 sd off below it (docs/reliability.md); an estimate
#: within KHAT_Z of them of the bar is made again from 2^16 draws (the first 2^12 and more), about 0.06.
#: Three, not two: from few draws k̂ of a heavy tail comes out low, by up to 2.3 standard errors measured
#: (0.48 from 2^12 draws, 0.73 from 2^16, for a q 0.41 sd off)
KHAT_FIRST_DRAWS, KHAT_DRAWS, KHAT_Z = 2**12, 2**16, 3.0


@dataclass(frozen=True)
class Flag:
    signal: str  # one of DIVERGENCE_SIGNALS, SUSPECT_SIGNALS, ADVISORY_SIGNALS
    reason: str
    remedy: str = ""  # what usually helps (remedy)

    @property
    def diverged(self) -> bool:
        return self.signal in DIVERGENCE_SIGNALS

    @property
    def suspect(self) -> bool:
        return self.signal in SUSPECT_SIGNALS


DIVERGENCE_SIGNALS = ("acceptance", "scale", "non_finite")
SUSPECT_SIGNALS = ("iterate_mcse", "iterate_sd", "snis_ess", "khat")
#: recorded with the reason, but no verdict: it flags more than 5 % of the grid's runs within 0.1 sd
ADVISORY_SIGNALS = ("iterate_rhat",)


@dataclass(frozen=True)
class Health:
    flags: tuple[Flag, ...] = ()
    values: dict[str, float] = field(default_factory=dict)  # iterate_rhat, iterate_mcse, iterate_sd, final_khat
    too_short: str = ""  # why the run is too short for the signals that read its course (else empty)

    @property
    def reason(self) -> str:  # empty when the run is healthy
        return "; ".join([flag.reason for flag in self.flags] + ([self.too_short] if self.too_short else []))

    @property
    def diverged(self) -> bool:
        return any(flag.diverged for flag in self.flags)

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(flag.signal for flag in self.flags)

    @property
    def status(self) -> str:
        if self.diverged:
            return HEALTH_DIVERGED
        if self.too_short:
            return HEALTH_TOO_SHORT
        return HEALTH_SUSPECT if any(flag.suspect for flag in self.flags) else HEALTH_OK

    def advice(self) -> list[str]:
        """A line per flag: its signal (advisory ones said so), what it saw, and the remedy that usually helps."""
        return [f"{flag.signal}{'' if flag.diverged or flag.suspect else ' (advisory)'}: {flag.reason}"
                + (f". Usually helps: {flag.remedy}" if flag.remedy else "") for flag in self.flags]

    def tags(self) -> dict[str, str]:
        return {HEALTH_TAG: self.status, HEALTH_REASON_TAG: self.reason, HEALTH_SIGNALS_TAG: ",".join(self.signals)}

    def metrics(self) -> dict[str, float]:
        return {DIVERGED_METRIC: float(self.diverged), **self.values}


@dataclass(frozen=True)
class RunShape:
    """What a remedy refers to: the run's T, its stepsize (None: unknown), whether it averages its iterates,
    its family and its budget N."""

    n_iters: int
    lr: float | None = None
    averaged: bool = False
    family: str = ""
    n_samples: int | None = None


def remedy(signal: str, run: RunShape) -> str:
    """The change that usually helps a run ``signal`` flagged (docs/estimators.md, "Run health"; "Iterate
    averaging" measures what averaging does to a last iterate's error), in the run's own settings."""
    smaller = f"a smaller stepsize (optimizer.lr={run.lr / 10:g}; now {run.lr:g})" if run.lr else \
        "a smaller stepsize (optimizer.lr)"
    more = f"more iterations (n_iters={2 * run.n_iters})"
    averaging = "iterate averaging (optimizer.average_from=0.5)"
    full_rank = run.family == "fullrank_gaussian"
    if signal == "acceptance":
        return smaller + (", or the mean-field family (family=meanfield_gaussian): full-rank fits on raw features "
                          "diverge this way" if full_rank else "")
    if signal in ("scale", "non_finite"):
        return smaller
    if signal in ("iterate_mcse", "iterate_rhat"):
        return more if run.averaged else f"{more}, or {averaging}"
    if signal == "iterate_sd":
        return f"{averaging}, which reports the iterates' mean instead of one of them, or {smaller}"
    if signal == "snis_ess":
        return (f"more draws per iteration (n_samples={2 * run.n_samples})" if run.n_samples else "more draws per "
                "iteration (n_samples)") + ", or an MCSA scheme (estimator=pmcsa)"
    if signal == "khat":
        return ("a family that covers π: full-rank (family=fullrank_gaussian) where the posterior is correlated, "
                "heavier tails (family=meanfield_student_t)" if not full_rank else
                "heavier tails (family=meanfield_student_t), or " + more)
    return ""


def _second_half(history: list[dict], name: str, n_iters: int) -> list[float]:
    return [row[name] for row in history
            if name in row and row["iteration"] > n_iters / 2 and math.isfinite(row[name])]


def _acceptance_collapse(history: list[dict], n_iters: int) -> str:
    late = _second_half(history, "acceptance_rate", n_iters)
    if late and np.mean(late) < ACCEPTANCE_FLOOR:
        return (f"mean acceptance {np.mean(late):.2g} over the second half of the run (below {ACCEPTANCE_FLOOR}): "
                "the chains hardly move")
    return ""


def _scale_growth(family: VariationalFamily, initial: Array, final: Array) -> str:
    start, end = family.moments(initial), family.moments(final)
    if start is None or end is None:
        return ""
    growth = end.scale / start.scale
    worst = int(np.argmax(growth))
    if not growth[worst] <= SCALE_GROWTH:
        return f"q's scale of coordinate {worst} grew {growth[worst]:.3g}-fold (limit {SCALE_GROWTH:g})"
    return ""


def _non_finite(history: list[dict]) -> str:
    last = history[-1] if history else {}
    bad = sorted(k for k, v in last.items() if not k.endswith("_khat") and not math.isfinite(v))
    return f"non-finite {', '.join(bad)} at iteration {last['iteration']}" if bad else ""


def iterate_convergence(family: VariationalFamily, trace: Array) -> dict[str, float]:
    """``iterate_rhat``, ``iterate_mcse`` and ``iterate_sd``: the largest split R̂, MCSE of the mean and sd
    over the coordinates of the traced iterates, as q's locations in units of its final scale and its log
    scales (λ itself for a family without moments); {} for fewer than :data:`MIN_TRACE` iterates. Constant
    coordinates count as converged."""
    if len(trace) < MIN_TRACE:
        return {}
    moments = [family.moments(params) for params in trace]
    if moments[-1] is None:
        draws = np.stack(trace)
    else:
        final_scale = moments[-1].scale
        draws = np.stack([np.concatenate([m.location / final_scale, np.log(m.scale)]) for m in moments])
    varying = draws[:, np.ptp(draws, axis=0) > 0][None]
    if varying.shape[-1] == 0:
        return {"iterate_rhat": 1.0, "iterate_mcse": 0.0, "iterate_sd": 0.0}
    with np.errstate(all="ignore"):
        return {"iterate_rhat": float(np.nanmax(rhat(varying))), "iterate_mcse": float(np.nanmax(mean_mcse(varying))),
                "iterate_sd": float(np.max(np.std(varying[0], axis=0, ddof=1)))}


def health_rng(seed: int) -> np.random.Generator:
    """The draws of q the final k̂ uses: a stream of the run's seed that none of the engine's four uses."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4,)))


def final_khat(model: Model, q: Approximation, rng: np.random.Generator) -> tuple[float, int]:
    """Pareto k̂ of p(x, z)/q(z) at the final q and the number of draws it came from: from
    :data:`KHAT_FIRST_DRAWS` draws, or, when that estimate is within :data:`KHAT_Z` standard errors of the
    bar (or NaN), from :data:`KHAT_DRAWS` (the same draws and more: a sequential test that pays for the
    precision only where the verdict needs it)."""
    with np.errstate(all="ignore"):
        log_w = importance_log_weights(model, q, rng, KHAT_FIRST_DRAWS)
        khat = pareto_khat(log_w)
        if near_the_bar(khat):
            log_w = np.concatenate([log_w, importance_log_weights(model, q, rng, KHAT_DRAWS - KHAT_FIRST_DRAWS)])
            khat = pareto_khat(log_w)
    return khat, log_w.size


def near_the_bar(khat: float) -> bool:
    """Whether a k̂ from :data:`KHAT_FIRST_DRAWS` draws is within :data:`KHAT_Z` standard errors of the bar, or
    NaN: :func:`final_khat` then makes it again from :data:`KHAT_DRAWS`."""
    bar = khat_threshold(KHAT_FIRST_DRAWS)
    return not abs(khat - bar) > KHAT_Z * khat_standard_error(khat, KHAT_FIRST_DRAWS)


def suspicions(values: dict[str, float], snis_ess: float | None, n_samples: int | None,
               khat_draws: int = KHAT_DRAWS, last_iterate: bool = False) -> list[Flag]:
    """The flags of the signals beyond divergence, from their values (:func:`iterate_convergence`'s and
    ``final_khat``), SNIS's mean ESS over the second half (None: not SNIS) and whether the run reports its
    last iterate (``iterate_sd`` judges only those)."""
    flags = []
    if values.get("iterate_mcse", 0.0) > MCSE_BAR:
        flags.append(Flag("iterate_mcse", f"the iterates' mean over the second half is known to "
                          f"{values['iterate_mcse']:.2g} of q's sd (bar {MCSE_BAR}): the optimization has not "
                          "converged"))
    if last_iterate and values.get("iterate_sd", 0.0) > MCSE_BAR:
        flags.append(Flag("iterate_sd", f"the iterates over the second half spread {values['iterate_sd']:.2g} of "
                          f"q's sd (bar {MCSE_BAR}), and the run reports the last one of them"))
    if snis_ess is not None and n_samples and snis_ess < SNIS_ESS_FLOOR * n_samples:
        flags.append(Flag("snis_ess", f"mean SNIS ESS {snis_ess:.3g} of {n_samples} draws over the second half "
                          f"(below {SNIS_ESS_FLOOR:g} N): one draw carries the gradient"))
    if values.get("iterate_rhat", 1.0) > RHAT_BAR:
        flags.append(Flag("iterate_rhat", f"split R̂ {values['iterate_rhat']:.3g} of the iterates over the second "
                          f"half (bar {RHAT_BAR})"))
    khat = values.get("final_khat")
    if khat is not None and not khat <= khat_threshold(khat_draws):
        flags.append(Flag("khat", f"Pareto k̂ {khat:.3g} of π/q at the final q (bar {khat_threshold(khat_draws):.2g} "
                          f"for {khat_draws} draws)"))
    return flags


def assess(history: list[dict], n_iters: int, family: VariationalFamily, initial: Array, final: Array, *,
           trace: Array | None = None, khat: float | None = None, n_samples: int | None = None,
           khat_draws: int = KHAT_DRAWS, last_iterate: bool = False, shape: RunShape | None = None) -> Health:
    """The health of a run from its evaluations, its initial and final λ and, for the suspect signals, its
    traced iterates (:class:`~mcsa_bench.engine.RunResult` ``trace``), its final k̂ (:func:`final_khat`), its
    budget N and whether it reports its last iterate (no iterate averaging); ``shape``: the settings its
    flags' remedies name (default: T, N and the averaging only)."""
    values = iterate_convergence(family, [] if trace is None else trace)
    if khat is not None:
        values["final_khat"] = khat
    judged = n_iters >= MIN_ITERATIONS
    divergences = [("acceptance", _acceptance_collapse(history, n_iters) if judged else ""),
                   ("scale", _scale_growth(family, initial, final)), ("non_finite", _non_finite(history))]
    flags = [Flag(signal, reason) for signal, reason in divergences if reason]
    if judged:
        ess = _second_half(history, "snis_ess", n_iters)
        flags += suspicions(values, float(np.mean(ess)) if ess else None, n_samples, khat_draws, last_iterate)
    shape = shape or RunShape(n_iters, averaged=not last_iterate, n_samples=n_samples)
    flags = [Flag(flag.signal, flag.reason, remedy(flag.signal, shape)) for flag in flags]
    too_short = "" if judged or any(flag.diverged for flag in flags) else (
        f"too short to judge: T = {n_iters} is below the {MIN_ITERATIONS:,} iterations from which the acceptance "
        f"and the suspect signals mean something (n_iters={MIN_ITERATIONS} or more for a verdict)")
    return Health(tuple(flags), values, too_short)


def assess_run(parts: Assembly, result, n_iters: int, seed: int, n_samples: int) -> Health:
    """The health of a finished run of ``parts`` (:class:`~mcsa_bench.engine.RunResult`), its k̂ from
    :func:`health_rng`'s draws of its final q (none for a run shorter than :data:`MIN_ITERATIONS`: its k̂ is
    not read)."""
    judged = n_iters >= MIN_ITERATIONS
    khat, draws = final_khat(parts.model, result.q, health_rng(seed)) if judged else (None, KHAT_DRAWS)
    family, optimizer = parts.family, parts.optimizer
    shape = RunShape(n_iters, getattr(optimizer, "lr", None), optimizer.average_from is not None,
                     parts.sources["family"].name, n_samples)
    return assess(result.history, n_iters, family, family.init_params(), result.q.params, trace=result.trace,
                  khat=khat, n_samples=n_samples, khat_draws=draws, last_iterate=optimizer.average_from is None,
                  shape=shape)
