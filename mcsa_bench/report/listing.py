"""``mcsa-bench runs``: a store's job runs as a table, newest first, as ``git log`` lists commits: status, method,
model and data set, seed, T, the run-health and accuracy tags, and the key metrics; with filters on any of them
(docs/report.md, "Listing runs"). It reads the store as the report does (a database's tables in a few queries,
no MLflow import for SQLite or PostgreSQL) and imports neither the jobs nor Hydra."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from mcsa_bench.api import ConfigurationError, did_you_mean
from mcsa_bench.report.runs import RunRecord, RunSet, load_experiment, load_sweep, open_reader, parse_filters, select
from mcsa_bench.tracking.record import (
    ACCURACY_TAG,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    HEALTH_TAG,
    METRICS,
    REFERENCE_METRICS,
    RESULT,
    RUNS_VIEW_TAG,
    metric_spec,
)

DESCRIPTION = """\
List the job runs of an experiment (or of one sweep), newest first: status, method, model and data set, seed,
T, run health (mcsa_bench.health) and accuracy (mcsa_bench.accuracy), and the result metrics the runs logged.
With --fix-stale, mark KILLED the RUNNING runs whose process is gone (kill -9, out of memory, a reboot)."""

EPILOG = """\
examples:
  mcsa-bench runs
  mcsa-bench runs --sweep latest --health suspect,diverged
  mcsa-bench runs --where method=pmcsa,jsa --where dataset=pima --status FAILED --limit 0
  mcsa-bench runs --json tracking.uri=sqlite:////path/to/mlflow.db
  mcsa-bench runs --fix-stale"""

#: result metrics shown per run, at most (the catalogue's order: the headline first)
METRICS_SHOWN = 4
#: the columns of a listed run: heading and how to read it from a run
COLUMNS = (
    ("RUN", lambda r: r.run_id[:8]),
    ("STARTED", lambda r: datetime.fromtimestamp(r.start_time / 1000).strftime("%Y-%m-%d %H:%M") if r.start_time
     else ""),
    ("STATUS", lambda r: r.status),
    ("METHOD", lambda r: r.settings.get("method", "")),
    ("MODEL", lambda r: "/".join(p for p in (r.settings.get("model", ""), r.settings.get("dataset", "")) if p)),
    ("SEED", lambda r: r.settings.get("seed", "")),
    ("T", lambda r: r.settings.get("T", "")),
    ("HEALTH", lambda r: r.tags.get(HEALTH_TAG, "")),
    ("ACCURACY", lambda r: r.tags.get(ACCURACY_TAG, "")),
)


def parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str):
            raise ConfigurationError(f"runs: {message} (see mcsa-bench runs --help)")

    p = Parser(prog="mcsa-bench runs", description=DESCRIPTION, epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", metavar="NAME", help="MLflow experiment (default: mcsa-bench)")
    p.add_argument("--sweep", metavar="RUN_ID|latest", help="only the job runs of this sweep")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                   help="keep runs whose key setting (method, dataset, N, lr, seed, ...), param or tag is one of the "
                        "values (repeatable)")
    p.add_argument("--status", metavar="S[,S]", help="FINISHED, FAILED, KILLED, RUNNING")
    p.add_argument("--health", metavar="H[,H]", help="ok, suspect, diverged, too_short")
    p.add_argument("--accuracy", metavar="A[,A]", help="accurate, rough, off")
    p.add_argument("--limit", type=int, default=50, help="the newest this many (default 50; 0: all)")
    p.add_argument("--json", action="store_true", help="every listed run as JSON: settings, tags shown, final metrics")
    p.add_argument("--fix-stale", action="store_true", help="mark runs whose process is gone KILLED (and list nothing)")
    p.add_argument("overrides", nargs="*", metavar="tracking.uri=URI", help="the store (default: the run default)")
    return p


def filters_of(args) -> dict[str, set[str]]:
    """``--where`` and the shortcuts ``--status``, ``--health`` and ``--accuracy`` as one set of filters."""
    filters = parse_filters(args.where)
    for key, value in (("status", args.status), (HEALTH_TAG, args.health), (ACCURACY_TAG, args.accuracy)):
        if value:
            filters.setdefault(key, set()).update(value.split(","))
    return filters


def matching(runset: RunSet, filters: dict[str, set[str]]) -> list[RunRecord]:
    """The runs every filter keeps (``status`` reads the run's status); an unknown key is one line naming the keys."""
    filters = dict(filters)
    status = {s.upper() for s in filters.pop("status", [])}
    known = {"method", *(k for r in runset.runs for k in (*r.factors(), *r.tags))}
    for key in filters:
        if key not in known:
            raise ConfigurationError(f"runs: no run has a setting, param or tag {key!r}{did_you_mean(key, known)}")
    return [r for r in select(runset, filters).runs if not status or r.status in status]


def shown_metrics(runs: list[RunRecord]) -> list[str]:
    """The result metrics the runs logged, the catalogue's first (its order), then the declared ones, at most
    :data:`METRICS_SHOWN`; the posterior-accuracy ones after the model's own."""
    logged = set().union(*(r.metrics for r in runs)) if runs else set()
    declared = RunSet("", runs).declared_metrics
    own = [m for m in [*METRICS, *sorted(logged)] if m in logged and m not in REFERENCE_METRICS
           and metric_spec(m, declared).kind == RESULT]
    return list(dict.fromkeys([*own, *(m for m in REFERENCE_METRICS if m in logged)]))[:METRICS_SHOWN]


def table(runs: list[RunRecord]) -> list[str]:
    """Aligned lines: a heading, then a line per run (its name last, unpadded)."""
    metrics = shown_metrics(runs)
    header = [name for name, _ in COLUMNS] + metrics + ["NAME"]
    rows = [[read(r) for _, read in COLUMNS] + [f"{r.metrics[m]:.4g}" if m in r.metrics else "-" for m in metrics]
            + [r.name] for r in runs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
            for row in [header, *rows]]


def as_json(run: RunRecord) -> dict:
    return {"run_id": run.run_id, "name": run.name, "status": run.status, "start_time": run.start_time,
            **run.settings, "health": run.tags.get(HEALTH_TAG), "accuracy": run.tags.get(ACCURACY_TAG),
            "metrics": run.metrics}


def list_runs(args, uri: str) -> int:
    """Print the runs ``args`` select from the store ``uri``: a table, or JSON with ``--json``."""
    from mcsa_bench.tracking.store import DEFAULT_EXPERIMENT, absolute_uri, redacted

    reader, experiment = open_reader(uri), args.experiment or DEFAULT_EXPERIMENT
    runset = load_sweep(reader, args.sweep, experiment) if args.sweep else load_experiment(reader, experiment)
    runs = sorted(matching(runset, filters_of(args)), key=lambda r: r.start_time, reverse=True)
    if args.limit < 0:
        raise ConfigurationError(f"runs: --limit takes 0 (all) or a positive number, got {args.limit}")
    listed = runs[:args.limit] if args.limit else runs
    if args.json:
        print(json.dumps([as_json(r) for r in listed], indent=1))
        return 0
    for line in table(listed) if listed else []:
        print(line)
    more = f", the newest {len(listed)} listed (--limit 0: all)" if len(listed) < len(runs) else ""
    print(f"{len(runs)} of the {len(runset.runs)} job runs of {runset.source}{more}, in {redacted(absolute_uri(uri))}")
    return 0


# ------------------------------------------------------------------------------- the MLflow UI's runs table

#: the key-setting tags the UI's runs table shows, then the run-health and accuracy tags
VIEW_TAGS = ("method", "model", "dataset", "N", "lr", "seed", HEALTH_TAG, ACCURACY_TAG)
#: the view's name in the page's address (the experiment tag RUNS_VIEW_TAG holds it)
VIEW_KEY = RUNS_VIEW_TAG.rpartition(".")[2]


def runs_view(uri: str, experiment: str) -> str | None:
    """The address, below the UI's root, of the experiment's runs in MLflow's Model-training view with the key
    settings, the health and accuracy tags and the runs' result metrics as columns, newest first; the columns are
    stored on the experiment (MLflow's shared view state, RUNS_VIEW_TAG), and so is the experiment's kind where an
    experiment made before it was set lacks it. None when the store has no such experiment."""
    from mcsa_bench.report.runs import open_client

    reader = open_reader(uri)
    experiments = reader.experiments()
    if experiment not in experiments:
        return None
    experiment_id = experiments[experiment]
    jobs = load_experiment(reader, experiment).runs
    columns = ([f"tags.`{tag}`" for tag in VIEW_TAGS]
               + [f"metrics.`{metric}`" for metric in [*shown_metrics(jobs), "wall_time"]])
    name = "attributes.`Run Name`"  # the column ids of MLflow's runs table: its canonical sort keys
    view = {"selectedColumns": columns, "orderByKey": "attributes.start_time", "orderByAsc": False,
            "columnOrder": [name, *columns], "columnWidths": {name: 360}}  # the names whole, the tags first
    client = open_client(uri, check=False)  # open_reader checked it
    if client.get_experiment(experiment_id).tags.get(EXPERIMENT_KIND_TAG) is None:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    client.set_experiment_tag(experiment_id, RUNS_VIEW_TAG, json.dumps(view))
    return f"/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"
