"""Peak memory of a run against its length T: each run in a fresh process, peak RSS (ru_maxrss).

A run keeps λ, the chains and one row of metrics per evaluation, so its memory must not grow
with T (at a fixed ``eval_every``). Runs ``mcsa_bench.run`` with T and 10·T iterations.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/memory.py [--model logistic] [--iters 2000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from harness import load_average, machine, save

CHILD = """
import json, resource, sys
from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble
model, iters, eval_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = {"gaussian": ("gaussian", {"dim": 100}), "logistic": ("logistic", {"dataset": "pima"}),
        "gp": ("gp_classification", {"dataset": "sonar", "standardize": False}),
        "bnn": ("bnn", {"dataset": "boston"})}[model]
parts = assemble(get_registry(), model=spec, estimator="pmcsa", n_samples=10)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run(*parts.run_args(), n_iters=iters, seed=0, eval_every=eval_every)
print(json.dumps({"rss_before_run_kib": before, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def peak(model: str, iters: int, eval_every: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(iters), str(eval_every)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="logistic,gaussian")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=500)
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    results = []
    print(f"peak RSS (MiB) of a pMCSA run (N=10, eval_every={args.eval_every}), each in a fresh process")
    print(f"{'model':<10}{'T':>8}{'before run':>12}{'peak':>8}")
    for model in args.models.split(","):
        for iters in (args.iters, 10 * args.iters):
            r = {"model": model, "iters": iters, **peak(model, iters, args.eval_every)}
            results.append(r)
            print(
                f"{model:<10}{iters:>8}{r['rss_before_run_kib'] / 1024:12.1f}{r['peak_rss_kib'] / 1024:8.1f}",
                flush=True,
            )
    path = save("memory", {"machine": info, "load_average_start": load_start, "load_average_end": load_average(),
                           "eval_every": args.eval_every, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
