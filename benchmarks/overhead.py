"""Framework overhead per MCSA iteration, as a ratio to the bare work each scheme must do.

For each scheme at budget N on the Gaussian target, times (a) a full engine iteration
(kernel transition, score, Adam step; evaluation excluded) and (b) the bare work of Table 2 of
the NeurIPS paper: the scheme's batched log-density and family calls on inputs of the same
shapes, in the same process. Prints a table; ratios are (a)/(b), best of several repeats.

    python benchmarks/overhead.py [--model gaussian] [--dim 100] [--n-samples 10] [--iters 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble

# Per iteration, rows passed to each call (Table 2): (log p rows, sampled rows, extra log q rows, score rows)
BARE_WORK = {
    "msc": lambda n: (n - 1, n - 1, 1, 1),
    "msc_rb": lambda n: (n - 1, n - 1, 1, n),
    "jsa": lambda n: (n, n, 1, n),
    "pmcsa": lambda n: (n, n, n, n),
}


def model_spec(model: str, dim: int) -> tuple[str, dict]:
    return (model, {"dim": dim, "nu": 500.0}) if model == "gaussian" else (model, {})


def time_engine(scheme: str, model: str, dim: int, n_samples: int, iters: int) -> float:
    """Seconds per iteration of engine.run (its wall_time metric excludes evaluation)."""
    parts = assemble(get_registry(), model=model_spec(model, dim), estimator=scheme, n_samples=n_samples)
    result = run(*parts.run_args(), n_iters=iters, seed=0, eval_every=iters)
    return result.history[-1]["wall_time"] / iters


def time_bare_work(scheme: str, model: str, dim: int, n_samples: int, iters: int) -> float:
    """Seconds per iteration of only the scheme's density and family calls."""
    parts = assemble(get_registry(), model=model_spec(model, dim), estimator=scheme, n_samples=n_samples)
    model, family = parts.model, parts.family
    params = family.init_params()
    rng = np.random.default_rng(0)
    log_p_rows, sampled_rows, log_q_rows, score_rows = BARE_WORK[scheme](n_samples)
    z_p, z_q, z_s = (family.sample(params, rng, rows) for rows in (log_p_rows, log_q_rows, score_rows))
    start = time.perf_counter()
    for _ in range(iters):
        model.log_joint(z_p)
        family.sample_with_log_prob(params, rng, sampled_rows)
        family.log_prob(params, z_q)
        family.score(params, z_s)
    return (time.perf_counter() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gaussian", help="any registered model (defaults of its parameters)")
    parser.add_argument("--dim", type=int, default=100, help="dimension of the gaussian target")
    parser.add_argument("--n-samples", type=int, default=10)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    target = f"gaussian target, D={args.dim}" if args.model == "gaussian" else f"model {args.model}"
    print(f"{target}, N={args.n_samples}, {args.iters} iterations, best of {args.repeats}")
    print(f"{'scheme':<8} {'iteration µs':>13} {'bare work µs':>13} {'ratio':>6}")
    for scheme in BARE_WORK:
        setting = (scheme, args.model, args.dim, args.n_samples, args.iters)
        full = min(time_engine(*setting) for _ in range(args.repeats))
        bare = min(time_bare_work(*setting) for _ in range(args.repeats))
        print(f"{scheme:<8} {full * 1e6:13.1f} {bare * 1e6:13.1f} {full / bare:6.2f}")


if __name__ == "__main__":
    main()
