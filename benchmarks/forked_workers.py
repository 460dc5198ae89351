"""Do workers forked from the fork server iterate as fast as workers loky starts as fresh interpreters?

Two joblib workers each run three logistic fits of 10^4 iterations (pima, heart, german; pMCSA in
one worker, JSA in the other; evaluation every 100 iterations), once with the workers forked from
the server that imported what jobs need (jobs/forkserver.py) and once with loky's own start method;
the two alternate in every round (A B, then B A). Reported: the CPU and wall seconds of the six
fits per round, their medians, and the median over rounds of the CPU ratio of a round's two blocks.

    python benchmarks/forked_workers.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

from harness import load_average, machine, save

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


def main() -> None:
    from joblib import Parallel, delayed
    from joblib.externals.loky.backend.context import set_start_method

    from mcsa_bench.jobs import workers

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    multiprocessing.set_forkserver_preload([workers.FORK_SERVER_MODULE])
    rows = []
    for round_ in range(args.rounds):
        for method in START_METHODS if round_ % 2 == 0 else reversed(START_METHODS):
            set_start_method(method, force=True)
            seconds = [s for worker in Parallel(n_jobs=2)(delayed(fits)(w) for w in range(2)) for s in worker]
            workers.end_joblib_workers()
            rows.append({"round": round_, "start_method": method, "cpu_s": sum(c for c, _ in seconds),
                         "wall_s": sum(w for _, w in seconds)})
            print(f"{round_:3d} {method:<11}cpu {rows[-1]['cpu_s']:6.2f} s  wall {rows[-1]['wall_s']:6.2f} s", flush=True)
    for method in START_METHODS:
        mine = [row for row in rows if row["start_method"] == method]
        print(f"# {method:<11}median cpu {statistics.median(r['cpu_s'] for r in mine):6.2f} s  "
              f"wall {statistics.median(r['wall_s'] for r in mine):6.2f} s")
    cpu = {(row["round"], row["start_method"]): row["cpu_s"] for row in rows}
    paired = [cpu[r, "forkserver"] / cpu[r, "loky"] for r in range(args.rounds)]
    print(f"# CPU forkserver / loky, paired (the two blocks of a round): median {statistics.median(paired):.3f}, "
          f"rounds {min(paired):.2f}-{max(paired):.2f}")
    path = save("forked_workers", {"machine": info, "load_average_start": load_start,
                                   "load_average_end": load_average(), "results": rows})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
