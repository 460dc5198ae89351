"""What the store does under contention, through the real CLI (issue 39, docs/reliability.md):

- ``resume``: two identical sweeps with ``resume=true`` started at once, ``--cells`` cells each, on an
  SQLite file and on a private PostgreSQL (straight, no server), ``--rounds`` times each: how many cells
  ended with more than one FINISHED run, of how many, and the two sweeps' exit statuses.
- ``creation``: the issue's joblib sweep, one job per worker so every worker creates its run at about the
  same moment, ``mcsa-bench run -m hydra/launcher=joblib hydra.launcher.n_jobs=N model.dim=10
  n_iters=<--iters> eval_every=2 seed='range(N)' tracking.uri=sqlite:///...``, for each N of ``--jobs``
  on a new SQLite store: the exit status, the jobs without a FINISHED run, runs left RUNNING, lines
  saying a run could not be created, traceback lines, and the retry's one line. The contention limit
  is the largest N without a failure, with the machine's load printed beside.

    python benchmarks/measure/store_contention.py [resume] [creation] [--cells 8] [--rounds 2]
        [--jobs 8,16,24] [--iters 1000]

Needs the postgres extra and Debian's postgresql package for the PostgreSQL half (skipped without).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import describe, load_average, machine, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private PostgreSQL

from tests.support import PostgresServer, postgres_missing  # noqa: E402


def command(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def job_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mcsa-bench")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], filter_string="tags.`mcsa_bench.role` = 'job'",
                              max_results=50_000)


def concurrent_resume(uri: str, cells: int, workdir: Path) -> dict:
    """Two identical resuming sweeps at once: cells FINISHED more than once, of how many."""
    overrides = ["model.dim=3", "n_iters=2000", "eval_every=500", f"seed=range({cells})", "resume=true",
                 f"tracking.uri={uri}"]
    sweeps = [command("run", "-m", *overrides, cwd=workdir) for _ in range(2)]
    outputs = [sweep.communicate(timeout=3600) for sweep in sweeps]
    finished = collections.Counter(run.data.tags["mcsa_bench.config_hash"] for run in job_runs(uri)
                                   if run.info.status == "FINISHED")
    return {"cells": cells, "cells_run_twice": sum(count > 1 for count in finished.values()),
            "cells_finished": len(finished), "exit_statuses": [sweep.returncode for sweep in sweeps],
            "tracebacks": sum("Traceback" in stderr for _, stderr in outputs)}


def measure_resume(cells: int, rounds: int) -> dict:
    results: dict[str, list] = {"sqlite": [], "postgresql": []}
    for round_ in range(rounds):
        with tempfile.TemporaryDirectory() as directory:
            results["sqlite"].append(concurrent_resume(f"sqlite:///{directory}/mlflow.db", cells, Path(directory)))
        missing = postgres_missing()
        if missing:
            results["postgresql"] = f"skipped: {missing}"
            continue
        server = PostgresServer().start()
        try:
            with tempfile.TemporaryDirectory() as directory:
                results["postgresql"].append(concurrent_resume(server.create_database(f"round{round_}"), cells,
                                                               Path(directory)))
        finally:
            server.stop()
        print(f"round {round_}: {results}", flush=True)
    return results


def contended_creation(jobs: int, iters: int) -> dict:
    """The issue's joblib sweep with one job per worker on a new SQLite store."""
    with tempfile.TemporaryDirectory() as directory:
        uri = f"sqlite:///{directory}/s.db"
        load = load_average()
        sweep = command("run", "-m", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}", "model.dim=10",
                        f"n_iters={iters}", "eval_every=2", f"seed=range({jobs})", f"tracking.uri={uri}",
                        cwd=Path(directory))
        _, stderr = sweep.communicate(timeout=3600)
        runs = job_runs(uri)
        statuses = collections.Counter(run.info.status for run in runs)
        return {"jobs": jobs, "exit_status": sweep.returncode, "load_average_at_start": load,
                "jobs_without_a_finished_run": jobs - statuses["FINISHED"], "running_left": statuses["RUNNING"],
                "cannot_create_lines": stderr.count("cannot create a run"),
                "traceback_lines": stderr.count("Traceback"), "stderr_lines": len(stderr.splitlines()),
                "retry_lines": stderr.count("did not take a write")}


def measure_creation(jobs: list[int], iters: int) -> list[dict]:
    results = []
    for count in jobs:
        results.append(contended_creation(count, iters))
        print(results[-1], flush=True)
        if results[-1]["exit_status"] != 0:
            break
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", choices=["resume", "creation"], default=["resume", "creation"])
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", default="8,16,24")
    parser.add_argument("--iters", type=int, default=1000)
    args = parser.parse_args()
    info, start = machine(), load_average()
    payload: dict = {"machine": info}
    if "resume" in args.parts:
        payload["resume"] = measure_resume(args.cells, args.rounds)
    if "creation" in args.parts:
        payload["creation"] = measure_creation([int(n) for n in args.jobs.split(",")], args.iters)
    end = load_average()
    payload["load_average"] = [start, end]
    print(describe(info, start, end))
    print(save("store_contention", payload))


if __name__ == "__main__":
    main()
