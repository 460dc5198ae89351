"""The posterior-accuracy metrics' noise floors and the accuracy verdict (mcsa_bench.references.accuracy):
each floor against what two independent references of its precision actually differ by, and the
verdict on planted wrong and right approximations."""

from __future__ import annotations

import numpy as np
import pytest

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation
from mcsa_bench.references import PosteriorReference
from mcsa_bench.references.accuracy import (
    ACCURACY_THRESHOLDS,
    OFF,
    ReferenceScore,
    accuracy_verdict,
    noise_floors,
)
from mcsa_bench.tracking.record import ACCURACY_LEVELS, REFERENCE_METRICS

DIM, DRAWS, REPLICATIONS = 4, 4000, 400
TRUE_MEAN = np.array([0.0, 1.0, -2.0, 5.0])
TRUE_SD = np.array([1.0, 0.5, 2.0, 3.0])


def reference_of(draws: np.ndarray) -> PosteriorReference:
    """A reference made from independent draws, as the generator makes one (ESS = the number of draws)."""
    sd = draws.std(axis=0, ddof=1)
    n = np.full(DIM, float(len(draws)))
    return PosteriorReference(name="sim", model="sim", params={}, latent_names=[f"z[{j}]" for j in range(DIM)],
                              mean=draws.mean(axis=0), sd=sd, mean_mcse=sd / np.sqrt(n), ess=n, rhat=np.ones(DIM),
                              source={}, quality={}, cov=np.cov(draws.T))


@pytest.mark.parametrize("family_name", ["meanfield_gaussian", "fullrank_gaussian"])
def test_two_independent_references_exceed_each_floor_about_five_percent_of_the_time(family_name):
    """The floors are the 95 % points of each metric between two independent references: over 400 pairs of
    references of 4,000 draws each, every metric exceeds its floor in 1-9 % of the pairs (Monte Carlo
    error of a 5 % rate over 400 pairs: 1.1 %; the max floors' Bonferroni bound makes them a little
    conservative)."""
    rng = np.random.default_rng(0)
    family = get_registry().build("family", family_name, dim=DIM)
    exceeded = dict.fromkeys(REFERENCE_METRICS, 0)
    for _ in range(REPLICATIONS):
        first, second = (reference_of(TRUE_MEAN + TRUE_SD * rng.standard_normal((DRAWS, DIM))) for _ in range(2))
        q = Approximation(family, family.moment_matched(second.mean, second.cov))  # q is a second reference
        metrics = ReferenceScore(first, family)(q, rng)
        floors = noise_floors(first, family)
        for name in REFERENCE_METRICS:
            exceeded[name] += metrics[name] > floors[f"{name}_floor"]
    rates = {name: count / REPLICATIONS for name, count in exceeded.items()}
    assert all(0.01 <= rate <= 0.09 for rate in rates.values()), rates


def test_an_exact_reference_has_no_floor_and_floors_grow_with_the_family():
    registry = get_registry()
    mean_field, full_rank = (registry.build("family", name, dim=DIM)
                             for name in ("meanfield_gaussian", "fullrank_gaussian"))
    exact = PosteriorReference(name="e", model="e", params={}, latent_names=list("abcd"), mean=TRUE_MEAN,
                               sd=TRUE_SD, mean_mcse=np.zeros(DIM), ess=np.full(DIM, np.nan),
                               rhat=np.full(DIM, np.nan), source={}, quality={"exact": True})
    assert set(noise_floors(exact, full_rank).values()) == {0.0}
    sampled = reference_of(TRUE_MEAN + TRUE_SD * np.random.default_rng(1).standard_normal((DRAWS, DIM)))
    # the full-rank fit has D(D+1)/2 covariance moments where mean-field has D variances
    assert (noise_floors(sampled, full_rank)["excess_inclusive_kl_floor"]
            > noise_floors(sampled, mean_field)["excess_inclusive_kl_floor"] > 0)


def test_the_verdict_levels_are_the_run_records():
    assert (*ACCURACY_THRESHOLDS, OFF) == ACCURACY_LEVELS


GOOD = {"ref_mean_error_max": 0.05, "ref_log_sd_ratio_max": 0.04, "excess_inclusive_kl": 0.01}
NO_FLOORS = {}


@pytest.mark.parametrize("final, level", [
    (GOOD, "accurate"),
    ({**GOOD, "ref_mean_error_max": 0.5}, "rough"),
    ({**GOOD, "excess_inclusive_kl": 3.0}, "rough"),  # the KL bounds "accurate" only
    ({**GOOD, "ref_log_sd_ratio_max": 0.8}, "off"),  # an sd off by more than a factor of 2
    ({**GOOD, "ref_mean_error_max": 5.0}, "off"),  # the planted wrong posterior: 5 sd off is never fine
    ({**GOOD, "ref_mean_error_max": float("nan")}, "off"),
    ({"ref_mean_error_max": 0.05, "ref_log_sd_ratio_max": 0.04}, "accurate"),  # no excess KL for this family
])
def test_the_verdict_is_the_best_level_whose_thresholds_every_metric_meets(final, level):
    assert accuracy_verdict(final, NO_FLOORS).level == level


def test_floors_widen_the_thresholds_and_a_floor_above_one_leaves_its_metric_out():
    just_over = {**GOOD, "ref_mean_error_max": 0.13}
    assert accuracy_verdict(just_over, NO_FLOORS).level == "rough"
    assert accuracy_verdict(just_over, {"ref_mean_error_max_floor": 0.05}).level == "accurate"
    unresolved = accuracy_verdict({**GOOD, "excess_inclusive_kl": 0.9}, {"excess_inclusive_kl_floor": 1.3})
    assert unresolved.level == "accurate" and "excess_inclusive_kl cannot resolve accurate" in unresolved.reason
    missed = accuracy_verdict({**GOOD, "ref_mean_error_max": 5.0}, NO_FLOORS)
    assert "not rough: ref_mean_error_max 5 > 1" in missed.reason
