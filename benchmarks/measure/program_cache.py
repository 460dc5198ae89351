"""What the accelerated backend's program cache saves (accel/programs.py), on this machine's CPU.

- In one process: a cell's programs compiled (a fresh cache) against the same programs found for a
  configuration that differs only in the learning rate (a cache hit: the trace, no compile),
  alternating compile/hit for ``--rounds`` rounds; the medians and the median of the rounds' ratios.
  Models: logistic/pima pMCSA (N = 10 IMH chains, Adam) and the stepsize_robustness grid's cell
  (Gaussian target, D = 100, ν = 500, pMCSA N = 10): R = 20 replicates, as that grid's.
- Across processes: a whole process (import, components, programs, a short run) with JAX's
  persistent compilation cache empty (a new directory) against the same process started again on
  that directory, alternating cold/warm; the persistent cache's own threshold applies
  (``jax_persistent_cache_min_compile_time_secs``, 1 s by default).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/program_cache.py [--rounds 3]

Results: benchmarks/results/program_cache.json (benchmarks/measure/grid_costs.py --backend jax reads
the hit/compile ratio from it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure.harness import describe, load_average, machine, save  # noqa: E402

REPLICATES = 20
N_ITERS = 20
CASES = {
    "logistic_pima": {"model": ("logistic", {"dataset": "pima"}), "estimator": "pmcsa", "n_samples": 10},
    "stepsize_robustness": {"model": ("gaussian", {"dim": 100, "nu": 500}), "estimator": "pmcsa",
                            "n_samples": 10},
}
#: one process of a re-run: the cell's programs and a short run; prints its seconds as JSON
PROCESS = """
import json, sys, time
clock = time.perf_counter()
from mcsa_bench import get_registry
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.assembly import assemble
case, n_iters, replicates = json.loads(sys.argv[1])
case["model"] = tuple(case["model"])
parts = assemble(get_registry(), optimizer=("adam", {"lr": 0.01}), **case)
ready = time.perf_counter()
result = run_cell(*parts.jax_twins(n_iters), CellSettings(n_iters=n_iters, eval_every=10), range(replicates))
print(json.dumps({"process_s": time.perf_counter() - clock, "programs_s": result.compile_seconds,
                  "until_components_s": ready - clock}))
"""


def cell_seconds(case: dict, lr: float) -> float:
    """Seconds run_cell spent getting the cell's programs (compile_seconds)."""
    from mcsa_bench import get_registry
    from mcsa_bench.accel.engine import CellSettings, run_cell
    from mcsa_bench.assembly import assemble

    parts = assemble(get_registry(), optimizer=("adam", {"lr": lr}), **case)
    return run_cell(*parts.jax_twins(N_ITERS), CellSettings(n_iters=N_ITERS, eval_every=10),
                    range(REPLICATES)).compile_seconds


def in_process(case: dict, rounds: int) -> dict:
    from mcsa_bench.accel.programs import PROGRAMS

    compiles, hits = [], []
    cell_seconds(case, 0.005)  # imports, JAX's own small programs
    for _ in range(rounds):
        PROGRAMS.clear()
        compiles.append(cell_seconds(case, 0.01))
        hits.append(cell_seconds(case, 0.02))
    return {"compile_s": compiles, "hit_s": hits, "median_compile_s": statistics.median(compiles),
            "median_hit_s": statistics.median(hits),
            "hit_over_compile": statistics.median(h / c for h, c in zip(hits, compiles))}


def one_process(case: dict, cache: str) -> dict:
    env = {**os.environ, "MCSA_BENCH_JAX_CACHE": cache, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-c", PROCESS, json.dumps([case, N_ITERS, REPLICATES])]
    found = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(found.stdout.splitlines()[-1])


def across_processes(case: dict, rounds: int) -> dict:
    cold, warm = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as directory:
            cold.append(one_process(case, directory))
            warm.append(one_process(case, directory))
    summary = {key: (statistics.median(c[key] for c in cold), statistics.median(w[key] for w in warm))
               for key in ("process_s", "programs_s")}
    return {"cold": cold, "warm": warm, "median_cold_warm": summary,
            "warm_over_cold_process": statistics.median(w["process_s"] / c["process_s"] for c, w in zip(cold, warm))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["MCSA_BENCH_JAX_CACHE"] = "off"  # the in-process part: the process's own cache alone
    info, load_start = machine(), load_average()
    results = {"machine": info, "replicates": REPLICATES, "n_iters": N_ITERS, "rounds": args.rounds, "cases": {}}
    for name in args.cases:
        clock = time.perf_counter()
        found = {"in_process": in_process(CASES[name], args.rounds),
                 "across_processes": across_processes(CASES[name], args.rounds), "load_average": load_average()}
        results["cases"][name] = found
        inside, outside = found["in_process"], found["across_processes"]["median_cold_warm"]
        print(f"{name}: programs compiled {inside['median_compile_s']:.2f} s, found {inside['median_hit_s']:.3f} s "
              f"(hit/compile {inside['hit_over_compile']:.3f}); a process cold {outside['process_s'][0]:.1f} s "
              f"(programs {outside['programs_s'][0]:.1f} s), again on the persistent cache "
              f"{outside['process_s'][1]:.1f} s "
              f"(programs {outside['programs_s'][1]:.1f} s); {time.perf_counter() - clock:.0f} s, "
              f"load {found['load_average'][0]}", flush=True)
    results["load_average_start"], results["load_average_end"] = load_start, load_average()
    save("program_cache", results)
    print(describe(info, load_start, load_average()))


if __name__ == "__main__":
    main()
