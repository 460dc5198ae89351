"""A paper-size store, built with the project's writer, and what reading it costs: `mcsa-bench report`
of the largest grid and of the whole experiment (the bulk reader against MLflow's client API),
`mcsa-bench runs --fix-stale`, and the UI's first page of runs.

The store holds the seven paper grids as seven sweeps of one experiment (docs/scaling.md §8: 12,060
jobs), each a parent run with its job list (sweep_jobs.json) and children as a job records them
(tracking.record: role, parent, overrides, key-setting and config-hash tags, 40 params) with 101
evaluations of 6 metrics (606 points, a default job's T = 10^4 at eval_every = 100). Every run goes
through tracking.store.JobTracker, the path a job takes (run with tags, params in batches of 100,
metrics queued to the background writer in log_batch calls of 1,000, end of run), from W writer
processes. ``--fraction 0.1`` builds a tenth of every grid.

    OMP_NUM_THREADS=1 python benchmarks/measure/paper_store.py --fraction 0.1 [--backend sqlite|postgresql]
        [--writers 2] [--store DIR] [--keep]

Reads: each timing is one process of `mcsa-bench report ... --out DIR` (the command as a user runs
it, figures included) or of `runs --fix-stale`; the client API's report is the same command with
the bulk reader replaced by tracking.tables.ClientReader. The UI's listing is MLflow's server
answering the request its runs page makes first (runs/search, 100 runs, newest first).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from harness import benchmark_store, describe, load_average, machine, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private servers

from mcsa_bench.tracking import store  # noqa: E402
from mcsa_bench.tracking.record import (  # noqa: E402
    CONFIG_HASH_TAG,
    OVERRIDES_TAG,
    PARENT_TAG,
    ROLE_JOB,
    ROLE_SWEEP,
    ROLE_TAG,
    SWEEP_JOBS_ARTIFACT,
    SWEEP_TAG,
    SweepJobs,
    encode_sweep_jobs,
)

os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
#: the paper grids' job counts (docs/scaling.md §8) and the result metric each reports
GRIDS = {"gaussian_variance": (160, "kl_inclusive"), "stepsize_robustness": (6400, "kl_inclusive"),
         "logistic": (2100, "test_lpd"), "gp_classification": (1800, "test_lpd"), "bnn": (200, "test_lpd"),
         "gp_regression": (200, "test_lpd"), "marginal_likelihood": (1200, "log_z")}
METHODS = ("pmcsa", "jsa", "msc", "msc_rb", "msc+hmc", "elbo")
DATASETS = ("pima", "heart", "ionosphere", "sonar")
EVALUATIONS = 101
DIAGNOSTICS = ("grad_norm", "acceptance_rate", "wall_time", "cis_ess", "test_accuracy")
EXPERIMENT = "paper"


def job_record(grid: str, number: int) -> tuple[str, dict[str, str], dict[str, str]]:
    """A job's overrides, key-setting tags and params: method, data set and seed cycle through the grid."""
    method = METHODS[number % len(METHODS)]
    dataset = DATASETS[number // len(METHODS) % len(DATASETS)]
    seed = number // (len(METHODS) * len(DATASETS))
    scheme, _, kernel = method.partition("+")
    settings = {"method": method, "model": grid, "dataset": dataset, "scheme": scheme, "kernel": kernel or "imh",
                "family": "meanfield_gaussian", "optimizer": "adam", "lr": "0.01", "N": "10", "T": "10000",
                "seed": str(seed)}
    params = {f"setting.{i}": str(i) for i in range(29)}
    params.update({"model.name": grid, "model.dataset": dataset, "estimator.name": scheme,
                   "kernel.name": kernel or "imh", "family.name": "meanfield_gaussian", "optimizer.name": "adam",
                   "optimizer.lr": "0.01", "n_samples": "10", "n_iters": "10000", "seed": str(seed),
                   "eval_every": "100"})
    return f"experiment={grid} method={method} model.dataset={dataset} seed={seed}", settings, params


def jobs_of(fraction: float) -> dict[str, int]:
    return {grid: max(1, round(jobs * fraction)) for grid, (jobs, _) in GRIDS.items()}


def write_jobs(uri: str, experiment_id: str, work: list[tuple[str, str, int]], done) -> None:
    """Track each (grid, parent, job number) as a job does; put the count on ``done``."""
    for grid, parent, number in work:
        overrides, settings, params = job_record(grid, number)
        tags = {ROLE_TAG: ROLE_JOB, PARENT_TAG: parent, OVERRIDES_TAG: overrides, SWEEP_TAG: grid,
                CONFIG_HASH_TAG: f"{abs(hash((grid, number))):016x}", **settings}
        tracker = store.JobTracker(uri, experiment_id, f"{settings['method']}-{grid}-{number}", tags)
        tracker.log_params(params)
        metric = GRIDS[grid][1]
        effect = METHODS.index(settings["method"]) * 0.01 + (number % 7) * 0.001
        for evaluation in range(EVALUATIONS):
            values = {name: 1.0 / (1 + evaluation + k) for k, name in enumerate(DIAGNOSTICS)}
            values["wall_time"] = 0.02 * evaluation * (1 + effect)  # seconds of optimization so far
            values[metric] = -0.5 - effect - 1.0 / (1 + evaluation)
            tracker(SimpleNamespace(iteration=100 * evaluation, metrics=values))
        tracker.finish("FINISHED")
        if tracker.lost:
            raise SystemExit(f"the store was lost: {tracker.lost}")
    done.put(len(work))


def build(uri: str, fraction: float, writers: int) -> dict:
    """The store: a sweep parent per grid (with its job list), its jobs from ``writers`` processes."""
    experiment_id = store.prepare_store(uri, EXPERIMENT)
    client = store._client(uri)
    start = time.perf_counter()
    work = []
    for grid, count in jobs_of(fraction).items():
        parent = client.create_run(experiment_id, run_name=f"sweep {grid}", tags={
            ROLE_TAG: ROLE_SWEEP, SWEEP_TAG: grid, OVERRIDES_TAG: f"experiment={grid}"}).info.run_id
        overrides = tuple(job_record(grid, number)[0] for number in range(count))
        client.log_text(parent, encode_sweep_jobs(SweepJobs(overrides, False)), SWEEP_JOBS_ARTIFACT)
        work += [(grid, parent, number) for number in range(count)]
    # spawned, not forked: a forked writer would share the parent's database connections (MLflow caches
    # one store, and its connection pool, per URI)
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    processes = [context.Process(target=write_jobs, args=(uri, experiment_id, work[w::writers], done))
                 for w in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a writer failed (exit {process.exitcode})")
    written = sum(done.get() for _ in processes)
    for parent in client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = '{ROLE_SWEEP}'"):
        client.set_terminated(parent.info.run_id, "FINISHED")
    seconds = time.perf_counter() - start
    points = written * EVALUATIONS * (len(DIAGNOSTICS) + 1)
    return {"runs": written, "sweeps": len(GRIDS), "points": points, "seconds": seconds,
            "points_per_second": points / seconds}


#: a replicated job's seed: the original's + copy number x SEED_OFFSET (a new replication, not a rerun)
SEED_OFFSET = 100_000


def replicate(database: Path, copies: int) -> int:
    """Scale an SQLite store up ``copies`` times by SQL: every job run (its runs, tags, params, metrics and
    latest_metrics rows, as the writer left them) copied copies - 1 times under a new id, under the same
    parent, its seed (tag and param) shifted by SEED_OFFSET per copy. Returns the job runs there are after."""
    import sqlite3

    connection = sqlite3.connect(database)
    try:
        columns = {table: [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
                   for table in ("runs", "tags", "params", "metrics", "latest_metrics")}
        jobs = connection.execute("SELECT run_uuid FROM tags WHERE key = ? AND value = ?",
                                  (ROLE_TAG, ROLE_JOB)).fetchall()
        for copy in range(1, copies):
            connection.execute("DROP TABLE IF EXISTS copies")
            connection.execute("CREATE TEMP TABLE copies (old TEXT PRIMARY KEY, new TEXT)")
            connection.executemany("INSERT INTO copies VALUES (?, lower(hex(randomblob(16))))", jobs)
            for table, names in columns.items():
                chosen = ", ".join(
                    "c.new" if name == "run_uuid" else
                    f"CASE WHEN t.key = 'seed' THEN CAST(t.value + {copy * SEED_OFFSET} AS TEXT) ELSE t.value END"
                    if name == "value" and table in ("tags", "params") else
                    f"t.start_time + {copy}" if name == "start_time" else f"t.{name}" for name in names)
                connection.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {chosen} FROM {table} t "
                                   "JOIN copies c ON c.old = t.run_uuid")
            connection.commit()
        return connection.execute("SELECT count(*) FROM tags WHERE key = ? AND value = ?",
                                  (ROLE_TAG, ROLE_JOB)).fetchone()[0]
    finally:
        connection.close()


#: `mcsa-bench` with the report reading through MLflow's client API (what it did before the bulk reader)
CLIENT_API = """
import sys
from mlflow.tracking import MlflowClient
import mcsa_bench.report.runs as runs
from mcsa_bench.tracking.store import absolute_uri
from mcsa_bench.tracking.tables import ClientReader
runs.open_reader = lambda uri: ClientReader(MlflowClient(tracking_uri=absolute_uri(uri)))
from mcsa_bench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def timed_command(arguments: list[str], reader: str, cwd: Path) -> dict[str, float]:
    """Wall and CPU seconds of one `mcsa-bench` process (``reader``: bulk, or the client API's)."""
    program = ["-c", "import sys; from mcsa_bench.cli import main; sys.exit(main(sys.argv[1:]))"]
    if reader != "bulk":
        program = ["-c", CLIENT_API]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run([sys.executable, *program, *arguments], cwd=cwd, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)} failed: {result.stderr[-2000:]}")
    return {"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def ui_listing_seconds(uri: str, directory: Path) -> float:
    """MLflow's server on the store: seconds to answer the runs page's first request (newest 100 runs)."""
    import urllib.request

    from tests.support import MlflowServer

    server = MlflowServer(directory, backend_store_uri=uri).start()
    try:
        experiment = json.loads(urllib.request.urlopen(
            f"{server.uri}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name={EXPERIMENT}").read())
        body = json.dumps({"experiment_ids": [experiment["experiment"]["experiment_id"]], "max_results": 100,
                           "order_by": ["attributes.start_time DESC"], "run_view_type": "ACTIVE_ONLY"}).encode()
        request = urllib.request.Request(f"{server.uri}/ajax-api/2.0/mlflow/runs/search", data=body,
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        runs = json.loads(urllib.request.urlopen(request, timeout=600).read())["runs"]
        seconds = time.perf_counter() - start  # the server's CPU is not the client's: wall time only
        assert runs, "the server listed no run"
        return {"wall": seconds}
    finally:
        server.kill()


UI_LISTING = "UI: first page of runs (100, newest first)"


def measure_reads(uri: str, directory: Path, client_api: bool, merge: bool) -> dict:
    tracking = f"tracking.uri={uri}"
    largest = max(GRIDS, key=lambda grid: GRIDS[grid][0])
    client = store._client(uri)
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    (parent,) = client.search_runs([experiment_id], f"tags.`{SWEEP_TAG}` = '{largest}' and "
                                   f"tags.`{ROLE_TAG}` = '{ROLE_SWEEP}'")
    grid, everything = ["report", "--sweep", parent.info.run_id], ["report", "--experiment", EXPERIMENT]
    commands = {
        f"report --sweep (the {largest} grid)": [*grid, "--out", str(directory / "grid"), tracking],
        f"report --sweep (the {largest} grid) --no-figures": [*grid, "--no-figures", "--out",
                                                               str(directory / "grid-tables"), tracking],
        "report --experiment (every grid's runs)": [*everything, "--out", str(directory / "all"), tracking],
        "runs --fix-stale": ["runs", "--fix-stale", tracking],
        "export --experiment (every run, to one bundle)": ["export", "--experiment", EXPERIMENT, "--out",
                                                           str(directory / "paper.zip"), tracking],
    }
    if merge:  # through MLflow's client, at the writer's pace: measured on the built store, not a replica
        commands["merge (the bundle, into an empty SQLite store)"] = [
            "merge", str(directory / "paper.zip"), f"tracking.uri=sqlite:///{directory / 'merged.db'}"]
    seconds = {}
    for name, arguments in commands.items():
        readers = ("bulk", "client") if client_api and name.startswith("report") else ("bulk",)
        for reader in readers:
            label = f"{name}, {'bulk reader' if reader == 'bulk' else 'client API'}"
            seconds[label] = timed_command(arguments, reader, directory)
            print(f"{label:<75} {seconds[label]['wall']:8.1f} s wall {seconds[label]['cpu']:8.1f} s CPU", flush=True)
    seconds[UI_LISTING] = ui_listing_seconds(uri, directory)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fraction", type=float, default=0.1, help="of every grid's jobs (1: 12,060 runs)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--store", type=Path, help="directory of the store (default: a temporary one)")
    parser.add_argument("--no-client-api", action="store_true", help="time the report with the bulk reader only")
    parser.add_argument("--build-only", action="store_true", help="build the store, then time no reads")
    parser.add_argument("--reads-only", action="store_true", help="the SQLite store in --store exists: time the "
                        "reads only")
    parser.add_argument("--replicate", type=int, default=1, metavar="K", help="SQLite: before the reads, copy "
                        "every job run K - 1 times by SQL (a store K times the size built from the writer's rows)")
    args = parser.parse_args()
    directory = (args.store or Path(tempfile.mkdtemp(prefix="paper-store-"))).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    os.chdir(directory)  # a database server's experiment keeps its artifacts in ./mlruns: the store's directory
    load_start, info = load_average(), machine()
    uri, postgres = benchmark_store(args.backend, directory, "paper")
    try:
        built = None if args.reads_only else build(uri, args.fraction, args.writers)
        if built:
            print(f"built {built['runs']} runs, {built['points']:,} points in {built['seconds']:.0f} s "
                  f"({built['points_per_second']:,.0f} points/s, {args.writers} writers)", flush=True)
        if args.replicate > 1:
            start = time.perf_counter()
            runs = replicate(directory / "mlflow.db", args.replicate)
            print(f"replicated to {runs} job runs in {time.perf_counter() - start:.0f} s", flush=True)
        if args.build_only:
            save(f"paper_store_build_{args.backend}_{args.fraction:g}", {
                "machine": info, "load_average": [load_start, load_average()], "fraction": args.fraction,
                "backend": args.backend, "writers": args.writers, "build": built})
            return
        reads = measure_reads(uri, directory, not args.no_client_api, merge=args.replicate == 1)
    finally:
        if postgres is not None:
            postgres.stop()
    print(describe(info, load_start, load_average()))
    print(f"{UI_LISTING}: {reads[UI_LISTING]['wall']:.1f} s")
    sizes = {name: (directory / name).stat().st_size / 1e6 for name in ("mlflow.db", "paper.zip", "merged.db")
             if (directory / name).exists()}
    print("MB:", ", ".join(f"{name} {size:.0f}" for name, size in sizes.items()))
    save(f"paper_store_{args.backend}_{args.fraction:g}" + (f"_x{args.replicate}" if args.replicate > 1 else ""), {
        "machine": info, "load_average": [load_start, load_average()], "fraction": args.fraction,
        "backend": args.backend, "writers": args.writers, "replicate": args.replicate, "build": built,
        "seconds": reads, "megabytes": sizes})


if __name__ == "__main__":
    main()
