"""Beside the tables of posterior accuracy: per cell how many replications reached each accuracy level
(the runs' ``mcsa_bench.accuracy`` tags) and were flagged by run health, and the cost to reach an
accuracy ("evaluations to reach 0.1 sd") from the runs' histories (docs/report.md, "Accuracy verdicts
and cost"). Runs recorded before these existed show "—".
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mcsa_bench.report.tables import Row, Table
from mcsa_bench.tracking.record import (
    ACCURACY_LEVELS,
    ACCURACY_TAG,
    COST_METRICS,
    HEALTH_DIVERGED,
    HEALTH_SUSPECT,
    HEALTH_TAG,
    floor_metric,
)

#: the table whose cells the verdicts and costs follow: the largest mean error, in posterior sds
VERDICT_METRIC = "ref_mean_error_max"
#: "evaluations to reach": the largest mean error (posterior sds) a run must get to, and the cost axis
REACH_THRESHOLD = 0.1

History = Callable[[str, str], tuple[np.ndarray, np.ndarray]]


def verdict_counts(table: Table) -> dict[tuple[Row, str], Counter]:
    """Per cell: how many of its runs reached each accuracy level, and were tagged diverged or suspect
    (``Counter`` keys: the levels and health states; a cell none of whose runs has a verdict is left out)."""
    counts = {}
    for key, cell in table.cells.items():
        tags = [run.tags for run in cell.runs.values() if ACCURACY_TAG in run.tags]
        if tags:
            counts[key] = Counter(t[ACCURACY_TAG] for t in tags) + Counter(
                t.get(HEALTH_TAG) for t in tags if t.get(HEALTH_TAG) in (HEALTH_DIVERGED, HEALTH_SUSPECT))
    return counts


def verdict_text(count: Counter | None) -> str:
    """``accurate 3 · rough 1 · off 1 of 5; flagged 2`` (— without verdicts)."""
    if count is None:
        return "—"
    total = sum(count[level] for level in ACCURACY_LEVELS)
    levels = " · ".join(f"{level} {count[level]}" for level in ACCURACY_LEVELS if count[level])
    flagged = count[HEALTH_DIVERGED] + count[HEALTH_SUSPECT]
    return f"{levels} of {total}" + (f"; flagged {flagged}" if flagged else "")


@dataclass(frozen=True)
class Reach:
    """The cost to reach a cell's threshold: its median over the replications (None when fewer than half
    reached it) and how many reached it."""

    median: float | None
    reached: int
    runs: int


def cost_to_reach(table: Table, history: History, cost: str = COST_METRICS[0],
                  threshold: float = REACH_THRESHOLD) -> dict[tuple[Row, str], Reach]:
    """Per cell of a table of a posterior-accuracy metric: the ``cost`` at the first evaluation whose metric
    is at most ``threshold`` plus the run's noise floor, median over its runs (a run that never gets there
    counts as infinite); cells whose runs logged no cost are left out."""
    reach = {}
    for key, cell in table.cells.items():
        costs = [_first_cost(run, table.metric.name, history, cost, threshold) for run in cell.runs.values()]
        costs = [c for c in costs if c is not None]
        if costs:
            finite = np.isfinite(costs)
            median = float(np.median(costs))
            reach[key] = Reach(median if np.isfinite(median) else None, int(finite.sum()), len(costs))
    return reach


def _first_cost(run, metric: str, history: History, cost: str, threshold: float) -> float | None:
    """The run's cost when its metric first reached the threshold (inf: never); None without a cost history."""
    steps, values = history(run.run_id, metric)
    cost_steps, costs = history(run.run_id, cost)
    if cost_steps.size == 0:
        return None
    common, at_metric, at_cost = np.intersect1d(steps, cost_steps, return_indices=True)
    reached = np.flatnonzero(values[at_metric] <= threshold + run.metrics.get(floor_metric(metric), 0.0))
    return float(costs[at_cost[reached[0]]]) if reached.size else float("inf")


def reach_text(reach: Reach | None) -> str:
    if reach is None:
        return "—"
    median = "not reached" if reach.median is None else f"{reach.median:.3g}"
    return f"{median} ({reach.reached} of {reach.runs} reached)"


@dataclass(frozen=True)
class CellTable:
    """A table of text cells over a results table's rows and columns: what this module renders."""

    title: str
    table: Table
    cells: dict[tuple[Row, str], str]
    note: str

    def markdown(self) -> str:
        head = ["", *(self.table.column_label(c) for c in self.table.columns)]
        lines = [f"### {self.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in self.table.rows:
            cells = [self.cells.get((row, c), "—") for c in self.table.columns]
            lines.append(f"| {self.table.row_label(row)} | " + " | ".join(cells) + " |")
        return "\n".join([*lines, "", self.note]) + "\n"

    def html(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(h)}</th>" for h in ["", *(self.table.column_label(c) for c in self.table.columns)])
        body = "".join(f"<tr><th>{esc(self.table.row_label(row))}</th>"
                       + "".join(f"<td>{esc(self.cells.get((row, c), '—'))}</td>" for c in self.table.columns)
                       + "</tr>" for row in self.table.rows)
        return (f'<table class="results"><caption>{esc(self.title)}</caption><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>\n<p class=\"meta\">{esc(self.note)}</p>\n")

    def as_json(self) -> dict:
        return {"title": self.title, "panel": dict(self.table.panel), "note": self.note,
                "cells": [{"row": list(row), "column": col, "text": text} for (row, col), text in self.cells.items()]}


def verdict_table(table: Table) -> CellTable:
    counts = verdict_counts(table)
    return CellTable(f"accuracy verdicts{_panel(table)}", table,
                     {key: verdict_text(counts.get(key)) for key in table.cells},
                     "Replications per accuracy level (mcsa_bench.accuracy: accurate, every mean within 0.1 posterior "
                     "sd, every sd within 10 % and the excess KL within 0.1 nats; rough, within 1 sd and a factor of "
                     "2; else off; each bound widened by the reference's noise floor, docs/references.md) and how "
                     "many run health flagged (diverged or suspect, docs/estimators.md).")


def reach_table(table: Table, history: History, cost: str = COST_METRICS[0]) -> CellTable:
    reach = cost_to_reach(table, history, cost)
    return CellTable(f"{cost} to reach {table.metric.name} ≤ {REACH_THRESHOLD:g}{_panel(table)}", table,
                     {key: reach_text(reach.get(key)) for key in table.cells},
                     f"Median over the replications of {cost} at the first evaluation where {table.metric.name} is "
                     f"at most {REACH_THRESHOLD:g} (plus the reference's noise floor); a replication that never gets "
                     "there counts as infinite, and the median is 'not reached' when half of them never did.")


def _panel(table: Table) -> str:
    return f" ({', '.join(f'{k}={v}' for k, v in table.panel)})" if table.panel else ""


def accuracy_tables(tables: dict[str, list[Table]], history: History | None,
                    cost: str = COST_METRICS[0]) -> list[CellTable]:
    """The verdict table of every table of :data:`VERDICT_METRIC`, and, given the runs' histories, its cost
    to reach :data:`REACH_THRESHOLD`."""
    found = []
    for table in tables.get(VERDICT_METRIC, []):
        found.append(verdict_table(table))
        if history is not None:
            found.append(reach_table(table, history, cost))
    return found
