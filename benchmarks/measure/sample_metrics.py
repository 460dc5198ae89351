"""The sample-based accuracy metrics (mcsa_bench/references/samples.py): their noise floors at q = π over
seeds, and what one scoring adds to an evaluation (docs/references.md, "Metrics from samples").

    OPENBLAS_NUM_THREADS=1 python benchmarks/measure/sample_metrics.py   # -> benchmarks/results/sample_metrics.json

Floors: for each target with exact draws, q is π itself (its exact draws and log density); over SEEDS
independent pairs of π's and q's draws the mean and 95 % quantile of each discrepancy. Cost: the median of
REPEATS scorings of the initial full-rank Gaussian q, measured interleaved with the model's own evaluate and
with 100 pMCSA iterations (N = 10), with the load beside them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from mcsa_bench import get_registry
from mcsa_bench.api import Approximation
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import run
from mcsa_bench.references.samples import SAMPLE_DRAWS, SampleScore, target_draws

SEEDS, REPEATS = 20, 5
TARGETS = [("gaussian_mixture", {}), ("student_t_mixture", {}), ("many_well", {}), ("funnel", {"dim": 10})]
COST_TARGETS = [*TARGETS, ("logistic", {"dataset": "german_numeric", "standardize": False, "test_fraction": 0}),
                ("radon", {})]
OUT = Path(__file__).parents[1] / "results" / "sample_metrics.json"


class ExactQ:
    """q = π: the model's exact draws and its normalized log density."""

    def __init__(self, model):
        self.model, self.log_z = model, model.log_normalizer() or 0.0

    def log_prob(self, z):
        return self.model.log_joint(z) - self.log_z

    def sample_with_log_prob(self, rng, n):
        z = self.model.sample(rng, n)
        return z, self.log_prob(z)


def floors(name: str, params: dict) -> dict:
    model = get_registry().build("model", name, **params)
    rows = [SampleScore(model, model.sample(np.random.default_rng(1000 + seed), SAMPLE_DRAWS))(
        ExactQ(model), np.random.default_rng(seed)) for seed in range(SEEDS)]
    return {metric: {"mean": float(np.mean([r[metric] for r in rows])),
                     "q95": float(np.quantile([r[metric] for r in rows], 0.95))}
            for metric in ("mmd", "sinkhorn", "mode_coverage", "log_z_q_error", "ess_q") if metric in rows[0]}


def cost(name: str, params: dict) -> dict:
    parts = assemble(get_registry(), model=(name, params), family="fullrank_gaussian", estimator="pmcsa",
                     n_samples=10)
    model = parts.model
    score = SampleScore(model, target_draws(model, parts.reference))
    q = Approximation(parts.family, parts.family.init_params())
    timings = {"sample_score": [], "model_evaluate": [], "pmcsa_100_iterations": []}
    for repeat in range(REPEATS):
        rng = np.random.default_rng(repeat)
        start = time.perf_counter()
        score(q, rng)
        timings["sample_score"].append(time.perf_counter() - start)
        start = time.perf_counter()
        model.evaluate(q, rng)
        timings["model_evaluate"].append(time.perf_counter() - start)
        start = time.perf_counter()
        run(*parts.run_args(), n_iters=100, eval_every=100, seed=repeat)
        timings["pmcsa_100_iterations"].append(time.perf_counter() - start)
    return {key: float(np.median(values)) for key, values in timings.items()}


def main() -> None:
    result = {"load_before": os.getloadavg()[0], "draws": SAMPLE_DRAWS, "seeds": SEEDS,
              "floors": {name: floors(name, params) for name, params in TARGETS},
              "cost_s": {name: cost(name, params) for name, params in COST_TARGETS}}
    result["load_after"] = os.getloadavg()[0]
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
