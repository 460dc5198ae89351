"""What a command prints at the end (mcsa_bench.jobs.summary)."""

from __future__ import annotations

from mcsa_bench.jobs.summary import result_columns


def test_a_sweeps_summary_shows_the_accuracy_metrics_not_the_floors_costs_or_health_values():
    logged = ["ref_mean_error_max", "ref_mean_error_max_floor", "excess_inclusive_kl_floor", "log_density_evals",
              "gradient_evals", "iterate_mcse", "final_khat", "wall_time"]
    assert result_columns(logged) == ["ref_mean_error_max", "wall_time"]
