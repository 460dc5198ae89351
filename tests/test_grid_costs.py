"""benchmarks/measure/grid_costs.py: a grid's jobs grouped by what sets their cost, and the engine's
evaluation count."""

from __future__ import annotations

import pytest

from benchmarks.measure.grid_costs import grid_jobs, group_jobs, makespan, schedule_costs
from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import EVAL_SCHEDULES, EvaluationSchedule
from mcsa_bench.jobs.config import register_configs


def test_gp_regression_at_smoke_size_groups_its_jobs_by_data_set_and_method():
    """2 data sets x 5 methods x 2 seeds: 10 cells of the 2 seeds each. The data split follows the
    seed (split_seed: ${seed}) and must not split a cell; the method and the data set must."""
    registry = get_registry()
    register_configs(registry)
    jobs = grid_jobs("gp_regression", "smoke")
    cells = group_jobs(jobs, registry)
    assert len(jobs) == 20
    assert len(cells) == 10
    assert [sorted(job.seed for job in cell.jobs) for cell in cells] == [[0, 1]] * 10
    assert len({cell.label for cell in cells}) == 10
    assert {cell.label.split()[0] for cell in cells} == {"gp_regression/boston", "gp_regression/concrete"}


def test_the_evaluation_count_is_what_the_engine_evaluates():
    parts = assemble(get_registry(), model=("gaussian", {"dim": 2}), estimator="pmcsa", n_samples=2)
    for schedule in EVAL_SCHEDULES:
        for n_iters, eval_every in ((7, 3), (6, 3), (5, 10), (1, 1), (40, 3)):
            result = run(*parts.run_args(), n_iters=n_iters, eval_every=eval_every, eval_schedule=schedule)
            count = EvaluationSchedule(n_iters, eval_every, schedule).count()
            assert len(result.history) == count, (n_iters, eval_every, schedule)


def test_makespan_takes_the_jobs_in_launch_order_each_to_the_first_free_core():
    assert makespan([3, 1, 1, 1], 2) == 3
    assert makespan([1, 1, 1, 3], 2) == 4  # the long job last waits for a core: longest-first would give 3
    assert makespan([2, 5], 1000) == 5  # more cores than jobs: the longest job
    assert makespan([1.0] * 10, 1) == 10


def test_schedule_costs_count_each_cells_evaluations_on_every_schedule():
    """T = 10, eval_every = 1: 11 evaluations on the linear schedule, 6 (0, 1, 2, 4, 8, 10) on the geometric."""
    cell = {"T": [10], "eval_every": [1], "jobs": 2, "evaluation_s": 1800.0}
    (row,) = schedule_costs({"grids": [{"grid": "g", "cpu_hours": 20.0, "cells_detail": [cell]}]})
    assert row == {"grid": "g", "cpu_hours": 20.0, "evaluation_hours": {"linear": 11.0, "geometric": 6.0}}


def test_each_distinct_program_is_compiled_once_and_found_by_the_others():
    from benchmarks.measure.grid_costs import programs_seconds

    figures = {"a": {"advance": 3.0, "evaluate": 4.0}, "b": {"advance": 5.0, "evaluate": 4.0}}
    configurations = [{"cell": "a", "keys": {"advance": "x", "evaluate": "e"}},
                      {"cell": "a", "keys": {"advance": "x", "evaluate": "e"}},  # another learning rate
                      {"cell": "b", "keys": {"advance": "y", "evaluate": "e"}}]  # another scheme, same model
    seconds, counts = programs_seconds(configurations, figures, hit_ratio=0.01)
    assert counts == {"configurations": 3, "compiles": 3, "hits": 3, "distinct": {"advance": 2, "evaluate": 1}}
    assert seconds == 3.0 + 4.0 + 0.01 * (3.0 + 4.0) + 5.0 + 0.01 * 4.0


@pytest.mark.slow
def test_the_stepsize_grid_compiles_once_per_scheme_and_optimizer():
    """stepsize_robustness at smoke size: 4 schemes x 4 optimizers x 2 stepsizes; the engine's keys
    give 16 advance programs (the stepsize is an argument) and one evaluate (one model and family)."""
    pytest.importorskip("jax")
    from benchmarks.measure.grid_costs import jax_configurations

    registry = get_registry()
    register_configs(registry)
    configurations = jax_configurations("stepsize_robustness", registry, size="smoke")
    assert len(configurations) == 32
    assert len({c["keys"]["advance"] for c in configurations}) == 16
    assert len({c["keys"]["evaluate"] for c in configurations}) == 1
