"""What evaluation costs: the share of a run's CPU time spent in evaluations (the model's metrics and
the reference-posterior scores), per model, at the default ``eval_every`` (100) and at the grid's.

Per model, two runs of the same T iterations (pMCSA, N = 10) alternate in every round: one
evaluating every 100 iterations, one only at iterations 0 and T. From the medians, one evaluation
costs e = (cpu_100 − cpu_ends) / (T/100 − 1) and the iterations i = cpu_ends − 2e, so the share of
evaluation in a run evaluating every E iterations is (T/E + 1) e / (i + (T/E + 1) e).

    python benchmarks/evaluation.py [--rounds 5] [--models logistic radon]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness import describe, load_average, machine, save

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble

#: model → (spec, the grid's eval_every, T): T a multiple of both 100 and the grid's eval_every
MODELS = {
    "logistic": (("logistic", {"dataset": "pima"}), 100, 1000),
    "bnn": (("bnn", {"dataset": "boston"}), 500, 1000),
    "radon": (("radon", {}), 200, 1000),
    "stochastic_volatility": (("stochastic_volatility", {}), 500, 1000),
    "gp_classification": (("gp_classification", {"dataset": "sonar"}), 500, 1000),
    "gp_regression": (("gp_regression", {"dataset": "boston"}), 200, 400),
    "eight_schools": (("eight_schools", {}), 100, 1000),
    "gaussian": (("gaussian", {}), 100, 1000),
}
DEFAULT_EVAL_EVERY = 100


def run_cpu(parts, n_iters: int, eval_every: int) -> float:
    start = time.process_time()
    run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=eval_every, reference=parts.reference)
    return time.process_time() - start


def measure(name: str, rounds: int) -> dict:
    spec, grid_eval_every, n_iters = MODELS[name]
    parts = assemble(get_registry(), model=spec, estimator="pmcsa", n_samples=10)
    parts.reference  # found once, outside the timed runs
    schedules = (DEFAULT_EVAL_EVERY, n_iters)
    run_cpu(parts, n_iters, n_iters)  # warm-up
    cpu = {every: [] for every in schedules}
    for r in range(rounds):
        for every in schedules if r % 2 == 0 else reversed(schedules):
            cpu[every].append(run_cpu(parts, n_iters, every))
    every_100, ends = (statistics.median(cpu[every]) for every in schedules)
    one = (every_100 - ends) / (n_iters // DEFAULT_EVAL_EVERY - 1)
    iterations = ends - 2 * one
    row = {"model": name, "n_iters": n_iters, "cpu_s": cpu, "evaluation_ms": 1e3 * one,
           "iteration_us": 1e6 * iterations / n_iters, "shares": {}}
    for every in (DEFAULT_EVAL_EVERY, grid_eval_every):
        evaluations = n_iters // every + 1
        row["shares"][every] = evaluations * one / (iterations + evaluations * one)
    row["grid_eval_every"] = grid_eval_every
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    print(f"{'model':<22}{'iter µs':>9}{'eval ms':>9}{'share @100':>12}{'grid E':>8}{'share @E':>10}")
    rows = []
    for name in args.models:
        row = measure(name, args.rounds)
        rows.append(row)
        every = row["grid_eval_every"]
        print(f"{name:<22}{row['iteration_us']:9.0f}{row['evaluation_ms']:9.2f}"
              f"{row['shares'][DEFAULT_EVAL_EVERY]:12.1%}{every:8d}{row['shares'][every]:10.1%}", flush=True)
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("evaluation", {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                               "rounds": args.rounds, "results": rows})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
