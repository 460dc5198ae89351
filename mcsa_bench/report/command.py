"""The command line of ``mcsa-bench report``: arguments, the store, and where the files go."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from mcsa_bench.api import ConfigurationError, did_you_mean

DESCRIPTION = """\
Tables and figures like the papers' from the runs in the MLflow store: per data set (row) and
method (column) the mean final metric with a bootstrap interval over the run seeds, the best
method and every method not distinguishable from it in bold (Friedman test with Nemenyi
post-hoc). Failed, unfinished and missing runs are listed. See docs/report.md."""

EPILOG = """\
examples:
  mcsa-bench report --sweep latest
  mcsa-bench report --experiment mcsa-bench --metric test_lpd --metric test_accuracy
  mcsa-bench report --sweep latest --rows optimizer,lr --metric kl_inclusive
  mcsa-bench report --where dataset=pima,heart --where N=10 --name logistic tracking.uri=sqlite:///outputs/mlflow.db

key settings for --rows, --columns and --where: method, model, dataset, scheme, kernel, family,
optimizer, lr, N, T, seed; or any param (model.dim, kernel.n_leapfrog, ...)."""

REPORTS_DIR = Path("outputs") / "reports"


class _Parser(argparse.ArgumentParser):
    """argparse, with mistakes raised as one-line ConfigurationErrors (the CLI prints them, exit 2)."""

    def error(self, message: str):
        unknown = message.removeprefix("unrecognized arguments: ").split()
        hint = did_you_mean(unknown[0], self._option_string_actions) if message.startswith("unrecognized") else ""
        raise ConfigurationError(f"report: {message}{hint} (see mcsa-bench report --help)")


def parser() -> argparse.ArgumentParser:
    from mcsa_bench.tracking.record import COST_METRICS

    p = _Parser(prog="mcsa-bench report", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_argument_group("which runs")
    source.add_argument("--experiment", metavar="NAME", help="MLflow experiment (default: the run default, mcsa-bench)")
    source.add_argument("--sweep", metavar="RUN_ID|latest", help="the children of a sweep's parent run; "
                        "the report is also logged as artifacts (report/) of that run")
    source.add_argument("--bundle", metavar="FILE", help="report from a bundle made by mcsa-bench export instead of "
                        "a store (the experiment: the bundle's)")
    source.add_argument("--where", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                        help="keep only runs whose setting KEY is one of the values (repeatable)")
    source.add_argument("overrides", nargs="*", metavar="tracking.uri=URI", help="the store (default: the run default)")
    layout = p.add_argument_group("what to report")
    layout.add_argument("--metric", action="append", default=[], metavar="NAME[:max|min]",
                        help="a table per metric (repeatable; default: every result metric logged); "
                             ":max/:min sets the direction if its default is wrong")
    layout.add_argument("--rows", metavar="KEY[,KEY]", help="row factors (default: dataset, or model)")
    layout.add_argument("--columns", metavar="KEY", default="method", help="column factor (default: method)")
    layout.add_argument(
        "--methods",
        metavar="KEY[=NAME],...",
        help="the methods' order and names (default: the papers', "
        "pmcsa=pMCSA,jsa=JSA,msc=MSC,msc_rb=MSC-RB,msc+hmc=single-HMC,rws=RWS,snis=SNIS,elbo=ELBO; "
        "none: the keys as logged)",
    )
    layout.add_argument("--no-papers", action="store_true", help="leave out the papers' published values")
    layout.add_argument("--confidence", type=float, default=0.95, help="bootstrap interval level (default 0.95)")
    layout.add_argument("--alpha", type=float, default=0.05, help="significance level of the tests (default 0.05)")
    layout.add_argument("--no-figures", action="store_true", help="tables and page only")
    layout.add_argument("--cost-axis", choices=COST_METRICS, default=COST_METRICS[0],
                        help="the cost the posterior-accuracy metrics are drawn against, and 'to reach 0.1 sd' counts "
                        f"(default {COST_METRICS[0]})")
    layout.add_argument("--interactive", action="store_true", help="the page lets its reader choose the metric shown "
                        "and the curves' y scale (a few lines of inline script; the curves are drawn in both scales)")
    output = p.add_argument_group("where")
    output.add_argument(
        "--name", help="report name (default: the sweep's grid, e.g. logistic-bench, else what it swept, e.g. "
                       "gaussian-estimator-seed; for --experiment the experiment)"
    )
    output.add_argument("--out", metavar="DIR", help="directory (default: outputs/reports/<name>)")
    return p


def parse_metric(spec: str) -> tuple[str, str | None]:
    """``NAME``, ``NAME:max`` or ``NAME:min`` -> the name and the chosen direction (None: the metric's own)."""
    name, _, direction = spec.partition(":")
    if not name or direction not in ("", "max", "min"):
        raise ConfigurationError(f"--metric takes NAME or NAME:max or NAME:min, got {spec!r}")
    return name, direction or None


def resolve_metric(name: str, direction: str | None, runset):
    """A requested metric with its direction: the chosen one, else its spec's (the run record's catalogue,
    or its producer's declaration stored on the runs)."""
    from mcsa_bench.report.tables import Metric
    from mcsa_bench.tracking.record import axis_label

    spec = runset.metric_spec(name)
    if direction is None:
        return Metric.of(name, spec)
    return Metric(name, direction == "max", axis_label(spec, name))


def _check_settings(names, runs, option: str) -> None:
    from mcsa_bench.tracking.record import KEY_SETTINGS

    known = {"method", *KEY_SETTINGS}.union(*(r.factors() for r in runs), *(r.tags for r in runs))
    for name in names:
        if name not in known:
            raise ConfigurationError(f"unknown setting {name!r} for {option}; key settings: method, "
                                     f"{', '.join(KEY_SETTINGS)}, or a param or tag the runs have (e.g. model.dim)")


def _check_metrics(names, runset) -> None:
    """Every requested metric is one some run logged: a typo is an error naming the metrics there are."""
    from mcsa_bench.report.stats import default_metrics

    logged = set().union(*(r.metrics for r in runset.runs))
    for name in names:
        if name not in logged:
            results = default_metrics(logged, runset.metric_spec)
            diagnostics = ", ".join(sorted(logged - set(results))) or "none"
            raise ConfigurationError(f"unknown metric {name!r}{did_you_mean(name, logged)} for --metric; "
                                     f"the runs logged {', '.join(results) or 'none'} (diagnostics: {diagnostics})")


def report_name(runset, experiment: str) -> str:
    """The grid's name for a sweep of one grid (``logistic``, ``logistic-bench``), else what it swept
    (``gaussian-estimator-seed``), else ``sweep-<run id prefix>``; the experiment's name for an experiment."""
    from mcsa_bench.report.runs import grid_of, swept_name

    if runset.parent_run_id is None:
        name = experiment
    else:
        overrides = runset.sweep_overrides
        name = grid_of(overrides) or swept_name(overrides) or f"sweep-{runset.parent_run_id[:8]}"
    return re.sub(r"[^\w.-]+", "_", name)


def main(argv: list[str], reconstruction=None) -> int:
    """The report command; ``reconstruction`` (a :class:`~mcsa_bench.report.runs.Reconstruction`) fills in
    what stores written by older versions lack."""
    from mcsa_bench.report.build import add_costs, build_report, draw_figures, write_report
    from mcsa_bench.report.document import Options
    from mcsa_bench.report.labels import MethodNames
    from mcsa_bench.report.runs import (
        Histories,
        load_experiment,
        load_sweep,
        open_client,
        open_reader,
        parse_filters,
        select,
    )
    from mcsa_bench.tracking.store import DEFAULT_EXPERIMENT, absolute_uri, redacted, tracking_uri_of

    try:
        args = parser().parse_intermixed_args(argv)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    uri = tracking_uri_of(args.overrides, "report")
    if not (0 < args.confidence < 1 and 0 < args.alpha < 1):
        raise ConfigurationError(f"--confidence and --alpha must lie in (0, 1), got {args.confidence} and {args.alpha}")
    requested = [parse_metric(spec) for item in args.metric for spec in item.split(",")]
    rows = tuple(args.rows.split(",")) if args.rows else ()
    filters = parse_filters(args.where)
    if args.bundle and args.overrides:
        raise ConfigurationError("report reads a store (tracking.uri=...) or a bundle (--bundle FILE), not both")
    if args.bundle:
        from mcsa_bench.tracking.bundle import BundleReader

        reader = BundleReader(Path(args.bundle))
        if note := reader.unfinished_note():
            print(note, file=sys.stderr)
        uri = f"bundle {Path(args.bundle).resolve()} of {reader.manifest['source']}"
        experiment = args.experiment or reader.manifest["experiment"]
    else:
        reader = open_reader(uri)
        experiment = args.experiment or DEFAULT_EXPERIMENT
    try:
        runset = (load_sweep(reader, args.sweep, experiment, reconstruction) if args.sweep
                  else load_experiment(reader, experiment, reconstruction))
    except ConfigurationError as error:  # the store read is part of the answer: a path may name another one
        raise ConfigurationError(f"{error} (store read: {absolute_uri(uri)})") from None
    _check_settings([*rows, args.columns], runset.runs, "--rows/--columns")
    _check_settings(filters, runset.runs, "--where")
    runset = select(runset, filters)
    _check_metrics([name for name, _ in requested], runset)
    metrics = tuple(resolve_metric(name, direction, runset) for name, direction in requested)
    name = args.name or report_name(runset, experiment)
    directory = Path(args.out) if args.out else REPORTS_DIR / name

    options = Options(
        metrics=metrics,
        rows=rows,
        column=args.columns,
        confidence=args.confidence,
        alpha=args.alpha,
        filters=tuple(args.where),
        papers=not args.no_papers,
        interactive=args.interactive,
        cost_axis=args.cost_axis,
        methods=MethodNames.parse(args.methods) if args.methods else MethodNames(),
    )
    report = build_report(
        runset,
        options,
        name=name,
        command=redacted(shlex.join(["mcsa-bench", "report", *argv])),  # the files travel: no store password
        store_uri=redacted(uri),
        reconstruction=reconstruction,
    )
    if not any(report.tables.values()):
        raise ConfigurationError(
            f"nothing to report: no FINISHED run of {runset.source} logged "
            f"{', '.join(m.name for m in report.metrics) or 'a result metric'} "
            f"({len(runset.runs)} runs read from {absolute_uri(uri)}); {directory} is left as it was"
        )

    def write(staging: Path) -> None:
        histories = Histories(reader, (r.run_id for r in runset.runs))
        add_costs(report, histories)
        if not args.no_figures:
            draw_figures(report, staging / "figures", histories)
        write_report(report, staging)

    write_whole(directory, write)
    if runset.parent_run_id and not args.bundle:
        attach(open_client(uri, check=False), runset.parent_run_id, directory)  # open_reader checked it
    _print_summary(report, directory)
    return 0


def write_whole(directory: Path, write) -> None:
    """``write(staging)`` into a new directory beside ``directory``, then put it in its place: a rewritten
    report keeps no file of the old one, and a failure leaves the old one as it was."""
    if directory.is_dir() and any(directory.iterdir()) and not (directory / "summary.json").is_file():
        raise ConfigurationError(f"{directory} exists and holds no report (no summary.json); choose another --out")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.new-", dir=directory.parent))
    staging.chmod(0o755)
    try:
        write(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = staging.with_name(staging.name.replace(".new-", ".old-"))
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def attach(client, run_id: str, directory: Path) -> None:
    """The report as the run's artifacts ``report/``, replacing every file of an earlier one."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    repository = get_artifact_repository(client.get_run(run_id).info.artifact_uri)
    try:
        repository.delete_artifacts("report")
    except NotImplementedError:
        print(f"Note: this artifact store cannot delete files; files of an earlier report may remain in run {run_id}.")
    client.log_artifacts(run_id, str(directory), artifact_path="report")


def _print_summary(report, directory: Path) -> None:
    runs = report.runset
    n_tables = sum(len(t) for t in report.tables.values())
    one = runs.parents == 1
    parents = (f" (and {runs.parents} sweep parent run{'' if one else 's'}, which compute{'s' if one else ''} nothing: "
               "left out)") if runs.parents else ""
    print(f"Report of {runs.source}: {len(runs.runs)} job runs{parents}, {n_tables} tables, {len(report.figures)} "
          "figures.")
    problems = []
    if runs.not_finished:
        problems.append(f"{len(runs.not_finished)} runs not FINISHED")
    if runs.diverged:
        problems.append(f"{len(runs.diverged)} finished runs whose fit diverged")
    if runs.missing_jobs:
        problems.append(f"{len(runs.missing_jobs)} jobs of the sweep without a run")
    if problems:
        print(f"Listed in the report: {'; '.join(problems)}.")
    if report.runset.parent_run_id:
        print(f"Logged as artifacts report/ of run {runs.parent_run_id}.")
    print(f"Open {directory / 'report.html'}")
