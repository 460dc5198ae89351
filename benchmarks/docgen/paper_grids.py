"""All seven experiment grids at one size, then a report per grid (docs/report.md, "The experiment grids").

Each grid runs as `mcsa-bench run -m experiment=<grid> size=<size> hydra/launcher=joblib resume=true`
into one tracking store, so a killed run continues where it stopped when started again; then
`mcsa-bench report --sweep latest` writes outputs/reports/<grid>/ (and logs it to the sweep's parent
run). Per grid, the wall time and the job counts (from the sweep's summary line) are recorded.

    python benchmarks/docgen/paper_grids.py                  # size=bench: about an hour on 2 cores
    python benchmarks/docgen/paper_grids.py --size smoke     # a quick check of the whole pipeline (~3 min)
    python benchmarks/docgen/paper_grids.py --grids logistic bnn --store outputs/paper_grids/mlflow.db
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

GRIDS = ("gaussian_variance", "stepsize_robustness", "logistic", "gp_classification", "bnn", "gp_regression",
         "marginal_likelihood")
#: what each grid's report shows (the grids' header comments)
REPORT_ARGS = {
    "gaussian_variance": ["--metric", "grad_variance:min"],
    "stepsize_robustness": ["--rows", "optimizer,lr", "--metric", "kl_inclusive"],
    "logistic": ["--confidence", "0.8"],  # the parallel-state paper's 80 % intervals
    "gp_classification": ["--confidence", "0.8"],
    "bnn": [],
    "gp_regression": [],
    "marginal_likelihood": [],
}
SUMMARY = re.compile(r"Sweep finished: (\d+) jobs, (\d+) FINISHED")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsa_bench.cli", *args], capture_output=True, text=True)


def run_grid(grid: str, size: str, store: Path, n_jobs: int, sweeps: Path) -> dict:
    size_override = [] if size == "paper" else [f"size={size}"]
    start = time.perf_counter()
    ran = cli("run", "-m", f"experiment={grid}", *size_override, "resume=true", "hydra/launcher=joblib",
              f"hydra.launcher.n_jobs={n_jobs}", f"tracking.uri=sqlite:///{store}",
              f"hydra.sweep.dir={sweeps / grid}")
    seconds = time.perf_counter() - start
    summary = SUMMARY.search(ran.stdout)
    record = {"grid": grid, "wall_s": round(seconds, 1), "exit_code": ran.returncode,
              "jobs": int(summary[1]) if summary else None, "finished": int(summary[2]) if summary else None}
    if ran.returncode != 0:
        record["error"] = (ran.stderr or ran.stdout).strip().splitlines()[-1:]
        return record
    start = time.perf_counter()
    report = cli("report", "--sweep", "latest", "--name", grid, "--out", f"outputs/reports/{grid}",
                 *REPORT_ARGS[grid], f"tracking.uri=sqlite:///{store}")
    record["report_s"] = round(time.perf_counter() - start, 1)
    record["report_exit_code"] = report.returncode
    if report.returncode != 0:
        record["report_error"] = (report.stderr or report.stdout).strip().splitlines()[-1:]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="bench", help="smoke, bench or paper (default: bench)")
    parser.add_argument("--store", type=Path, default=Path("outputs/paper_grids/mlflow.db"))
    parser.add_argument("--grids", nargs="+", default=list(GRIDS), choices=GRIDS)
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default: 2, one per core)")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/paper_grids_<size>.json")
    args = parser.parse_args()
    args.store = args.store.resolve()
    args.store.parent.mkdir(parents=True, exist_ok=True)
    sweeps = args.store.parent / "sweeps" / args.size
    out = args.json or Path(__file__).resolve().parents[1] / "results" / f"paper_grids_{args.size}.json"
    results = {"size": args.size, "store": str(args.store), "n_jobs": args.n_jobs, "cores": os.cpu_count(),
               "load_average_start": os.getloadavg(), "grids": []}
    for grid in args.grids:
        record = run_grid(grid, args.size, args.store, args.n_jobs, sweeps)
        results["grids"].append(record)
        print(json.dumps(record), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")  # after every grid: a killed run keeps the rest
    results["load_average_end"] = os.getloadavg()
    results["total_wall_s"] = round(sum(r["wall_s"] + r.get("report_s", 0) for r in results["grids"]), 1)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{results['total_wall_s']:.0f} s in total; {out}")
    if any(r["exit_code"] or r.get("report_exit_code") for r in results["grids"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
