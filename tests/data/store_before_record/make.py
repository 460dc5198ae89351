"""Writes the store in this directory with the code of a checkout from before runs recorded what a report
needs (no sweep job list, no paper block, no metric declarations), and that checkout's own reports of it.

    cd /tmp/anywhere && /path/to/old/checkout/.venv/bin/python /path/to/this/make.py /path/to/this/directory

Two sweeps of pMCSA and MSC on pima at size=tiny: seeds 0 and 1, then seeds 0-2 with resume=true (which
reruns only seed 2); the second sweep's MSC run of seed 2 is deleted afterwards, a job without a run.
The store keeps no artifacts (a report reads none of an old store's) and is compressed.
"""

import gzip
import json
import shutil
import sqlite3
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from mcsa_bench.cli import main

SWEEP = ["experiment=logistic_pima", "size=tiny", "estimator=msc,pmcsa"]
REPORTS = {"sweep": ["--sweep", "latest"], "experiment": ["--experiment", "mcsa-bench"]}


def table_summary(summary: dict) -> dict:
    """What a report of the store must reproduce: the tables' cells and the run listings."""
    cells = [{key: cell[key] for key in ("row", "column", "n", "mean", "low", "high", "bold", "paper")}
             for table in summary["tables"] for cell in table["cells"]]
    return {"tables": [t["metric"] for t in summary["tables"]], "cells": cells,
            "missing_jobs": summary["missing_jobs"], "reused": sorted(r["run_id"] for r in summary["reused"]),
            "n_runs": summary["n_runs"]}


def write(directory: Path) -> None:
    uri = "sqlite:///outputs/mlflow.db"
    assert main(["run", "-m", *SWEEP, "seed=0,1"]) == 0
    assert main(["run", "-m", *SWEEP, "seed=0,1,2", "resume=true"]) == 0
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "mcsa-bench"]
    parent = client.search_runs([experiment.experiment_id], "tags.`mcsa_bench.role` = 'sweep'",
                                order_by=["attributes.start_time DESC"])[0]
    children = client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    (deleted,) = [r for r in children if r.data.tags["method"] == "msc"]
    client.delete_run(deleted.info.run_id)
    expected = {}
    for name, arguments in REPORTS.items():
        out = Path("outputs") / "reports" / name
        assert main(["report", *arguments, "--no-figures", "--out", str(out), f"tracking.uri={uri}"]) == 0
        expected[name] = table_summary(json.loads((out / "summary.json").read_text()))
    (directory / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    database = sqlite3.connect("outputs/mlflow.db")
    database.execute("VACUUM")
    database.close()
    with open("outputs/mlflow.db", "rb") as source, gzip.open(directory / "mlflow.db.gz", "wb", 9) as target:
        shutil.copyfileobj(source, target)


if __name__ == "__main__":
    write(Path(sys.argv[1]).resolve())
