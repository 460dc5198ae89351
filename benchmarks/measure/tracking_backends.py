"""What tracking costs per job, and how many metric points per second a store takes, for the three
ways to run the store: MLflow's SQLite file written directly (the default), an `mlflow server` on
SQLite, and an `mlflow server` on PostgreSQL, each with 1, 4 and 16 jobs writing at once.

A job here is its tracking alone, through the project's own path (tracking.store.JobTracker: create
the run with its tags, log its parameters, queue its metrics to the background writer, end the run,
waiting until the store has everything), with the shape of a default job: 40 parameters and 101
evaluations of 10 metrics (T = 10^4, eval_every = 100), so 1,010 points, queued at once (a real job
queues them over its run; the writer then sends one batch per 2 s instead of one per 1,000 points).
Artifacts are left out: they go to the artifact store, the same for both servers.

Each measurement runs ``--jobs`` jobs split over W writer processes (forked after the imports and
started together), into a new experiment of a store made once per back end. Per job it reports
wall seconds (the measurement's wall time / jobs: with W writers, W jobs share it) and CPU seconds
of everything involved: the writers, the tracking server's processes, PostgreSQL's processes; and
points per second (all points / wall time). Measurements alternate (order reversed every other
round) after a warm-up round; medians over rounds, load average printed beside.

    OMP_NUM_THREADS=1 python benchmarks/measure/tracking_backends.py [--writers 1,4,16] [--jobs 16] [--rounds 3]

Needs the postgres extra and Debian's postgresql package (the server is the tests' private one).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from harness import Sample, describe, interleave, load_average, machine, paired_ratio, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private servers

from mcsa_bench.tracking import store  # noqa: E402
from tests.support import MlflowServer, PostgresServer, postgres_missing  # noqa: E402

os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run at" line per run
PARAMS = {f"param.{i}": str(i) for i in range(40)}
EVALUATIONS, METRICS = 101, 10
POINTS_PER_JOB = EVALUATIONS * METRICS
BACKENDS = ("sqlite", "server+sqlite", "server+postgresql")
TICKS = os.sysconf("SC_CLK_TCK")


def track_one_job(uri: str, experiment_id: str, name: str) -> None:
    tracker = store.JobTracker(uri, experiment_id, name, {"mcsa_bench.role": "job"})
    tracker.log_params(PARAMS)
    for evaluation in range(EVALUATIONS):
        tracker(SimpleNamespace(iteration=100 * evaluation,
                                metrics={f"metric_{k}": 1.0 / (1 + evaluation + k) for k in range(METRICS)}))
    tracker.finish("FINISHED")
    if tracker.lost:
        raise SystemExit(f"{name}: the store was lost: {tracker.lost}")


def writer(uri: str, experiment_id: str, jobs: list[str], start, spent) -> None:
    """Track ``jobs`` once ``start`` is set; put the CPU seconds they took on ``spent``."""
    store._client_of.cache_clear()  # a client (and its connections) of its own, not the parent's
    store._client(uri)
    start.wait()
    cpu = time.process_time()
    for name in jobs:
        track_one_job(uri, experiment_id, name)
    spent.put(time.process_time() - cpu)


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants, live ones and those already reaped."""
    parents, times = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid], times[pid] = int(fields[1]), sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total = 0
    for pid in times:
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += times[pid]
    return total / TICKS


def block(uri: str, writers: int, jobs: int, servers: list[int]):
    """A measurement of ``jobs`` jobs over ``writers`` processes into a fresh experiment of ``uri``."""
    context = multiprocessing.get_context("fork")

    def run() -> Sample:
        experiment_id = store.prepare_store(uri, f"bench-{time.time_ns()}")
        store._client_of.cache_clear()  # no open connection is forked into the writers
        start, spent = context.Event(), context.SimpleQueue()
        names = [f"job-{i}" for i in range(jobs)]
        processes = [context.Process(target=writer, args=(uri, experiment_id, names[w::writers], start, spent))
                     for w in range(writers)]
        for process in processes:
            process.start()
        time.sleep(0.5 + 0.05 * writers)  # each writer makes its client before the clock starts
        server_cpu = sum(map(tree_cpu, servers))
        wall = time.perf_counter()
        start.set()
        for process in processes:
            process.join()
        wall = time.perf_counter() - wall
        if any(process.exitcode for process in processes):
            raise SystemExit(f"a writer failed on {store.redacted(uri)}")
        cpu = sum(spent.get() for _ in processes) + sum(map(tree_cpu, servers)) - server_cpu
        return Sample(cpu, wall, jobs)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", default="1,4,16")
    parser.add_argument("--jobs", type=int, default=16, help="jobs per measurement, split over the writers")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-workers", type=int, default=2, help="`mlflow server --workers`")
    args = parser.parse_args()
    if (reason := postgres_missing()) is not None:
        sys.exit(f"tracking_backends: {reason}")
    writer_counts = [int(w) for w in args.writers.split(",")]
    info, load_start = machine(), load_average()
    with tempfile.TemporaryDirectory(prefix="tracking-backends-") as work:
        work = Path(work)
        postgres = PostgresServer().start()
        servers = {"sqlite": MlflowServer(work / "sqlite-server", workers=args.server_workers),
                   "postgresql": MlflowServer(work / "postgresql-server", workers=args.server_workers,
                                              backend_store_uri=postgres.create_database())}
        try:
            for server in servers.values():
                server.directory.mkdir()
                server.start()
            stores = {"sqlite": (f"sqlite:///{work / 'direct.db'}", []),
                      "server+sqlite": (servers["sqlite"].uri, [servers["sqlite"].process.pid]),
                      "server+postgresql": (servers["postgresql"].uri,
                                            [servers["postgresql"].process.pid, postgres.postmaster_pid])}
            blocks = {f"{backend} x{w}": block(stores[backend][0], w, args.jobs, stores[backend][1])
                      for w in writer_counts for backend in BACKENDS}
            series = interleave(blocks, args.rounds)
        finally:
            for server in servers.values():
                server.kill()
            postgres.stop()
    load_end = load_average()
    print(describe(info, load_start, load_end))
    print(f"# {args.jobs} jobs per measurement of {POINTS_PER_JOB} points each; mlflow server --workers "
          f"{args.server_workers}; medians of {args.rounds} rounds")
    print("# wall s/job: the measurement's wall time / jobs; CPU s/job: writers + server + database; "
          "x sqlite: wall and CPU against SQLite direct at the same writers (median of the rounds' ratios)")
    print(f"{'store':<20}{'writers':>8}{'points/s':>10}{'wall s/job':>12}{'CPU s/job':>11}{'wall x sqlite':>15}"
          f"{'CPU x sqlite':>14}")
    results = []
    for name, s in series.items():
        backend, writers = name.rsplit(" x", 1)
        direct = series[f"sqlite x{writers}"]
        row = {"backend": backend, "writers": int(writers), "points_per_s": POINTS_PER_JOB / s.median_wall,
               "wall_s_per_job": s.median_wall, "cpu_s_per_job": s.median_cpu,
               "wall_vs_sqlite": paired_ratio(s, direct, "wall"), "cpu_vs_sqlite": paired_ratio(s, direct),
               **s.as_dict()}
        results.append(row)
        print(f"{backend:<20}{writers:>8}{row['points_per_s']:10.0f}{s.median_wall:12.3f}{s.median_cpu:11.3f}"
              f"{row['wall_vs_sqlite']:15.2f}{row['cpu_vs_sqlite']:14.2f}")
    path = save("tracking_backends", {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                                      "jobs": args.jobs, "points_per_job": POINTS_PER_JOB, "rounds": args.rounds,
                                      "server_workers": args.server_workers, "results": results})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
