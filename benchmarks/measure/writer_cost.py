"""What the store writer pays per metric point: a run's evaluations (6 metrics each) sent to an SQLite or
PostgreSQL store in log_batch calls of 1, 10 and 101 evaluations (6, 60, 606 points: a slow job's
writer sends each evaluation alone, every FLUSH_SECONDS at most; a fast job's writer all of a run's
at once), through MLflow's client against straight into its tables (tracking.tablewriter.DirectMetrics,
what a job's writer uses for a database store since). Then whole jobs as paper_store.py writes them
(tracking.store.JobTracker: run, tags, params, points, end) with each path. Blocks alternate
(harness.interleave), CPU and wall seconds per point.

    OMP_NUM_THREADS=1 python benchmarks/measure/writer_cost.py [--backend sqlite|postgresql] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from harness import Sample, benchmark_store, interleave, load_average, machine, paired_ratio, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private servers

import mcsa_bench.tracking.store as store  # noqa: E402
from mcsa_bench.tracking.tablewriter import DirectMetrics  # noqa: E402

EVALUATIONS, METRICS = 101, ("kl_inclusive", "grad_norm", "acceptance_rate", "wall_time", "cis_ess", "test_lpd")
POINTS = EVALUATIONS * len(METRICS)
RUNS_PER_BLOCK = 4


def points():
    from mlflow.entities import Metric

    return [Metric(key, 1.0 / (1 + e + k), 1_000 + e, 100 * e) for e in range(EVALUATIONS)
            for k, key in enumerate(METRICS)]


def batches_block(uri: str, experiment_id: str, direct: bool, evaluations_per_call: int):
    """RUNS_PER_BLOCK runs' points in calls of ``evaluations_per_call`` evaluations (runs made outside the clock)."""
    import time

    client = store._client(uri)
    writes = DirectMetrics(client) if direct else client
    size = evaluations_per_call * len(METRICS)

    def block() -> Sample:
        runs = [client.create_run(experiment_id).info.run_id for _ in range(RUNS_PER_BLOCK)]
        every = points()
        cpu, wall = time.process_time(), time.perf_counter()
        for run_id in runs:
            for start in range(0, POINTS, size):
                writes.log_batch(run_id, metrics=every[start:start + size])
        return Sample(time.process_time() - cpu, time.perf_counter() - wall, RUNS_PER_BLOCK * POINTS)
    return block


def jobs_block(uri: str, experiment_id: str, direct: bool):
    """RUNS_PER_BLOCK jobs tracked as a job tracks them, every evaluation queued at once."""
    import time

    def block() -> Sample:
        is_database_store = store.is_database_store
        store.is_database_store = lambda uri: direct
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            for number in range(RUNS_PER_BLOCK):
                tracker = store.JobTracker(uri, experiment_id, f"job {number}", {"seed": str(number)})
                tracker.log_params({f"setting.{i}": str(i) for i in range(40)})
                for e in range(EVALUATIONS):
                    values = {k: 1.0 / (1 + e + i) for i, k in enumerate(METRICS)}
                    tracker(SimpleNamespace(iteration=100 * e, metrics=values))
                tracker.finish("FINISHED")
                assert tracker.lost is None, tracker.lost
            return Sample(time.process_time() - cpu, time.perf_counter() - wall, RUNS_PER_BLOCK * POINTS)
        finally:
            store.is_database_store = is_database_store
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    directory = Path(tempfile.mkdtemp(prefix="writer-cost-"))
    os.chdir(directory)  # a database server's experiment keeps its artifacts in ./mlruns
    uri, postgres = benchmark_store(args.backend, directory, "writer")
    info, load_start, results = machine(), load_average(), {}
    try:
        experiment_id = store.prepare_store(uri, "writer-cost")
        comparisons = {f"log_batch of {n} evaluation(s)": {
            path: batches_block(uri, experiment_id, path == "direct", n) for path in ("client", "direct")}
            for n in (1, 10, EVALUATIONS)}
        comparisons["whole jobs (JobTracker)"] = {path: jobs_block(uri, experiment_id, path == "direct")
                                                 for path in ("client", "direct")}
        for name, blocks in comparisons.items():
            series = interleave(blocks, args.rounds)
            results[name] = {path: s.as_dict() for path, s in series.items()}
            results[name]["client_over_direct_cpu"] = paired_ratio(series["client"], series["direct"])
            results[name]["client_over_direct_wall"] = paired_ratio(series["client"], series["direct"], "wall")
            client, direct, ratios = series["client"], series["direct"], results[name]
            print(f"{name:<32} per point: client {client.median_cpu * 1e6:6.0f} us CPU "
                  f"{client.median_wall * 1e6:6.0f} us wall | direct {direct.median_cpu * 1e6:6.0f} us CPU "
                  f"{direct.median_wall * 1e6:6.0f} us wall | ratio CPU {ratios['client_over_direct_cpu']:.1f}, "
                  f"wall {ratios['client_over_direct_wall']:.1f} (load {load_average()[0]})", flush=True)
    finally:
        if postgres is not None:
            postgres.stop()
    save(f"writer_cost_{args.backend}", {"machine": info, "load_average": [load_start, load_average()],
                                         "points_per_run": POINTS, "runs_per_block": RUNS_PER_BLOCK,
                                         "results": results})


if __name__ == "__main__":
    main()
