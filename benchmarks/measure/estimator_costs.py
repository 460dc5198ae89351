"""Cost per iteration of every scheme and baseline on one model, next to Table 2 of the NeurIPS paper.

For each (scheme, kernel) at budget N: the evaluations one iteration makes, counted on the built
components (rows of log p, of log p with its gradient, of log q, of scores, of ∇_z log q), averaged
over the iterations (RWS alternates sleep and wake iterations), and the CPU time of one engine iteration (kernel,
gradient, Adam; evaluation switched off), best of several repeats. CPU time of this process rather
than wall time, so that other processes on a shared machine do not inflate it; with BLAS pinned to
one thread the two agree on a quiet machine. Numbers for docs/estimators.md.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/estimator_costs.py \
        [--model logistic] [--n-samples 10]
"""

from __future__ import annotations

import argparse
import functools
import time

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble

#: (scheme, kernel or None for the scheme's default)
SETTINGS = [("msc", "cis"), ("msc_rb", "cis"), ("jsa", "imh"), ("pmcsa", "imh"), ("msc", "hmc"),
            ("snis", None), ("rws", "hmc"), ("elbo", None)]

#: what each component method costs: (column, counts rows of its argument number, or the count n)
COUNTED = {
    "model": {"log_joint": "log p", "log_joint_and_grad": "∇ log p"},
    "family": {"log_prob": "log q", "sample_with_log_prob": "log q", "score": "score", "grad_log_prob": "∇_z log q"},
}
COLUMNS = ["log p", "∇ log p", "log q", "score", "∇_z log q"]


def _counting(method, column: str, counts: dict[str, int]):
    @functools.wraps(method)
    def wrapper(*args):
        rows = args[-1] if isinstance(args[-1], int) else len(args[-1])  # sample_with_log_prob(params, rng, n)
        counts[column] += rows
        return method(*args)

    return wrapper


def build(model: str, scheme: str, kernel: str | None, n_samples: int):
    return assemble(get_registry(), model=model, estimator=scheme, kernel=kernel, n_samples=n_samples)


def count_per_iteration(model: str, scheme: str, kernel: str | None, n_samples: int, iters: int) -> dict[str, float]:
    """Mean rows per iteration of each counted call, excluding initialization and evaluation."""
    parts = build(model, scheme, kernel, n_samples)
    counts = dict.fromkeys(COLUMNS, 0)
    for component, methods in (("model", COUNTED["model"]), ("family", COUNTED["family"])):
        target = getattr(parts, component)
        for name, column in methods.items():
            setattr(target, name, _counting(getattr(target, name), column, counts))
    initial = {}
    parts.model.evaluate = lambda q, rng: {}  # evaluation is not part of an iteration

    def snapshot_after_init(snapshot):
        if snapshot.iteration == 0:
            initial.update(counts)

    run(*parts.run_args(), n_iters=iters, seed=0, eval_every=iters, callbacks=[snapshot_after_init])
    return {column: (counts[column] - initial[column]) / iters for column in COLUMNS}


def seconds_per_iteration(model: str, scheme: str, kernel: str | None, n_samples: int, iters: int) -> float:
    """CPU seconds per iteration of engine.run, evaluation switched off (initialization included)."""
    parts = build(model, scheme, kernel, n_samples)
    parts.model.evaluate = lambda q, rng: {}
    start = time.process_time()
    run(*parts.run_args(), n_iters=iters, seed=0, eval_every=iters)
    return (time.process_time() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="logistic", help="any registered model, with its default parameters")
    parser.add_argument("--n-samples", type=int, default=10)
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"model {args.model}, N={args.n_samples}, {args.iters} iterations, best of {args.repeats}; "
          "rows per iteration")
    print(f"{'scheme':<8} {'kernel':<6} {'CPU µs':>9} {'× pmcsa':>8} " + " ".join(f"{c:>9}" for c in COLUMNS))
    times = {setting: float("inf") for setting in SETTINGS}
    for _ in range(args.repeats):  # interleaved, so that a busy spell does not hit one setting only
        for setting in SETTINGS:
            times[setting] = min(
                times[setting], seconds_per_iteration(args.model, *setting, args.n_samples, args.iters)
            )
    for scheme, kernel in SETTINGS:
        counts = count_per_iteration(args.model, scheme, kernel, args.n_samples, args.iters)
        shown = " ".join(f"{counts[c]:9.4g}" for c in COLUMNS)
        ratio = times[scheme, kernel] / times["pmcsa", "imh"]
        print(f"{scheme:<8} {kernel or '-':<6} {times[scheme, kernel] * 1e6:9.1f} {ratio:8.2f} {shown}")


if __name__ == "__main__":
    main()
