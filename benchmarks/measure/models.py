"""Per-iteration wall time of every scheme on every model/data pair of the papers, at N = 10.

Builds each pair from its experiment config (conf/experiment/<pair>.yaml), runs a short warm-up,
then times iterations with the engine's own ``wall_time`` (evaluation excluded), and separately
times one ``evaluate()`` call. Prints a markdown table for docs/models.md.

    python benchmarks/measure/models.py [--iters 200] [--schemes pmcsa,msc,msc_rb,jsa] [--pairs logistic_pima,...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.api import Approximation
from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs

PAIRS = ("logistic_pima", "logistic_heart", "logistic_german", "gp_classification_sonar",
         "gp_classification_ionosphere", "gp_classification_breast", "gp_regression_boston",
         "gp_regression_concrete", "bnn_boston", "bnn_concrete", "radon", "stochastic_volatility_sp500")


def time_pair(pair: str, scheme: str, iters: int) -> tuple[int, float, float]:
    """(D, seconds per iteration, seconds per evaluate call) for one pair and scheme."""
    (_, cfg), = compose_jobs([f"experiment={pair}", f"estimator={scheme}"], multirun=False)
    parts = RunSettings.from_config(cfg).assemble(get_registry())
    run(*parts.run_args(), n_iters=5, seed=0, eval_every=5)  # warm-up (imports, caches)
    result = run(*parts.run_args(), n_iters=iters, seed=0, eval_every=iters)
    q = Approximation(parts.family, result.params)
    start = time.perf_counter()
    parts.model.evaluate(q, np.random.default_rng(0))
    return parts.model.dim, result.history[-1]["wall_time"] / iters, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--schemes", default="pmcsa,msc,msc_rb,jsa")
    parser.add_argument("--pairs", default=",".join(PAIRS))
    args = parser.parse_args()
    register_configs(get_registry())
    schemes = args.schemes.split(",")
    print(f"| pair | D | {' | '.join(f'{s} ms/it' for s in schemes)} | evaluate() s |")
    print(f"|---|---|{'---|' * len(schemes)}---|")
    for pair in args.pairs.split(","):
        timings = [time_pair(pair, scheme, args.iters) for scheme in schemes]
        dim, evaluation = timings[0][0], timings[0][2]
        cells = " | ".join(f"{t[1] * 1e3:.2f}" for t in timings)
        print(f"| {pair} | {dim} | {cells} | {evaluation:.3f} |", flush=True)


if __name__ == "__main__":
    main()
