"""Would workers forked from a server iterate as fast as workers loky starts as fresh interpreters?

A sweep's fixed cost falls if its joblib workers are forked from one server process that imported
what jobs need once (the standard library's ``forkserver`` start method with
``set_forkserver_preload``), instead of each importing it. That was tried and dropped
(docs/performance.md, "A sweep's fixed cost"). Two joblib workers (``--workers 1``: one) each run
three logistic fits of 10^4 iterations (pima, heart, german; pMCSA in one worker, JSA in the other;
evaluation every 100 iterations), once forked from such a server and once started by loky's own
method; the two alternate in every round (A B, then B A) after a warm-up round (benchmarks/measure/harness.py).
The server loads the job's modules and the registry and freezes them (``--server design``, as once
shipped: fork_server_design.py) or only imports the job's modules (``--server imports``). Reported:
the CPU and wall seconds of the fits, their medians over the rounds, and the median over rounds of
the CPU ratio of a round's two blocks.

    python benchmarks/archive/forked_workers.py [--rounds 4] [--workers 2] [--server design|imports]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))  # harness.py, shared with the measurements

from harness import Sample, describe, interleave, load_average, machine, paired_ratio, save  # noqa: E402

DATASETS = ("pima", "heart", "german")
ESTIMATORS = ("pmcsa", "jsa")
START_METHODS = ("forkserver", "loky")


def fits(worker: int) -> list[tuple[float, float]]:
    """CPU and wall seconds of the worker's three fits."""
    from mcsa_bench import get_registry, run
    from mcsa_bench.assembly import assemble

    seconds = []
    for dataset in DATASETS:
        parts = assemble(get_registry(), model=("logistic", {"dataset": dataset}), estimator=ESTIMATORS[worker],
                         n_samples=10)
        cpu, wall = time.process_time(), time.perf_counter()
        run(*parts.run_args(), n_iters=10_000, seed=0, eval_every=100)
        seconds.append((time.process_time() - cpu, time.perf_counter() - wall))
    return seconds


def block(method: str, n_workers: int):
    """The fits in ``n_workers`` fresh workers started by ``method``: their summed CPU and wall seconds."""
    from joblib import Parallel, delayed
    from joblib.externals.loky.backend.context import set_start_method

    from mcsa_bench.jobs import workers

    def all_fits() -> Sample:
        set_start_method(method, force=True)
        per_worker = Parallel(n_jobs=n_workers)(delayed(fits)(w) for w in range(n_workers))
        seconds = [s for worker in per_worker for s in worker]
        workers.end_joblib_workers()
        return Sample(sum(c for c, _ in seconds), sum(w for _, w in seconds), 1)

    return all_fits


def main() -> None:
    from mcsa_bench.jobs import workers

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2), help="1: pMCSA's fits alone, no other worker")
    parser.add_argument("--server", choices=("imports", "design"), default="design",
                        help="what the server loads: the job's modules, or that and the registry, frozen "
                             "(fork_server_design.py, as once shipped)")
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    multiprocessing.set_forkserver_preload(
        ["fork_server_design"] if args.server == "design" else [*workers.JOB_MODULES, "mcsa_bench.plugins"])
    series = interleave({method: block(method, args.workers) for method in START_METHODS}, args.rounds)
    for method, times in series.items():
        print(f"{method:<11}median cpu {times.median_cpu:6.2f} s  wall {times.median_wall:6.2f} s  "
              f"(rounds: {' '.join(f'{c:.2f}' for c in times.cpu)})")
    paired = paired_ratio(series["forkserver"], series["loky"])
    print(f"CPU forkserver / loky, paired (the two blocks of a round): median {paired:.3f}")
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save(f"forked_workers_{args.workers}_{args.server}", {
        "machine": info, "load_average_start": load_start, "load_average_end": load_end, "rounds": args.rounds,
        "workers": args.workers, "server": args.server, "paired_cpu_ratio": paired,
        "results": {method: times.as_dict() for method, times in series.items()}})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
