"""What each Hydra launcher costs per job: a sweep of one job and a sweep of K jobs of a tiny
setting (3-D gaussian, 10 iterations: the optimization itself takes milliseconds), each through the
real CLI in a fresh process with tracking to a fresh SQLite store; the marginal cost of a job is
(time(K) - time(1)) / (K - 1), so the launcher's own start-up (a Ray cluster, a joblib pool) is
left out. Launchers alternate within each round (order reversed every other round); medians over
rounds of wall time and of the CPU time of the command and all its children.

    python benchmarks/measure/launchers.py [--launchers basic,joblib,submitit_local,ray] [--jobs 9] [--rounds 3]

joblib runs ``hydra.launcher.n_jobs=2`` workers (its marginal wall time is per job with two running
at once); ray starts a local cluster of its own per sweep (``ray.init()``, usage statistics off).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import load_average, machine, save

SETTING = ["model=gaussian", "model.dim=3", "n_iters=10", "eval_every=10"]
LAUNCHER_OVERRIDES = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "submitit_local": ["hydra/launcher=submitit_local"],
    "ray": ["hydra/launcher=ray", "+hydra.launcher.ray.init.object_store_memory=null",
            "+hydra.launcher.ray.init.num_cpus=2"],
}
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}  # Ray's usage statistics would leave the machine


def sweep(executable: str, launcher: str, jobs: int) -> tuple[float, float]:
    """(wall s, CPU s of the process tree) of one sweep of ``jobs`` jobs into a fresh store."""
    with tempfile.TemporaryDirectory(prefix="launchers", dir="/tmp") as work:
        argv = [executable, "run", "-m", *SETTING, *LAUNCHER_OVERRIDES[launcher], f"seed=range({jobs})",
                f"tracking.uri=sqlite:///{Path(work) / 'mlflow.db'}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(argv, cwd=work, env=ENV, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{launcher} with {jobs} jobs failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launchers", default=",".join(LAUNCHER_OVERRIDES))
    parser.add_argument("--jobs", type=int, default=9, help="K, the jobs of the larger sweep")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    executable = shutil.which("mcsa-bench") or sys.exit("mcsa-bench is not on PATH (activate the venv)")
    launchers = args.launchers.split(",")
    info, load_start = machine(), load_average()
    samples: dict[str, list[dict]] = {name: [] for name in launchers}
    for r in range(args.rounds):
        for name in launchers if r % 2 == 0 else reversed(launchers):
            (wall_1, cpu_1), (wall_k, cpu_k) = sweep(executable, name, 1), sweep(executable, name, args.jobs)
            samples[name].append({"wall_1": wall_1, "cpu_1": cpu_1, "wall_k": wall_k, "cpu_k": cpu_k})
            print(f"# round {r}: {name}: 1 job {wall_1:.1f} s, {args.jobs} jobs {wall_k:.1f} s", flush=True)
    print(f"{'launcher':<16}{'1-job sweep s':>14}{'per job wall s':>16}{'per job cpu s':>15}")
    results = []
    for name in launchers:
        rows = samples[name]
        median = lambda key: statistics.median(row[key] for row in rows)
        per_job = lambda clock: statistics.median(
            (row[f"{clock}_k"] - row[f"{clock}_1"]) / (args.jobs - 1) for row in rows
        )
        result = {"launcher": name, "overrides": LAUNCHER_OVERRIDES[name], "one_job_sweep_wall_s": median("wall_1"),
                  "per_job_wall_s": per_job("wall"), "per_job_cpu_s": per_job("cpu"), "rounds": rows}
        results.append(result)
        print(f"{name:<16}{result['one_job_sweep_wall_s']:14.2f}{result['per_job_wall_s']:16.2f}{result['per_job_cpu_s']:15.2f}")
    path = save("launchers", {"machine": info, "load_average_start": load_start, "load_average_end": load_average(),
                              "jobs": args.jobs, "setting": SETTING, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
