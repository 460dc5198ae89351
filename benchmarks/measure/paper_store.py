"""A paper-size store, built with the project's writer, and what reading it costs: `mcsa-bench report`
of the largest grid and of the whole experiment (the bulk reader against MLflow's client API),
`mcsa-bench runs --fix-stale`, and the UI's first page of runs.

The store holds the seven paper grids as seven sweeps of one experiment (docs/scaling.md §8: 12,060
jobs), each a parent run with its job list (sweep_jobs.json) and children as a job records them
(tracking.record: role, parent, overrides, key-setting and config-hash tags, 40 params) with 101
evaluations of 6 metrics (606 points, a default job's T = 10^4 at eval_every = 100). Every run goes
through tracking.store.JobTracker, the path a job takes (run with tags, params in batches of 100,
metrics queued to the background writer in log_batch calls of 1,000, end of run), from W writer
processes. ``--fraction 0.1`` builds a tenth of every grid; ``--merge BUNDLE`` fills the store from an
earlier build's export instead (`mcsa-bench merge`: straight into MLflow's tables; the whole size in
2-5 min against the writer's 21, docs/scaling.md §9), and ``--replicate K`` then scales it K times by SQL
on the database (SQLite or PostgreSQL).

    OMP_NUM_THREADS=1 python benchmarks/measure/paper_store.py --fraction 0.1 [--backend sqlite|postgresql ...]
        [--writers 2] [--store DIR] [--merge BUNDLE] [--replicate K] [--build-only | --reads-only] [--suffix S]

The stores stay in --store: SQLite's mlflow.db, and the private PostgreSQL server's cluster in postgres/
(started again as it is by a later ``--reads-only``). With both backends, each store gets the same build
and the reads alternate between them.

Reads: each timing is one process of `mcsa-bench report ... --out DIR` (the command as a user runs
it, figures included) or of `runs --fix-stale`; the client API's report is the same command with
the bulk reader replaced by tracking.tables.ClientReader. The UI's listing is MLflow's server
answering the request its runs page makes first (runs/search, 100 runs, newest first). Beside each: the
1-min load at its start and, on PostgreSQL, the CPU seconds of the server's processes during it.
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
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from harness import benchmark_store, describe, load_average, machine, process_tree_cpu, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private servers

from mcsa_bench.tracking import store  # noqa: E402
from mcsa_bench.tracking.record import (  # noqa: E402
    CONFIG_HASH_TAG,
    ORIGIN_TAG,
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


#: MLflow's tables that hold a job run's rows, in the order their foreign keys allow inserting them
RUN_TABLES = ("runs", "tags", "params", "metrics", "latest_metrics")


def replicate(uri: str, copies: int) -> int:
    """Scale a database store up ``copies`` times by SQL, on the database itself (SQLite or PostgreSQL: the
    same statements): every job run (its runs, tags, params, metrics and latest_metrics rows, as the writer
    left them) copied copies - 1 times under a new id, under the same parent, its seed (tag and param)
    shifted by SEED_OFFSET per copy and its origin tag (a merged run's) its own id. Returns the job runs
    there are after."""
    import uuid

    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)
    quote = engine.dialect.identifier_preparer.quote
    columns = {table: [c["name"] for c in sqlalchemy.inspect(engine).get_columns(table)] for table in RUN_TABLES}
    jobs_sql = sqlalchemy.text("SELECT run_uuid FROM tags WHERE key = :role AND value = :job")
    roles = {"role": ROLE_TAG, "job": ROLE_JOB}
    with engine.connect() as connection:
        jobs = [run_id for (run_id,) in connection.execute(jobs_sql, roles)]
    for copy in range(1, copies):
        with engine.begin() as connection:  # a copy at a time, one transaction each
            connection.execute(sqlalchemy.text("CREATE TEMPORARY TABLE copies (old VARCHAR(32) PRIMARY KEY, "
                                               "new VARCHAR(32))"))
            connection.execute(sqlalchemy.text("INSERT INTO copies VALUES (:old, :new)"),
                               [{"old": run_id, "new": uuid.uuid4().hex} for run_id in jobs])
            for table, names in columns.items():
                chosen = ", ".join(
                    "c.new" if name == "run_uuid" else
                    "CASE WHEN t.key = 'seed' THEN "
                    f"CAST(CAST(t.value AS INTEGER) + {copy * SEED_OFFSET} AS TEXT) "
                    "WHEN t.key = :origin THEN c.new ELSE t.value END"
                    if name == "value" and table in ("tags", "params") else
                    f"t.start_time + {copy}" if name == "start_time" else f"t.{quote(name)}" for name in names)
                connection.execute(sqlalchemy.text(
                    f"INSERT INTO {table} ({', '.join(map(quote, names))}) SELECT {chosen} FROM {table} t "
                    "JOIN copies c ON c.old = t.run_uuid"), {"origin": ORIGIN_TAG})
            connection.execute(sqlalchemy.text("DROP TABLE copies"))
    with engine.connect() as connection:
        return len(connection.execute(jobs_sql, roles).fetchall())


def settle(uri: str) -> None:
    """Leave the store as a server keeps it after a bulk write, before anything is timed: PostgreSQL's
    VACUUM ANALYZE (what autovacuum does soon after, else during the timings, with plans made without
    statistics until then). SQLite keeps no statistics unless asked, and MLflow never asks."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(sqlalchemy.text("VACUUM ANALYZE"))


def contents(uri: str) -> dict:
    """What the store holds: runs, job runs, metric points, its size on disk (MB), and how many copies of
    each job the seeds say there are (1 unless replicated)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)
    with engine.connect() as connection:
        def one(sql: str, **bound):
            return connection.execute(sqlalchemy.text(sql), bound).scalar()

        try:
            runs = one("SELECT count(*) FROM runs")
        except sqlalchemy.exc.DBAPIError:
            raise SystemExit(f"no MLflow store at {uri}: build one first (without --reads-only)") from None
        found = {"runs": runs,
                 "job_runs": one("SELECT count(*) FROM tags WHERE key = :role AND value = :job", role=ROLE_TAG,
                                 job=ROLE_JOB),
                 "points": one("SELECT count(*) FROM metrics"),
                 "copies": 1 + one("SELECT max(CAST(value AS INTEGER)) FROM params WHERE key = 'seed'") // SEED_OFFSET}
        if engine.dialect.name == "postgresql":
            found["megabytes"] = one("SELECT pg_database_size(current_database())") / 1e6
        else:
            found["megabytes"] = Path(engine.url.database).stat().st_size / 1e6
    return found


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


@dataclass
class Store:
    """One store under measurement: its backend, URI and private PostgreSQL server (None for SQLite)."""

    backend: str
    uri: str
    postgres: object | None

    def measured(self, command) -> dict[str, float]:
        """``command()``'s seconds with the 1-min load at its start and, on PostgreSQL, the CPU seconds the
        server's processes spent meanwhile (``server_cpu``)."""
        server = self.postgres.postmaster_pid if self.postgres else None
        load, before = load_average()[0], process_tree_cpu(server) if server else 0.0
        seconds = command()
        if server:
            seconds["server_cpu"] = process_tree_cpu(server) - before
        return {**seconds, "load": load}


def ui_listing_seconds(uri: str, directory: Path) -> dict[str, float]:
    """MLflow's server on the store: wall seconds to answer the runs page's first request (newest 100 runs),
    and the CPU seconds its processes spent on it (``cpu``)."""
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
        cpu, start = process_tree_cpu(server.process.pid), time.perf_counter()
        runs = json.loads(urllib.request.urlopen(request, timeout=600).read())["runs"]
        seconds = {"wall": time.perf_counter() - start, "cpu": process_tree_cpu(server.process.pid) - cpu}
        assert runs, "the server listed no run"
        return seconds
    finally:
        server.kill()


UI_LISTING = "UI: first page of runs (100, newest first)"


def read_commands(uri: str, out: Path, export: bool, merge: bool) -> dict[str, list[str]]:
    """The timed commands on the store at ``uri``, writing under ``out``: the cheap ones first."""
    from mcsa_bench.tracking.tables import open_reader

    tracking = f"tracking.uri={uri}"
    largest = max(GRIDS, key=lambda grid: GRIDS[grid][0])
    reader = open_reader(uri)  # MLflow's run search on a tag takes minutes of a busy machine at the whole size
    (parent,) = [run for run in reader.runs(reader.experiments()[EXPERIMENT], tag=(SWEEP_TAG, largest))
                 if run.tags.get(ROLE_TAG) == ROLE_SWEEP]
    grid, everything = ["report", "--sweep", parent.run_id], ["report", "--experiment", EXPERIMENT]
    commands = {
        f"report --sweep (the {largest} grid) --no-figures": [*grid, "--no-figures", "--out",
                                                               str(out / "grid-tables"), tracking],
        "runs --fix-stale": ["runs", "--fix-stale", tracking],
        UI_LISTING: [],
        f"report --sweep (the {largest} grid)": [*grid, "--out", str(out / "grid"), tracking],
        "report --experiment (every grid's runs)": [*everything, "--out", str(out / "all"), tracking],
    }
    if export:
        commands["export --experiment (every run, to one bundle)"] = [
            "export", "--experiment", EXPERIMENT, "--out", str(out / "paper.zip"), tracking]
    if export and merge:  # through MLflow's client, at the writer's pace: measured on the built store, not a replica
        commands["merge (the bundle, into an empty SQLite store)"] = [
            "merge", str(out / "paper.zip"), f"tracking.uri=sqlite:///{out / 'merged.db'}"]
    return commands


def measure_reads(stores: list[Store], directory: Path, client_api: bool, export: bool, merge: bool,
                  record) -> dict[str, dict]:
    """Every read on every store; with several stores, each command on each in turn, their order alternating
    from one command to the next (A B, B A, ...). Returns backend -> label -> seconds, handing what it has
    to ``record`` after each timing (a long run stopped keeps what it measured)."""
    for s in stores:
        (directory / s.backend).mkdir(exist_ok=True)
    commands = {s.backend: read_commands(s.uri, directory / s.backend, export, merge) for s in stores}
    seconds = {s.backend: {} for s in stores}
    turn = 0
    for name in commands[stores[0].backend]:
        readers = ("bulk", "client") if client_api and name.startswith("report") else ("bulk",)
        for reader in readers:
            label = name if name == UI_LISTING else f"{name}, {'bulk reader' if reader == 'bulk' else 'client API'}"
            for s in stores if turn % 2 == 0 else reversed(stores):
                arguments = commands[s.backend][name]
                taken = seconds[s.backend][label] = s.measured(
                    lambda: ui_listing_seconds(s.uri, directory / s.backend) if name == UI_LISTING else
                    timed_command(arguments, reader, directory))
                server = f" {taken['server_cpu']:7.1f} s server CPU" if "server_cpu" in taken else ""
                print(f"{s.backend:<10} {label:<75} {taken['wall']:8.1f} s wall {taken['cpu']:7.1f} s CPU{server} "
                      f"(load {taken['load']})", flush=True)
                record(seconds)
            turn += 1
    return seconds


def fill(s: Store, args, directory: Path) -> dict:
    """Build the store with the writer, or merge a bundle into it; what that took."""
    if not args.merge:
        built = build(s.uri, args.fraction, args.writers)
        print(f"{s.backend}: built {built['runs']} runs, {built['points']:,} points in {built['seconds']:.0f} s "
              f"({built['points_per_second']:,.0f} points/s, {args.writers} writers)", flush=True)
        return built
    merged = s.measured(lambda: timed_command(["merge", str(args.merge), f"tracking.uri={s.uri}"], "bulk", directory))
    print(f"{s.backend}: merged {args.merge} in {merged['wall']:.0f} s ({merged['cpu']:.0f} s CPU)", flush=True)
    return {"merged": merged}


def replicated(s: Store, copies: int) -> dict:
    """:func:`replicate` on the store, timed."""
    def run():
        start = time.perf_counter()
        return {"job_runs": replicate(s.uri, copies), "wall": time.perf_counter() - start}

    taken = s.measured(run)
    print(f"{s.backend}: replicated to {taken['job_runs']} job runs in {taken['wall']:.0f} s", flush=True)
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fraction", type=float, default=0.1, help="of every grid's jobs (1: 12,060 runs)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), nargs="+", default=["sqlite"],
                        help="one store, or both (the same build in each, their reads alternating)")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--store", type=Path, help="directory of the stores (default: a temporary one): SQLite's "
                        "mlflow.db, PostgreSQL's cluster in postgres/ (database 'paper'), both kept")
    parser.add_argument("--merge", type=Path, metavar="BUNDLE", help="fill the store by `mcsa-bench merge` of "
                        "this bundle (e.g. an earlier build's paper.zip) instead of building it with the writer")
    parser.add_argument("--no-client-api", action="store_true", help="time the report with the bulk reader only")
    parser.add_argument("--no-export", action="store_true", help="leave out the export (and the merge of it)")
    parser.add_argument("--build-only", action="store_true", help="build the store, then time no reads")
    parser.add_argument("--reads-only", action="store_true", help="the store in --store exists: time the reads only")
    parser.add_argument("--suffix", default="", help="appended to the results' file names (keeps an earlier "
                                                        "measurement of the same store beside the new one)")
    parser.add_argument("--replicate", type=int, default=1, metavar="K", help="before the reads, copy every job "
                        "run K - 1 times by SQL (a store K times the size built from the writer's rows)")
    args = parser.parse_args()
    directory = (args.store or Path(tempfile.mkdtemp(prefix="paper-store-"))).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    os.chdir(directory)  # a database server's experiment keeps its artifacts in ./mlruns: the store's directory
    load_start, info = load_average(), machine()
    stores = []
    try:
        for backend in dict.fromkeys(args.backend):
            stores.append(Store(backend, *benchmark_store(backend, directory, "paper")))
        built = {}
        for s in stores:
            built[s.backend] = {} if args.reads_only else fill(s, args, directory)
            if args.replicate > 1:
                built[s.backend]["replicated"] = replicated(s, args.replicate)
            if built[s.backend]:
                settle(s.uri)
        held = {s.backend: contents(s.uri) for s in stores}
        print("stores:", held, flush=True)

        def record(reads: dict) -> None:
            for s in stores:
                size = held[s.backend]["job_runs"] / sum(jobs for jobs, _ in GRIDS.values())
                kind = "build_" if args.build_only else ""
                name = f"paper_store_{kind}{s.backend}_{float(f'{size:.2g}'):g}{args.suffix}"
                save(name, {
                    "machine": info, "load_average": [load_start, load_average()], "backends": args.backend,
                    "fraction": args.fraction, "backend": s.backend, "writers": args.writers,
                    "merged": str(args.merge), "replicate": args.replicate, "build": built[s.backend],
                    "store": held[s.backend], "seconds": reads.get(s.backend), "megabytes": {
                        path.name: path.stat().st_size / 1e6 for path in (directory / s.backend).glob("*.*")
                        if path.suffix in (".zip", ".db")}})

        record({})
        if not args.build_only:
            measure_reads(stores, directory, not args.no_client_api, not args.no_export,
                          merge=all(h["copies"] == 1 for h in held.values()), record=record)
    finally:
        for s in stores:
            if s.postgres is not None:
                s.postgres.stop()
    print(describe(info, load_start, load_average()))


if __name__ == "__main__":
    main()
