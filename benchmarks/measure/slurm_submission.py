"""A paper-size grid submitted to a real Slurm cluster, and cancelled: how it is split into arrays and
how long submission and cancellation take (docs/scaling.md §3).

Starts the tests' private single-node cluster (tests/e2e/slurm_cluster.py: slurmctld, slurmd and munged on
127.0.0.1, Slurm's default MaxArraySize of 1001 unless ``--max-array-size``), then for each grid runs
``mcsa-bench run -m experiment=<grid> hydra/launcher=submitit_slurm hydra.launcher.array_parallelism=64``
into a fresh SQLite store, waits until the command reports its arrays, interrupts it (SIGINT, as
Ctrl-C does) and waits for it to exit. Reported per grid: jobs, arrays (tasks and throttle of each, from
``scontrol show job``), seconds from the command's start to its report (pre-flight of every job, the
sweep's parent run, the submissions), seconds from SIGINT to exit (scancel, and the wait until every
task has left the queue), and whether the queue is empty after. The 4-CPU node starts a few tasks
before the interrupt; their runs end KILLED.

    python benchmarks/measure/slurm_submission.py [--grids stepsize_robustness] [--max-array-size 1001]

Needs root and Debian's slurmctld, slurmd and munge (as the tests do).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from harness import load_average, machine, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.e2e.slurm_cluster: the private cluster

from tests.e2e.slurm_cluster import SlurmCluster, slurm_missing  # noqa: E402

REPORT = re.compile(r"^Slurm: (\d+) jobs in (\d+) arrays .*: jobs (.*)$")


def submit_and_cancel(cluster: SlurmCluster, grid: str, parallelism: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"mcsa-slurm-{grid}-"))
    try:
        return _submit_and_cancel(cluster, grid, parallelism, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the sweep's pickled jobs: about 0.1 MB each


def _submit_and_cancel(cluster: SlurmCluster, grid: str, parallelism: int, workdir: Path) -> dict:
    command = [sys.executable, "-m", "mcsa_bench.cli", "run", "-m", f"experiment={grid}",
               "hydra/launcher=submitit_slurm", f"hydra.launcher.array_parallelism={parallelism}"]
    start = time.perf_counter()
    driver = subprocess.Popen(command, cwd=workdir, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, **cluster.env})
    lines = []
    for line in driver.stdout:
        lines.append(line)
        if (report := REPORT.match(line.strip())) is not None:
            break
    else:
        raise SystemExit(f"{grid}: the command ended without submitting:\n{''.join(lines[-20:])}")
    submitted = time.perf_counter() - start
    arrays = report.group(3).split(", ")
    listing = cluster.command("squeue", "--noheader", "--array", "--states=all", "--format=%i").split()
    tasks = Counter(task.split("_")[0] for task in listing)
    throttles = {job.get("ArrayJobId"): job.get("ArrayTaskThrottle") for job in cluster.jobs()}
    interrupted = time.perf_counter()
    driver.send_signal(signal.SIGINT)
    rest, _ = driver.communicate(timeout=600)
    return {"grid": grid, "jobs": int(report.group(1)), "arrays": [
                {"job": array, "tasks": tasks[array], "throttle": throttles.get(array)} for array in arrays],
            "seconds_to_submit": round(submitted, 1), "seconds_to_cancel": round(time.perf_counter() - interrupted, 1),
            "exit_status": driver.returncode, "queue_empty_after": cluster.queued() == [],
            "last_lines": rest.strip().splitlines()[-2:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default="stepsize_robustness")
    parser.add_argument("--max-array-size", type=int, default=1001)
    parser.add_argument("--parallelism", type=int, default=64)
    args = parser.parse_args()
    reason = slurm_missing()
    if reason:
        raise SystemExit(reason)
    load_start = load_average()
    cluster = SlurmCluster(max_array_size=args.max_array_size).start()
    try:
        results = [submit_and_cancel(cluster, grid, args.parallelism) for grid in args.grids.split(",")]
    finally:
        cluster.stop()
    for result in results:
        arrays = " + ".join(f"{a['tasks']} (%{a['throttle']})" for a in result["arrays"])
        print(f"{result['grid']}: {result['jobs']} jobs in {len(result['arrays'])} arrays: {arrays}; "
              f"submitted {result['seconds_to_submit']} s after the start, cancelled in "
              f"{result['seconds_to_cancel']} s (exit {result['exit_status']}, queue empty: "
              f"{result['queue_empty_after']})")
    path = save("slurm_submission", {"machine": machine(), "load_average": [load_start, load_average()],
                                     "max_array_size": args.max_array_size, "results": results})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
