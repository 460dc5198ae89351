"""A report from a set of runs: tables per metric, figures, and the files in the report directory.

Files written to the report directory::

    report.html      the self-contained page (tables, figures, runs not in the tables, method)
    tables.md        every table in Markdown, with its notes
    tables.tex       every table in LaTeX (booktabs)
    tables.html      every table as HTML, nothing else
    summary.json     every number of the tables (cells, intervals, tests, bold sets) and the listings
    runs.csv         every run considered: status, key settings, final values of the reported metrics
    figures/         PNG, SVG and PDF of every figure
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path

from mcsa_bench.report.document import Options, Report
from mcsa_bench.report.labels import MethodNames, natural_key
from mcsa_bench.report.papers import published_values
from mcsa_bench.report.provenance import provenance
from mcsa_bench.report.runs import Reconstruction, RunRecord, RunSet
from mcsa_bench.report.stats import Ranking, default_metrics
from mcsa_bench.report.tables import (
    LATEX_PACKAGES,
    Metric,
    Table,
    agrees,
    build_tables,
    default_rows,
    to_latex,
    to_markdown,
)
from mcsa_bench.report.verdicts import accuracy_tables
from mcsa_bench.tracking.record import HEALTH_REASON_TAG, KEY_SETTINGS, METRICS, REFERENCE_METRICS


def build_report(runset: RunSet, options: Options, *, name: str, command: str, store_uri: str,
                 reconstruction: Reconstruction | None = None) -> Report:
    """The tables of every metric (``options.metrics``, else every result metric the runs logged);
    ``reconstruction`` finds the papers' values of runs from stores that did not record them."""
    finished = runset.finished
    logged = {k for r in finished for k in r.metrics}
    metrics = list(options.metrics) or [Metric.of(m, runset.metric_spec(m))
                                        for m in default_metrics(logged, runset.metric_spec)]
    rows = options.rows or default_rows(finished)
    published = published_values(finished, reconstruction) if options.papers else {}
    tables, superseded = {}, {}
    for metric in metrics:
        tables[metric.name], older = build_tables(
            finished, metric, rows, options.column, options.confidence, options.alpha, options.methods, published
        )
        superseded.update((r.run_id, r) for r in older)
    return Report(name=name, command=command, store_uri=store_uri, runset=runset, options=options, metrics=metrics,
                  rows=rows, tables=tables, superseded=list(superseded.values()),
                  without_metrics=_without_metrics(finished, metrics), provenance=provenance(command, runset.runs),
                  accuracy=accuracy_tables(tables, None))


def add_costs(report: Report, history: Callable) -> None:
    """The verdict tables with the cost to reach 0.1 sd beside them, from the runs' histories."""
    report.accuracy = accuracy_tables(report.tables, history, report.options.cost_axis)


def _without_metrics(runs: list[RunRecord], metrics: list[Metric]) -> list[tuple[RunRecord, list[str]]]:
    """Finished runs lacking a reported metric that other runs of the same model logged."""
    logged: dict[str, set[str]] = {}
    for run in runs:
        logged.setdefault(run.settings.get("model", ""), set()).update(run.metrics)
    wanted = {m.name for m in metrics}
    lacking = [(run, sorted((logged[run.settings.get("model", "")] & wanted) - set(run.metrics))) for run in runs]
    return [(run, names) for run, names in lacking if names]


# --------------------------------------------------------------------------------- figures


def draw_figures(report: Report, directory: Path, history: Callable) -> None:
    """Every figure whose data exist; the others are recorded in ``report.skipped`` with the reason."""
    from mcsa_bench.report.figures import FigureMaker, Renderer, cores, method_colors

    columns = {c for tables in report.tables.values() for t in tables for c in t.columns}
    names = report.options.methods if report.options.column == "method" else MethodNames({})
    renderer = Renderer(cores())
    try:
        maker = FigureMaker(directory, history, method_colors(columns, names), names, report.options.interactive,
                            renderer)
        _draw_all(report, maker)
    finally:
        renderer.close()
    report.figures, report.skipped = maker.figures, maker.skipped


def _draw_all(report: Report, maker) -> None:
    for tables in report.tables.values():
        for table in tables:
            maker.curves(table, "iteration")
            maker.curves(table, "wall_time")
            if table.metric.name in REFERENCE_METRICS and report.options.cost_axis != "wall_time":
                maker.curves(table, report.options.cost_axis)  # accuracy against cost
            maker.critical_difference(table)
    finished = report.runset.finished
    options = report.options
    variance = Metric.of("grad_variance", METRICS["grad_variance"])
    _against_setting(maker, finished, variance, "N", report.rows, options, "gradient variance vs N")
    for metric in report.metrics:
        _against_setting(maker, finished, metric, "lr", ("optimizer",), options,
                         f"final {metric.name} vs stepsize per optimizer")


def _against_setting(maker, runs, metric: Metric, setting: str, facets, options: Options, kind: str) -> None:
    with_metric = [r for r in runs if metric.name in r.metrics]
    values = sorted({r.settings.get(setting, "") for r in with_metric})
    if not with_metric:
        maker.skip(kind, metric.name, f"no finished run logged {metric.name}")
    elif len(values) < 2:
        maker.skip(kind, metric.name, f"{setting} takes one value ({values[0] or 'none'})")
    elif not all(natural_key(v)[0] == 0 for v in values):
        maker.skip(kind, metric.name, f"{setting} has values that are not numbers: {', '.join(values)}")
    else:
        tables, _ = build_tables(
            with_metric, metric, (*facets, setting), options.column, options.confidence, options.alpha, options.methods
        )
        maker.final_vs_setting(tables, setting, kind)


# ----------------------------------------------------------------------------------- files


def write_report(report: Report, directory: Path) -> None:
    """Write every file of the report (figures must already be in ``directory/figures``)."""
    from mcsa_bench.report.page import render_page, render_tables_page

    directory.mkdir(parents=True, exist_ok=True)
    all_tables = [t for tables in report.tables.values() for t in tables]
    contents = {
        "report.html": render_page(report),
        "tables.md": f"# {report.name}\n\n"
        + "\n".join(to_markdown(t) for t in all_tables)
        + "".join("\n" + t.markdown() for t in report.accuracy)
        + _provenance_markdown(report),
        "tables.tex": f"% mcsa-bench report tables; needs \\usepackage{{{LATEX_PACKAGES}}}\n"
        + "\n".join(to_latex(t) for t in all_tables),
        "tables.html": render_tables_page(report),
        "summary.json": json.dumps(summary(report), indent=1, ensure_ascii=False) + "\n",
    }
    for name, text in contents.items():
        (directory / name).write_text(text, encoding="utf-8")
    _write_runs_csv(report, directory / "runs.csv")


def _provenance_markdown(report: Report) -> str:
    lines = [f"- {key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
             for key, value in report.provenance.items()]
    return "\n## Provenance\n\n" + "\n".join(lines) + "\n"


def _ranking_json(ranking: Ranking | None):
    if ranking is None:
        return None
    return {"test": ranking.test, "statistic": ranking.statistic, "pvalue": ranking.pvalue,
            "critical_difference": ranking.critical_difference, "n_blocks": ranking.n_blocks,
            "mean_ranks": dict(zip(ranking.methods, ranking.mean_ranks)), "best": ranking.best,
            "indistinguishable": sorted(ranking.indistinguishable), "alpha": ranking.alpha}


def _table_json(table: Table) -> dict:
    return {
        "metric": table.metric.name, "higher_is_better": table.metric.higher, "panel": dict(table.panel),
        "row_factors": list(table.row_factors), "column_factor": table.column_factor,
        "rows": [list(r) for r in table.rows], "columns": table.columns,
        "cells": [{"row": list(row), "column": col, "n": c.interval.n, "mean": c.interval.mean, "low": c.interval.low,
                   "high": c.interval.high, "interval": c.interval.method, "bold": table.bold(row, col),
                   "values": c.values, "run_ids": {s: r.run_id for s, r in c.runs.items()},
                   "paper": table.published.get((row, col)), "paper_inside_interval": agrees(table, row, col)}
                  for (row, col), c in table.cells.items()],
        "column_names": table.column_names, "settings": dict(table.fixed), "differing_settings": table.differing,
        "paper_sources": table.published_sources,
        "row_rankings": [{"row": list(row), **_ranking_json(r)} for row, r in table.row_rankings.items()],
        "overall": _ranking_json(table.overall), "notes": table.notes, "missing": table.missing,
    }


def _run_json(run: RunRecord) -> dict:
    return {"run_id": run.run_id, "name": run.name, "status": run.status, "error": run.error, "settings": run.settings}


def summary(report: Report) -> dict:
    runs = report.runset
    return {
        "name": report.name,
        "created": report.created,
        "command": report.command,
        "store": report.store_uri,
        "source": runs.source,
        "filters": list(report.options.filters),
        "grid_note": runs.grid_note,
        "rows": list(report.rows),
        "column": report.options.column,
        "confidence": report.options.confidence,
        "alpha": report.options.alpha,
        "n_runs": len(runs.runs),
        "provenance": report.provenance,
        "tables": [_table_json(t) for tables in report.tables.values() for t in tables],
        "accuracy": [t.as_json() for t in report.accuracy],
        "not_finished": [_run_json(r) for r in runs.not_finished],
        "diverged": [{**_run_json(r), "reason": r.tags.get(HEALTH_REASON_TAG, "")} for r in runs.diverged],
        "missing_jobs": runs.missing_jobs,
        "reused": [_run_json(r) for r in runs.reused],
        "superseded": [_run_json(r) for r in report.superseded],
        "without_metrics": [{**_run_json(r), "lacks": names} for r, names in report.without_metrics],
        "figures": [
            {
                "kind": f.kind,
                "section": f.section,
                "caption": f.caption,
                "png": f"figures/{f.png.name}",
                "svg": f"figures/{f.svg.name}",
                "pdf": f"figures/{f.pdf.name}",
                **({"alternate_png": f"figures/{f.alternate.name}"} if f.alternate else {}),
            }
            for f in report.figures
        ],
        "skipped_figures": [{"kind": s.kind, "subject": s.subject, "reason": s.reason} for s in report.skipped],
    }


def _write_runs_csv(report: Report, path: Path) -> None:
    metrics = [m.name for m in report.metrics]
    header = ["run_id", "name", "status", "method", *KEY_SETTINGS, *metrics, "error"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for run in report.runset.runs:
            writer.writerow([spreadsheet_safe(cell) for cell in (
                run.run_id, run.name, run.status, run.settings.get("method", ""),
                *(run.settings.get(k, "") for k in KEY_SETTINGS), *(run.metrics.get(m, "") for m in metrics),
                run.error)])


#: what makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_safe(cell):
    """A text cell that a spreadsheet would take for a formula (a co-author's run name ``=cmd|' /C calc'!A0``)
    with a ' before it, as OWASP advises; numbers, and text that is a number (a setting ``-1``), as they are."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) and not NUMBER.fullmatch(cell):
        return "'" + cell
    return cell
