"""`mcsa-bench merge` of one bundle into an empty store: through MLflow's client, run by run (the only
path before tracking.tablewriter, still the path into a server), against straight into MLflow's
tables, many runs to a transaction. The two alternate (A B, B A, ...), each into a fresh store,
with the load beside them.

    OMP_NUM_THREADS=1 python benchmarks/measure/merge_speed.py BUNDLE [--rounds 2]
        [--backend sqlite|postgresql] [--dir /tmp/storewrite/merge] [--only tables]

(``--only tables``: the new path alone, for a bundle the client's path takes too long to merge.)

A bundle: `mcsa-bench export` of a store, e.g. paper_store.py's (it leaves paper.zip in its --store).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from harness import load_average, machine, save

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support: the private servers

import mcsa_bench.tracking.store as store  # noqa: E402
from mcsa_bench.tracking.bundle import BundleReader, merge  # noqa: E402

PATHS = ("client", "tables")


def merged(bundle: Path, uri: str, path: str) -> dict:
    """Wall and CPU seconds of one merge of ``bundle`` into the empty store at ``uri`` along ``path``."""
    is_database_store = store.is_database_store
    if path == "client":
        store.is_database_store = lambda uri: False
    try:
        load, cpu, wall = load_average()[0], time.process_time(), time.perf_counter()
        copied, present = merge(BundleReader(bundle), uri)
        seconds = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "load": load}
    finally:
        store.is_database_store = is_database_store
    assert present == 0 and copied > 0, (copied, present)
    return {**seconds, "runs": copied}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/storewrite/merge"))
    parser.add_argument("--only", choices=PATHS)
    args = parser.parse_args()
    paths = (args.only,) if args.only else PATHS
    postgres = None
    if args.backend == "postgresql":
        from tests.support import PostgresServer

        postgres = PostgresServer().start()
    manifest = BundleReader(args.bundle).manifest
    info, load_start, rounds = machine(), load_average(), []
    try:
        for number in range(args.rounds):
            measured = {}
            for path in paths if number % 2 == 0 else reversed(paths):
                name = f"r{number}_{path}"
                if postgres is not None:
                    uri = postgres.create_database(name)
                else:
                    shutil.rmtree(args.dir / name, ignore_errors=True)
                    (args.dir / name).mkdir(parents=True)
                    uri = f"sqlite:///{args.dir / name / 'mlflow.db'}"
                measured[path] = merged(args.bundle, uri, path)
                print(f"round {number} {path:<7} {measured[path]['wall']:8.1f} s wall {measured[path]['cpu']:8.1f} s "
                      f"CPU (load {measured[path]['load']})", flush=True)
            if not args.only:
                measured["ratio_cpu"] = measured["client"]["cpu"] / measured["tables"]["cpu"]
                measured["ratio_wall"] = measured["client"]["wall"] / measured["tables"]["wall"]
            rounds.append(measured)
    finally:
        if postgres is not None:
            postgres.stop()
    if not args.only:
        print(f"client / tables, per round: CPU {[round(r['ratio_cpu'], 1) for r in rounds]}, "
              f"wall {[round(r['ratio_wall'], 1) for r in rounds]}; load {load_start} -> {load_average()}")
    save(f"merge_speed_{args.backend}_{manifest['runs']}runs" + (f"_{args.only}" if args.only else ""), {
        "machine": info, "load_average": [load_start, load_average()], "bundle": {
            k: manifest[k] for k in ("runs", "points", "selection")}, "rounds": rounds})


if __name__ == "__main__":
    main()
