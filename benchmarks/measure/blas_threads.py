"""Per-iteration time with 1 BLAS thread against the library's default, quiet and with cores busy.

pMCSA (N = 10) engine iterations on GP classification / sonar (and any model of overhead.py),
with the BLAS pools limited to 1 thread vs ``--threads`` (default: the number of cores, OpenBLAS's
own default), interleaved (harness.py). Then the same with ``--busy`` other processes spinning
(started here, one pure-Python busy loop each, stopped at the end), as when a sweep runs more jobs
than cores or other users share the machine. CPU time counts every thread of the process, so
threads that spin-wait show up in it.

    python benchmarks/measure/blas_threads.py [--models gp] [--threads 2] [--busy 1] [--rounds 7]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os

from harness import describe, interleave, load_average, machine, save
from overhead import block_iterations, build, engine_block
from threadpoolctl import threadpool_limits


def _spin() -> None:
    while True:
        pass


def limited(block, threads: int):
    def run_limited():
        with threadpool_limits(limits=threads, user_api="blas"):
            return block()
    return run_limited


def measure(model: str, threads: int, rounds: int, seconds: float) -> dict:
    parts = build(model, "pmcsa", 10)
    with threadpool_limits(limits=1, user_api="blas"):
        iterations = block_iterations(parts, seconds)
    block = engine_block(parts, iterations)
    series = interleave({"1": limited(block, 1), str(threads): limited(block, threads)}, rounds)
    return {
        "model": model,
        "iterations_per_block": iterations,
        **{f"threads_{k}": s.as_dict() for k, s in series.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gp")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--busy", type=int, default=1, help="busy processes for the loaded condition")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    args = parser.parse_args()

    info, load_start = machine(), load_average()
    results = []
    print(f"pMCSA N=10; µs per iteration (medians of {args.rounds} interleaved rounds): 1 thread vs {args.threads}")
    print(
        f"{'model':<9}{'condition':<11}{'1 cpu':>10}{'1 wall':>10}"
        f"{f'{args.threads} cpu':>10}{f'{args.threads} wall':>10}"
        f"{'wall x':>8}"
    )
    for condition in ("quiet", "busy"):
        spinners = []
        if condition == "busy":
            context = multiprocessing.get_context("spawn")
            spinners = [context.Process(target=_spin, daemon=True) for _ in range(args.busy)]
            for process in spinners:
                process.start()
        try:
            for model in args.models.split(","):
                r = measure(model, args.threads, args.rounds, args.block_seconds)
                r["condition"] = condition
                results.append(r)
                one, many = r["threads_1"], r[f"threads_{args.threads}"]
                print(f"{model:<9}{condition:<11}{one['median_cpu_s'] * 1e6:10.0f}{one['median_wall_s'] * 1e6:10.0f}"
                      f"{many['median_cpu_s'] * 1e6:10.0f}{many['median_wall_s'] * 1e6:10.0f}"
                      f"{many['median_wall_s'] / one['median_wall_s']:8.2f}", flush=True)
        finally:
            for process in spinners:
                process.terminate()
                process.join()
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("blas_threads", {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                                 "threads": args.threads, "busy_processes": args.busy, "rounds": args.rounds,
                                 "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
