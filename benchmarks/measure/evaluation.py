"""What evaluation costs: the share of a run's CPU time spent in evaluations (the model's metrics and
the reference-posterior scores), per model, at the default ``eval_every`` (100) and at the grid's,
on either evaluation schedule (linear: every E iterations; geometric: at E · 2^j).

Per model, three runs of the same T iterations (pMCSA, N = 10) alternate in every round: one
evaluating every 100 iterations, one only at iterations 0 and T, one on the geometric schedule
from 100. From the first two medians, one evaluation costs e = (cpu_100 − cpu_ends) / (T/100 − 1)
and one iteration c = (cpu_ends − 2e) / T, so a run of the grid's T_grid iterations making n
evaluations spends n e / (T_grid c + n e) of its CPU in them, n counted by the engine's own
schedule. The third run checks that model: its CPU over T c + n e (``geo check``, 1 when it holds).

    python benchmarks/measure/evaluation.py [--rounds 5] [--models logistic radon]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness import describe, load_average, machine, save

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import EVAL_SCHEDULES, EvaluationSchedule

#: model → (spec, the grid's eval_every, the grid's T, the measured runs' T: a multiple of 100, long
#: enough that a run takes about a second or more, so that the difference of two runs is above their noise)
MODELS = {
    "logistic": (("logistic", {"dataset": "pima"}), 100, 10_000, 5000),
    "bnn": (("bnn", {"dataset": "boston"}), 500, 50_000, 5000),
    "radon": (("radon", {}), 200, 10_000, 5000),
    "stochastic_volatility": (("stochastic_volatility", {}), 500, 10_000, 1000),
    "gp_classification": (("gp_classification", {"dataset": "sonar"}), 500, 10_000, 1000),
    "gp_regression": (("gp_regression", {"dataset": "boston"}), 200, 20_000, 400),
    "eight_schools": (("eight_schools", {}), 100, 10_000, 5000),
    "gaussian": (("gaussian", {}), 100, 10_000, 5000),
}
DEFAULT_EVAL_EVERY = 100


def run_cpu(parts, n_iters: int, eval_every: int, schedule: str = "linear") -> float:
    start = time.process_time()
    run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=eval_every, eval_schedule=schedule,
        reference=parts.reference)
    return time.process_time() - start


def measure(name: str, rounds: int) -> dict:
    spec, grid_eval_every, grid_iters, n_iters = MODELS[name]
    parts = assemble(get_registry(), model=spec, estimator="pmcsa", n_samples=10)
    _ = parts.reference  # found once, outside the timed runs
    runs = {"every_100": (DEFAULT_EVAL_EVERY, "linear"), "ends": (n_iters, "linear"),
            "geometric_100": (DEFAULT_EVAL_EVERY, "geometric")}
    run_cpu(parts, n_iters, n_iters)  # warm-up
    cpu = {label: [] for label in runs}
    for r in range(rounds):
        for label in runs if r % 2 == 0 else reversed(runs):
            cpu[label].append(run_cpu(parts, n_iters, *runs[label]))
    every_100, ends, geometric = (statistics.median(cpu[label]) for label in runs)
    one = (every_100 - ends) / (n_iters // DEFAULT_EVAL_EVERY - 1)
    per_iteration = (ends - 2 * one) / n_iters
    # the cost model's check: the geometric run's CPU against its iterations and evaluations at e
    predicted = n_iters * per_iteration + EvaluationSchedule(n_iters, DEFAULT_EVAL_EVERY, "geometric").count() * one
    row = {"model": name, "n_iters": n_iters, "cpu_s": cpu, "evaluation_ms": 1e3 * one,
           "iteration_us": 1e6 * per_iteration, "grid_eval_every": grid_eval_every, "grid_n_iters": grid_iters,
           "geometric_measured_over_predicted": geometric / predicted, "shares": {}}
    for schedule in EVAL_SCHEDULES:
        for every in (DEFAULT_EVAL_EVERY, grid_eval_every):
            evaluations = EvaluationSchedule(grid_iters, every, schedule).count()
            share = evaluations * one / (grid_iters * per_iteration + evaluations * one)
            row["shares"][f"{schedule}@{every}"] = {"evaluations": evaluations, "share": share}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    columns = [(schedule, every) for schedule in EVAL_SCHEDULES for every in ("100", "E")]
    print(f"{'':<52}share of a run of the grid's T in evaluations (count)")
    print(f"{'model':<22}{'iter µs':>9}{'eval ms':>9}{'T':>7}{'E':>5}"
          + "".join(f"{f'{schedule[:3]} @{every}':>14}" for schedule, every in columns) + f"{'geo check':>11}")
    rows = []
    for name in args.models:
        row = measure(name, args.rounds)
        rows.append(row)
        every = row["grid_eval_every"]
        shares = [row["shares"][f"{schedule}@{DEFAULT_EVAL_EVERY if e == '100' else every}"]
                  for schedule, e in columns]
        print(f"{name:<22}{row['iteration_us']:9.0f}{row['evaluation_ms']:9.2f}{row['grid_n_iters']:7d}{every:5d}"
              + "".join(f"{s['share']:8.1%} ({s['evaluations']:3d})" for s in shares)
              + f"{row['geometric_measured_over_predicted']:11.3f}", flush=True)
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("evaluation", {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                               "rounds": args.rounds, "results": rows})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
