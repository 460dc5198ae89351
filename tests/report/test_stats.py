"""The report's statistics against known numbers: Demšar's (2006) worked example and Nemenyi table,
the Friedman references of scipy's own test suite, hand-computed cases, and scipy.stats.bootstrap."""

import numpy as np
import pytest
from scipy import stats

from mcsa_bench.report.stats import (
    default_metrics,
    mean_interval,
    mean_ranks,
    nemenyi_critical_difference,
    rank_methods,
)
from mcsa_bench.tracking.record import DIAGNOSTIC, HIGHER, LOWER, RESULT, MetricSpec, metric_spec

# Demšar (2006), Table 6: AUC of C4.5, C4.5+m, C4.5+cf, C4.5+m+cf on 14 data sets, as in scipy's
# TestFriedmanChiSquare (x1; 0.9751 breaks the printed tie of 'voting' the way the paper's ranks do).
DEMSAR = np.array([
    [0.763, 0.599, 0.954, 0.628, 0.882, 0.936, 0.661, 0.583, 0.775, 1.0, 0.94, 0.619, 0.972, 0.957],
    [0.768, 0.591, 0.971, 0.661, 0.888, 0.931, 0.668, 0.583, 0.838, 1.0, 0.962, 0.666, 0.981, 0.978],
    [0.771, 0.590, 0.968, 0.654, 0.886, 0.916, 0.609, 0.563, 0.866, 1.0, 0.965, 0.614, 0.9751, 0.946],
    [0.798, 0.569, 0.967, 0.657, 0.898, 0.931, 0.685, 0.625, 0.875, 1.0, 0.962, 0.669, 0.975, 0.970],
]).T  # blocks (data sets) x methods
DEMSAR_METHODS = ("C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf")


def test_demsar_worked_example():
    ranking = rank_methods(DEMSAR, DEMSAR_METHODS, higher=True, alpha=0.05)
    # the paper's average ranks and, from them, its (tie-uncorrected) chi-square 9.28 and CD 1.25
    np.testing.assert_allclose(ranking.mean_ranks, [3.143, 2.000, 2.893, 1.964], atol=5e-4)
    r = np.array(ranking.mean_ranks)
    n, k = DEMSAR.shape
    assert 12 * n / (k * (k + 1)) * (np.sum(r**2) - k * (k + 1) ** 2 / 4) == pytest.approx(9.28, abs=0.005)
    assert ranking.critical_difference == pytest.approx(1.25, abs=0.005)
    # scipy's reference values (tie-corrected): what the report uses
    assert (ranking.statistic, ranking.pvalue) == pytest.approx((10.2283464566929, 0.0167215803284414), rel=1e-12)
    assert ranking.test == "friedman" and ranking.best == "C4.5+m+cf"
    # Friedman rejects, but at α = 0.05 every method is within CD = 1.25 of the best (C4.5: 1.179)
    assert ranking.indistinguishable == set(DEMSAR_METHODS)
    # at α = 0.10 CD = 2.291 √(20/84) = 1.12 < 1.179: C4.5 is worse than C4.5+m+cf (Demšar §3.2.4)
    at_10 = rank_methods(DEMSAR, DEMSAR_METHODS, higher=True, alpha=0.10)
    assert at_10.critical_difference == pytest.approx(1.12, abs=0.005)
    assert at_10.indistinguishable == {"C4.5+m", "C4.5+cf", "C4.5+m+cf"}


@pytest.mark.parametrize(
    "data, reference",
    [
        # scipy's TestFriedmanChiSquare x2 ("Bioestadistica para las ciencias de la salud") and x3 (Zar, ex. 12.6)
        (
            [
                [4, 3, 5, 3, 5, 3, 2, 5, 4, 4, 4, 3],
                [2, 2, 1, 2, 3, 1, 2, 3, 2, 1, 1, 3],
                [2, 4, 3, 3, 4, 3, 3, 4, 4, 1, 2, 1],
                [3, 5, 4, 3, 4, 4, 3, 3, 3, 4, 4, 4],
            ],
            (18.9428571428571, 0.000280938375189499),
        ),
        (
            [
                [7.0, 9.9, 8.5, 5.1, 10.3],
                [5.3, 5.7, 4.7, 3.5, 7.7],
                [4.9, 7.6, 5.5, 2.8, 8.4],
                [8.8, 8.9, 8.1, 3.3, 9.1],
            ],
            (10.68, 0.0135882729582176),
        ),
    ],
)
def test_friedman_matches_scipys_references(data, reference):
    ranking = rank_methods(np.array(data).T, "abcd", higher=True)
    assert (ranking.statistic, ranking.pvalue) == pytest.approx(reference, rel=1e-10)


def test_nemenyi_critical_values_match_demsars_table_5():
    # q_α for k = 2..10 (Demšar 2006, Table 5a/b): CD with n = k(k+1)/6 blocks equals q_α
    table = {0.05: [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164],
             0.10: [1.645, 2.052, 2.291, 2.459, 2.589, 2.693, 2.780, 2.855, 2.920]}
    for alpha, values in table.items():
        for k, q in zip(range(2, 11), values):
            assert nemenyi_critical_difference(k, k * (k + 1) / 6, alpha) == pytest.approx(q, abs=0.0015)


def test_hand_computed_friedman_nemenyi_and_its_negative_control():
    # 5 blocks in which a beats b beats c: ranks 1, 2, 3; χ² = 12n/(k(k+1)) Σ R² − 3n(k+1) = 70 − 60 = 10
    base = np.array([0.1, 0.4, 0.2, 0.5, 0.3])
    scores = np.column_stack([base, base - 0.1, base - 0.2])
    ranking = rank_methods(scores, ("a", "b", "c"), higher=True)
    assert ranking.mean_ranks == (1.0, 2.0, 3.0)
    assert ranking.statistic == pytest.approx(10.0) and ranking.pvalue == pytest.approx(np.exp(-5.0))
    cd = 2.343 * np.sqrt(3 * 4 / (6 * 5))  # q_0.05(k=3) from Demšar's table: 1.482
    assert ranking.critical_difference == pytest.approx(cd, abs=1e-3)
    assert ranking.indistinguishable == {"a", "b"}  # b: 1 < CD; c: 2 > CD
    # lower is better reverses the ranks
    assert rank_methods(scores, ("a", "b", "c"), higher=False).indistinguishable == {"c", "b"}
    # negative control: cyclic ranks (mean ranks 2, 1.8, 2.2): χ² = 0.4, p = e^{-0.2}, nothing distinguishable
    cyclic = np.array([[3, 2, 1], [1, 3, 2], [2, 1, 3], [3, 2, 1], [1, 3, 2]], dtype=float)
    neutral = rank_methods(cyclic, ("a", "b", "c"), higher=True)
    assert neutral.statistic == pytest.approx(0.4) and neutral.pvalue == pytest.approx(np.exp(-0.2))
    assert neutral.best == "b" and neutral.indistinguishable == {"a", "b", "c"}


def test_ties_fewer_than_three_methods_and_one_replication():
    ties = rank_methods(np.ones((4, 3)), ("a", "b", "c"), higher=True)
    assert ties.mean_ranks == (2.0, 2.0, 2.0) and ties.pvalue == 1.0 and ties.indistinguishable == {"a", "b", "c"}
    np.testing.assert_allclose(mean_ranks([[1.0, 1.0, 0.0]], higher=True), [1.5, 1.5, 3.0])
    # two methods: Wilcoxon signed-rank; 6 blocks all won by a: exact two-sided p = 2/64
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    pair = rank_methods(np.column_stack([a, a - np.arange(1, 7) * 0.1]), ("a", "b"), higher=True)
    assert pair.test == "wilcoxon" and pair.pvalue == pytest.approx(2 / 64) and pair.indistinguishable == {"a"}
    five = rank_methods(np.column_stack([a[:5], a[:5] - 0.1 * np.arange(1, 6)]), ("a", "b"), higher=True)
    assert five.pvalue == pytest.approx(2 / 32) and five.indistinguishable == {"a", "b"}  # n = 5 cannot reach 0.05
    single = rank_methods(np.array([[0.3, 0.1, 0.2]]), ("a", "b", "c"), higher=True)
    assert single.test == "none" and single.indistinguishable == {"a"} and "untested" in single.describe()


def test_interval_is_scipys_bootstrap_and_handles_degenerate_cases():
    values = np.random.default_rng(3).normal(-0.5, 0.05, size=20)
    interval = mean_interval(values, 0.95)
    direct = stats.bootstrap((values,), np.mean, confidence_level=0.95, method="BCa", n_resamples=9999,
                             rng=np.random.default_rng(0)).confidence_interval
    assert (interval.mean, interval.low, interval.high, interval.method) == (
        values.mean(),
        direct.low,
        direct.high,
        "BCa",
    )
    # the interval covers the mean and has the width of a normal-theory interval to within 15 %
    half = stats.t.ppf(0.975, 19) * values.std(ddof=1) / np.sqrt(20)
    assert interval.low < values.mean() < interval.high
    assert (interval.high - interval.low) / (2 * half) == pytest.approx(1.0, abs=0.15)
    assert mean_interval([0.2]).low is None and mean_interval([0.2]).method == "none"
    assert (mean_interval([0.2, 0.2, 0.2]).low, mean_interval([0.2, 0.2, 0.2]).high) == (0.2, 0.2)
    narrow = mean_interval(values, 0.80)
    assert interval.low < narrow.low < narrow.high < interval.high


def test_non_finite_values_have_a_mean_and_no_interval_and_the_largest_floats_are_bootstrapped_exactly():
    """A NaN or infinite replication (a store's NaN, a forged bundle's value): the mean, no interval, never the
    bootstrap's AssertionError. Values near the largest float (MLflow's ±∞): the interval of the values divided by
    a power of two, scaled back, which is exactly the interval of values that small (scaling by 2^k is exact)."""
    for values in ([np.nan, -0.7], [np.inf, -0.7], [-np.inf, np.nan, 1.0]):
        interval = mean_interval(values)
        assert interval.method == "non-finite" and interval.low is None and interval.high is None
        assert interval.n == len(values) and not np.isfinite(interval.mean)
    values = np.random.default_rng(4).normal(0.5, 0.1, size=12)
    small, huge = mean_interval(values), mean_interval(values * 2.0**1023)
    assert huge.method == small.method == "BCa"
    assert (huge.mean, huge.low, huge.high) == (small.mean * 2.0**1023, small.low * 2.0**1023, small.high * 2.0**1023)
    extremes = mean_interval([1.7976931348623157e308, -1.7976931348623157e308])
    assert extremes.mean == 0.0 and np.isfinite(extremes.low) and np.isfinite(extremes.high)


def test_metric_directions_and_default_tables():
    """Directions and kinds come from the run record's catalogue or a producer's stored declaration; a metric
    neither describes is a diagnostic (never a default table), however its name reads."""
    assert all(metric_spec(m).direction == HIGHER for m in ("test_lpd", "test_accuracy", "log_z", "acceptance_rate"))
    assert all(metric_spec(m).direction == LOWER
               for m in ("kl_inclusive", "kl_exclusive", "test_rmse", "grad_variance", "wall_time", "divergences"))
    declared = {
        "zeta": MetricSpec(RESULT, LOWER, "zeta loss"),
        "ratio": MetricSpec(RESULT, None, "undirected"),
        "step_size": MetricSpec(DIAGNOSTIC, None, "step size"),
    }
    names = {
        "wall_time",
        "grad_norm",
        "kl_inclusive",
        "test_lpd",
        "zeta",
        "ratio",
        "log_z_khat",
        "step_size",
        "plugin_error",
    }
    assert default_metrics(names, lambda name: metric_spec(name, declared)) == ["test_lpd", "kl_inclusive", "zeta"]
    assert default_metrics(names, metric_spec) == ["test_lpd", "kl_inclusive"]  # zeta undeclared: a diagnostic


def test_large_values_are_written_in_scientific_notation():
    from mcsa_bench.report.tables import number_text

    assert number_text(1.2345, 2) == "1.23" and number_text(-99999.0, 0) == "-99999"
    assert number_text(4.6215e15, 2) == "4.62e+15" and number_text(-8.7e81, 1) == "-8.7e+81"
