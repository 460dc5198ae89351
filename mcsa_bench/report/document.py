"""What a report holds: its options and its contents (tables, figures, the runs behind them), the
data that mcsa_bench.report.build computes and mcsa_bench.report.page renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mcsa_bench.report.labels import MethodNames
from mcsa_bench.report.runs import RunRecord, RunSet
from mcsa_bench.report.tables import Metric, Table
from mcsa_bench.report.verdicts import CellTable
from mcsa_bench.tracking.record import COST_METRICS


@dataclass(frozen=True)
class Options:
    metrics: tuple[Metric, ...] = ()  # empty: every result metric the finished runs logged
    rows: tuple[str, ...] = ()  # empty: the data set (or the model, for models without data)
    column: str = "method"
    confidence: float = 0.95
    alpha: float = 0.05
    filters: tuple[str, ...] = ()
    methods: MethodNames = field(default_factory=MethodNames)  # the methods' names and order
    papers: bool = True  # the papers' published values beside ours
    interactive: bool = False  # the page lets its reader choose the metric and the curves' y scale
    cost_axis: str = COST_METRICS[0]  # the x axis of accuracy against cost, and of "to reach 0.1 sd"


@dataclass
class Report:
    name: str
    command: str
    store_uri: str
    runset: RunSet
    options: Options
    metrics: list[Metric]
    rows: tuple[str, ...]
    tables: dict[str, list[Table]]
    superseded: list[RunRecord]
    without_metrics: list[tuple[RunRecord, list[str]]]
    created: str = field(default_factory=lambda: datetime.now().astimezone().isoformat(timespec="seconds"))
    figures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    provenance: dict = field(default_factory=dict)  # mcsa_bench.report.provenance
    accuracy: list[CellTable] = field(default_factory=list)  # mcsa_bench.report.verdicts

    @property
    def filters(self) -> tuple[str, ...]:
        return tuple(f"--where {f}" for f in self.options.filters)
