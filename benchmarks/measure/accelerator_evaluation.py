"""What the accelerated backend's evaluations cost, and how far float32 moves a cell's results.

Two measurements beside benchmarks/measure/accelerator.py (which times the iterations alone), on the
same cells (pMCSA, N = 10 IMH chains, mean-field Gaussian, Adam 0.01):

- ``--part evaluation``: seconds of one evaluation point (the model's ``evaluate``: test LPD and
  accuracy, log Z with k̂, ...) per replicate: numpy's ``model.evaluate`` on one core against the
  cell's compiled ``evaluate`` program at R replicates (after compilation and a warm-up call).
- ``--part float32``: ``run_cell`` of one cell in float64 and in float32 on the same seeds, the
  final metrics' mean over the replicates in each, and their difference in standard errors of the
  difference (the two trajectories part after a few iterations, so only the distributions compare).

Imports nothing of Hydra or MLflow, so it runs on an accelerator machine with numpy, scipy, pluggy
and JAX alone::

    python benchmarks/measure/accelerator_evaluation.py --part evaluation --models logistic_pima --replicates 4
    python benchmarks/measure/accelerator_evaluation.py --part float32 --replicates 256 --iters 2000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accelerator import MODELS, build, device_name  # noqa: E402  (the same cells as the iteration timings)


def numpy_evaluation_seconds(name: str, repeats: int) -> float:
    """Median seconds of one numpy ``model.evaluate`` at q's initial λ."""
    from mcsa_bench.api import Approximation

    parts = build(name)
    q = Approximation(parts.family, parts.family.init_params())
    seconds = []
    for repeat in range(repeats):
        clock = time.perf_counter()
        parts.model.evaluate(q, np.random.default_rng(repeat))
        seconds.append(time.perf_counter() - clock)
    return float(np.median(seconds))


def jax_evaluation_seconds(name: str, replicates: int, repeats: int) -> dict:
    """Median seconds of the compiled ``evaluate`` program over R replicates, per replicate."""
    import jax
    import jax.numpy as jnp

    from mcsa_bench.accel.engine import CellSettings, compile_cell

    components = build(name).jax_twins(10)
    compiled = compile_cell(*components, CellSettings(n_iters=10, eval_every=10), replicates)
    seeds = jnp.arange(replicates, dtype=jnp.int64)
    state = compiled.start(seeds)
    jax.block_until_ready(compiled.evaluate(state, seeds, jnp.int32(0)))  # warm-up
    seconds = []
    for repeat in range(repeats):
        clock = time.perf_counter()
        jax.block_until_ready(compiled.evaluate(state, seeds, jnp.int32(repeat + 1)))
        seconds.append(time.perf_counter() - clock)
    return {"per_replicate_s": float(np.median(seconds)) / replicates, "compile_s": compiled.seconds}


def evaluation(args) -> list[dict]:
    rows = []
    for name in args.models.split(","):
        row = {"model": name, "numpy_one_core_s": numpy_evaluation_seconds(name, args.numpy_repeats), "jax": {}}
        for r in (int(r) for r in args.replicates.split(",")):
            row["jax"][str(r)] = jax_evaluation_seconds(name, r, args.repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def float32_agreement(args) -> list[dict]:
    from mcsa_bench.accel.engine import CellSettings, run_cell

    rows = []
    for name in args.models.split(","):
        finals = {}
        for dtype in ("float64", "float32"):
            components = build(name).jax_twins(args.iters)
            settings = CellSettings(n_iters=args.iters, eval_every=args.iters, dtype=dtype)
            result = run_cell(*components, settings, range(int(args.replicates.split(",")[-1])))
            finals[dtype] = [r.history[-1] for r in result.replicates if r.failure is None]
        row = {"model": name, "iters": args.iters, "metrics": {}}
        for metric in sorted(set(finals["float64"][0]) - {"iteration", "wall_time"}):
            a, b = (np.array([h[metric] for h in finals[d] if metric in h]) for d in ("float64", "float32"))
            se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
            row["metrics"][metric] = {
                "float64_mean": a.mean(),
                "float32_mean": b.mean(),
                "replicates": [a.size, b.size],
                "difference_in_se": (b.mean() - a.mean()) / se if se > 0 else 0.0,
            }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("evaluation", "float32"), required=True)
    parser.add_argument("--models", default="logistic_pima", help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--replicates", default="64", help="comma-separated R values (float32: the last)")
    parser.add_argument("--repeats", type=int, default=5, help="timed evaluations per measurement")
    parser.add_argument("--numpy-repeats", type=int, default=2, help="timed numpy evaluations (seconds each on GPs)")
    parser.add_argument("--iters", type=int, default=2000, help="T of the float32 comparison")
    parser.add_argument("--out", required=True, help="path of the JSON result")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(MODELS))
    if unknown:
        parser.exit(2, f"accelerator_evaluation.py: error: unknown model {', '.join(unknown)}; "
                       f"allowed: {', '.join(MODELS)}\n")
    rows = evaluation(args) if args.part == "evaluation" else float32_agreement(args)
    Path(args.out).write_text(json.dumps({"part": args.part, "device": device_name(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
