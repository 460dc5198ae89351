"""What a sweep costs around its optimization: whole sweeps through the real CLI, against the ideal.

The sweeps of issue 24, each in a fresh directory with a fresh SQLite store, `hydra/launcher=joblib`
with 2 workers:

- ``table``: the logistic table's 48-job sample (3 data sets × 4 schemes × seeds 0-3, T = 10^4);
- ``short``: 24 jobs of T = 3000 on pima (4 schemes × seeds 0-5);
- ``floor``: 2 jobs of one iteration: what any sweep costs however small its jobs (its ratio is
  meaningless; its wall and CPU seconds are the point).

The ideal is the optimization alone spread over the workers: Σ over runs of the run's own
``wall_time`` metric (the iterations, evaluation excluded) / 2. From the runs' start and end times
in the store, the rest splits into: before the first run starts (pre-flight, the store, the
workers' start-up), inside runs but outside the iterations (evaluation, tracking, set-up), between
runs (a worker's composition and Hydra's job set-up), and after the last run ends (the summary,
the exit). CPU s: user and system time of the command and every process it started.

    python benchmarks/measure/sweep_overhead.py [--sweeps table short floor] [--rounds 1] [--against DIR]
        [--variant OVERRIDE ...]

``--against DIR`` runs every sweep a second time, interleaved, with the package imported from DIR
(a checkout of an earlier commit, e.g. ``git worktree add DIR <commit>``, with ``DIR/mcsa_bench/conf``
a link to ``DIR/conf`` as an install makes it), for ratios of two versions measured in one run.
``--variant OVERRIDE ...`` likewise runs every sweep a second time with these overrides added (e.g.
``eval_schedule=geometric``), as the row ``variant``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from harness import load_average, machine, save

SWEEPS = {
    "table": ["experiment=logistic_pima,logistic_heart,logistic_german", "estimator=pmcsa,jsa,msc,msc_rb",
              "seed=range(4)"],
    "short": ["experiment=logistic_pima", "estimator=pmcsa,jsa,msc,msc_rb", "seed=range(6)", "n_iters=3000"],
    # the floor under every sweep: two jobs of one iteration (start-up, store, workers, summary, exit)
    "floor": ["experiment=logistic_pima", "seed=0,1", "n_iters=1"],
}
WORKERS = 2
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run_sweep(name: str, code: str | None = None, overrides: tuple[str, ...] = ()) -> dict:
    with tempfile.TemporaryDirectory(prefix="mcsa-sweep-") as directory:
        uri = f"sqlite:///{directory}/mlflow.db"
        command = [
            sys.executable,
            "-m",
            "mcsa_bench.cli",
            "run",
            "-m",
            *SWEEPS[name],
            *overrides,
            "hydra/launcher=joblib",
            f"hydra.launcher.n_jobs={WORKERS}",
            f"tracking.uri={uri}",
            f"hydra.sweep.dir={directory}/sweep",
        ]
        started, cpu_before = time.time(), _children_cpu()
        env = ENV if code is None else {**ENV, "PYTHONPATH": code}
        done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True)
        ended = time.time()
        _reap_orphans()
        cpu = _children_cpu() - cpu_before
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}")
        return {"sweep": name, "wall_s": ended - started, "cpu_s": cpu, **split_time(uri, started, ended)}


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``):
    a process that outlives the command (loky's resource tracker, a worker ending) counts its CPU,
    and its children's, only once a process waits for it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


def _reap_orphans() -> None:
    """Wait for every descendant the command left behind."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _children_cpu() -> float:
    """User and system CPU of every ended descendant (the command, its workers, git)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split_time(uri: str, started: float, ended: float) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mcsa-bench")
    runs = [run for run in client.search_runs([experiment.experiment_id], max_results=10_000)
            if "mlflow.parentRunId" in run.data.tags]  # the jobs, not the sweep's parent run
    optimization = [run.data.metrics["wall_time"] for run in runs]
    inside = [(run.info.end_time - run.info.start_time) / 1e3 for run in runs]
    first_start = min(run.info.start_time for run in runs) / 1e3
    last_end = max(run.info.end_time for run in runs) / 1e3
    ideal = sum(optimization) / WORKERS
    return {
        "jobs": len(runs), "optimization_s": sum(optimization), "ideal_s": ideal,
        "before_first_run_s": first_start - started, "after_last_run_s": ended - last_end,
        "inside_runs_outside_iterations_s_per_job": statistics.median(i - o for i, o in zip(inside, optimization)),
        "between_runs_s_per_job": max(0.0, (last_end - first_start) * WORKERS - sum(inside)) / len(runs),
    }


def print_medians(rows: list[dict]) -> None:
    """Per version and sweep over the rounds: median wall and CPU seconds, and the median ratio to the
    ideal (each round's own ratio: the machine's speed drifts between sweeps, and a row's ideal with it)."""
    print("# medians over the rounds: code, sweep, wall s, CPU s, ratio")
    for code, sweep in dict.fromkeys((row["code"], row["sweep"]) for row in rows):
        same = [row for row in rows if (row["code"], row["sweep"]) == (code, sweep)]
        ratio = ("-" if sweep == "floor" else
                 f"{statistics.median(row['wall_s'] / row['ideal_s'] for row in same):.2f}")
        print(f"# {code:<8}{sweep:<7}{statistics.median(row['wall_s'] for row in same):8.1f}"
              f"{statistics.median(row['cpu_s'] for row in same):7.1f}{ratio:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEPS), choices=list(SWEEPS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", metavar="DIR", help="an earlier checkout, run interleaved with this one")
    parser.add_argument("--variant", nargs="+", metavar="OVERRIDE", default=[],
                        help="overrides added to every sweep in a second run of it, interleaved with this one")
    args = parser.parse_args()
    adopt_orphans()
    info, load_start = machine(), load_average()
    versions = {"this": (None, ()), **({"against": (args.against, ())} if args.against else {}),
                **({"variant": (None, tuple(args.variant))} if args.variant else {})}
    print(f"{'code':<8}{'sweep':<7}{'jobs':>5}{'wall s':>8}{'CPU s':>7}{'ideal s':>9}{'ratio':>7}{'before s':>10}"
          f"{'in-run s/job':>14}{'between s/job':>15}{'after s':>9}{'load':>6}")
    rows = []
    for round_ in range(args.rounds):
        order = [(version, name) for name in args.sweeps for version in versions]
        for version, name in order if round_ % 2 == 0 else reversed(order):
            row = {"code": version, **run_sweep(name, *versions[version]), "load_average": load_average()[0]}
            rows.append(row)
            print(f"{version:<8}{name:<7}{row['jobs']:5d}{row['wall_s']:8.1f}{row['cpu_s']:7.1f}{row['ideal_s']:9.1f}"
                  + (f"{row['wall_s'] / row['ideal_s']:7.2f}" if name != "floor" else f"{'-':>7}")
                  + f"{row['before_first_run_s']:10.1f}{row['inside_runs_outside_iterations_s_per_job']:14.2f}"
                  f"{row['between_runs_s_per_job']:15.2f}{row['after_last_run_s']:9.1f}{row['load_average']:6.1f}",
                  flush=True)
    print_medians(rows)
    path = save("sweep_overhead", {"machine": info, "against": args.against, "variant": args.variant,
                                   "load_average_start": load_start,
                                   "load_average_end": load_average(), "workers": WORKERS, "results": rows})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
