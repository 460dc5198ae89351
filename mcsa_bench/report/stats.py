"""The statistics of a report: which metrics get a table, bootstrap intervals over replications,
and the Friedman test with the Nemenyi post-hoc comparison (Demšar 2006).

Everything here is scipy.stats (``bootstrap``, ``friedmanchisquare``, ``studentized_range``,
``wilcoxon``, ``rankdata``); docs/report.md states the rules in words.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from mcsa_bench.tracking.record import METRICS, RESULT, MetricSpec

BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0


def default_metrics(names, spec_of: Callable[[str], MetricSpec]) -> list[str]:
    """The result metrics among ``names`` (``spec_of`` gives a name's spec: the run record's catalogue, or
    a producer's stored declaration; a result needs a better direction to be ranked): the catalogue's in
    its order, then the declared ones alphabetically."""
    results = {name for name in names if spec_of(name).kind == RESULT and spec_of(name).direction is not None}
    catalogued = [m for m in METRICS if m in results]
    return catalogued + sorted(results - set(catalogued))


# ------------------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """The mean of n replications and its bootstrap confidence interval (None when n = 1)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    method: str  # "BCa", "percentile", "constant" (every value equal), "none" (n = 1) or "non-finite" (NaN, ±∞)


def mean_interval(values, confidence: float = 0.95, seed: int = BOOTSTRAP_SEED) -> Interval:
    """The mean with its ``confidence`` bootstrap interval over the replications ``values``.

    BCa (bias-corrected and accelerated, scipy's default; second-order accurate for skewed
    sampling distributions such as those of test LPD) with 9999 resamples and a fixed seed, so a
    report is reproducible. BCa is undefined when the jackknife has no spread (e.g. n = 2 with a
    repeated value): then the percentile interval. Equal values: the interval is the point. A NaN
    or infinite value (a store holds NaN; a forged bundle anything): the mean alone, no interval.
    Values near the largest float (MLflow keeps ±∞ as ±1.797e308) are bootstrapped divided by a
    power of two, which is exact, so that no sum overflows.
    """
    values = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(values)):
        with np.errstate(invalid="ignore"):
            return Interval(float(values.mean()), None, None, int(values.size), "non-finite")
    largest = float(np.max(np.abs(values))) if values.size else 0.0
    exponent = int(np.frexp(largest)[1]) if largest > 2.0**1000 else 0

    def scaled(value) -> float:
        return float(np.ldexp(value, exponent))

    values = np.ldexp(values, -exponent)
    mean = scaled(values.mean())
    if values.size < 2:
        return Interval(mean, None, None, int(values.size), "none")
    if np.all(values == values[0]):
        return Interval(scaled(values[0]), scaled(values[0]), scaled(values[0]), int(values.size), "constant")
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # BCa's degenerate cases give NaN: handled below
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            result = stats.bootstrap((values,), np.mean, confidence_level=confidence, method=method,
                                     n_resamples=BOOTSTRAP_RESAMPLES, rng=np.random.default_rng(seed))
        low, high = result.confidence_interval
        if np.isfinite(low) and np.isfinite(high):
            return Interval(mean, scaled(low), scaled(high), int(values.size), method)
    raise AssertionError("the percentile bootstrap interval of distinct finite values is finite")


# --------------------------------------------------------------------------------- ranking


def nemenyi_critical_difference(k: int, n: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical difference of mean ranks, k methods over n blocks (Demšar 2006, §3.2.2).

    CD = q_α √(k(k+1)/(6n)) with q_α = studentized_range.ppf(1 − α, k, ∞)/√2.
    """
    q_alpha = stats.studentized_range.ppf(1.0 - alpha, k, np.inf) / np.sqrt(2.0)
    return float(q_alpha * np.sqrt(k * (k + 1) / (6.0 * n)))


def mean_ranks(scores, higher: bool) -> np.ndarray:
    """Mean rank of each method (column) over the blocks (rows); rank 1 is the best, ties averaged."""
    scores = np.asarray(scores, dtype=float)
    return stats.rankdata(-scores if higher else scores, axis=1).mean(axis=0)


@dataclass(frozen=True)
class Ranking:
    """Methods compared over blocks: mean ranks, the test used, and the set not distinguishable from the best.

    ``indistinguishable`` holds the best method (lowest mean rank) and every method the test could
    not tell apart from it: these are bold in a table.
    """

    methods: tuple[str, ...]
    mean_ranks: tuple[float, ...]
    n_blocks: int
    test: str  # "friedman", "wilcoxon", or "none"
    statistic: float | None
    pvalue: float | None
    critical_difference: float | None
    best: str
    indistinguishable: frozenset[str]
    alpha: float

    def describe(self) -> str:
        """One line: the test, its outcome and what is bold."""
        n = f"n = {self.n_blocks}"
        if self.test == "friedman":
            text = f"Friedman χ² = {self.statistic:.3g}, p = {self.pvalue:.3g}, {n}"
            if self.pvalue >= self.alpha:
                return f"{text}: p ≥ α = {self.alpha:g}, no method distinguishable, all bold"
            return f"{text}; Nemenyi CD = {self.critical_difference:.3g}"
        if self.test == "wilcoxon":
            outcome = "both bold" if len(self.indistinguishable) == 2 else f"{self.best} better"
            return f"two methods: Wilcoxon signed-rank p = {self.pvalue:.3g}, {n}: {outcome}"
        if len(self.methods) == 1:
            return "one method: nothing to compare"
        return f"{n} complete block{'s' if self.n_blocks != 1 else ''}: untested, bold marks the best mean rank only"


def rank_methods(scores, methods, higher: bool, alpha: float = 0.05) -> Ranking:
    """Compare k methods (columns of ``scores``) over n blocks (rows), following Demšar (2006).

    - k ≥ 3, n ≥ 2: Friedman test (scipy's, with its tie correction). p ≥ α: no method is
      distinguishable from the best, all are bold. p < α: Nemenyi post-hoc; bold are the methods
      whose mean rank differs from the best's by less than the critical difference.
    - k = 2, n ≥ 2: Friedman is undefined; Wilcoxon signed-rank test (Demšar §3.1.3), both bold
      unless p < α.
    - k = 1 or n < 2: nothing can be tested; only the best mean rank is bold.
    """
    scores = np.asarray(scores, dtype=float)
    methods = tuple(methods)
    n, k = scores.shape
    ranks = mean_ranks(scores, higher) if n else np.ones(k)
    best = methods[int(np.argmin(ranks))]
    common = dict(methods=methods, mean_ranks=tuple(float(r) for r in ranks), n_blocks=n, best=best, alpha=alpha)
    if k < 2 or n < 2:
        return Ranking(test="none", statistic=None, pvalue=None, critical_difference=None,
                       indistinguishable=frozenset({best}), **common)
    if k == 2:
        differences = scores[:, 0] - scores[:, 1]
        pvalue = 1.0 if np.all(differences == 0) else float(stats.wilcoxon(scores[:, 0], scores[:, 1]).pvalue)
        bold = frozenset({best}) if pvalue < alpha else frozenset(methods)
        return Ranking(test="wilcoxon", statistic=None, pvalue=pvalue, critical_difference=None,
                       indistinguishable=bold, **common)
    cd = nemenyi_critical_difference(k, n, alpha)
    if np.all(stats.rankdata(scores, axis=1) == (k + 1) / 2):  # every block a full tie: no evidence at all
        statistic, pvalue = 0.0, 1.0
    else:
        result = stats.friedmanchisquare(*scores.T)
        statistic, pvalue = float(result.statistic), float(result.pvalue)
    if pvalue >= alpha:
        bold = frozenset(methods)
    else:
        bold = frozenset(m for m, r in zip(methods, ranks) if r - ranks.min() < cd)
    return Ranking(test="friedman", statistic=statistic, pvalue=pvalue, critical_difference=cd,
                   indistinguishable=bold, **common)
