"""Tables like the papers': per data set (row) and method (column) the mean final metric over the
replications (run seeds) with its bootstrap interval; bold the best method and every method not
distinguishable from it. Rendered as Markdown, LaTeX and HTML.

Grouping: the rows and the column are chosen factors (key settings or params); the replications
are the run seeds. Any other factor that varies among the runs of one cell (e.g. N, or
``model.dim``) would mix settings in a cell, so it splits the runs into separate tables, one per
combination of its values (a *panel*), never averaged over.
"""

from __future__ import annotations

import html
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.report.labels import MethodNames, natural_key, setting_label, value_label, value_sort_key
from mcsa_bench.report.runs import RunRecord
from mcsa_bench.report.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, Interval, Ranking, mean_interval, rank_methods
from mcsa_bench.tracking.record import (
    HIGHER,
    KEY_SETTINGS,
    LOWER,
    MetricSpec,
    axis_label,
    changes_results,
    floor_metric,
)

Row = tuple[str, ...]
#: fewer replications than this: the notes warn that the intervals are unreliable
FEW_REPLICATIONS = 5
#: the settings a table's notes state when they are equal in all its runs (the Gaussian target's dimension too)
STATED_SETTINGS = ("model", "model.dim", "dataset", "family", "optimizer", "lr", "N", "T")


@dataclass(frozen=True)
class Metric:
    """A tabled metric: its name, which way is better, and its label with its unit (the name when empty)."""

    name: str
    higher: bool
    label: str = ""

    @classmethod
    def of(cls, name: str, spec: MetricSpec) -> Metric:
        """The metric as its spec (the run record's catalogue, or its producer's declaration) describes it;
        a spec without a direction needs one chosen (``--metric NAME:max|min``)."""
        if spec.direction not in (HIGHER, LOWER):
            raise ConfigurationError(
                f"metric {name!r} has no better direction; choose one with --metric {name}:max or {name}:min"
            )
        return cls(name, spec.direction == HIGHER, axis_label(spec, name))

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher else "lower is better"

    @property
    def axis_label(self) -> str:
        return self.label or self.name

    @property
    def heading(self) -> str:
        """The metric in words for a heading: its label with its unit, and which way is better."""
        return f"{self.axis_label}, {self.direction}"


@dataclass
class Cell:
    """The runs of one (row, column) of a table, one per seed, and their final values."""

    runs: dict[str, RunRecord]  # seed -> run
    values: dict[str, float]  # seed -> final metric value
    interval: Interval


@dataclass
class Table:
    metric: Metric
    panel: tuple[tuple[str, str], ...]  # the factors fixed for this table, with their values
    row_factors: tuple[str, ...]
    column_factor: str
    rows: list[Row]
    columns: list[str]
    cells: dict[tuple[Row, str], Cell]
    row_rankings: dict[Row, Ranking]
    overall: Ranking | None  # across rows (Demšar's setting: blocks = data sets)
    confidence: float
    alpha: float
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # cells and replications without a finished run
    column_names: dict[str, str] = field(default_factory=dict)  # the heading of each column
    fixed: list[tuple[str, str]] = field(default_factory=list)  # key settings equal in every run of the table
    #: result-changing settings that differ between the columns of a row: setting -> column -> its value(s)
    differing: dict[str, dict[str, str]] = field(default_factory=dict)
    published: dict[tuple[Row, str], float] = field(default_factory=dict)  # the paper's value of a cell
    unmarked: set[tuple[Row, str]] = field(default_factory=set)  # cells of runs not at the paper's size: no ✓ or ✗
    published_text: dict[tuple[Row, str], str] = field(default_factory=dict)  # that value as published (-0.50)
    published_sources: list[str] = field(default_factory=list)

    @property
    def panel_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.panel)

    @property
    def title(self) -> str:
        return self.metric.heading + (f": {self.panel_text}" if self.panel else "")

    @property
    def slug(self) -> str:
        fixed = "_".join(f"{k}-{v}" for k, v in self.panel)
        return re.sub(r"[^\w.-]+", "_", self.metric.name + (f"__{fixed}" if fixed else ""))

    def column_label(self, column: str) -> str:
        return self.column_names.get(column, column)

    def row_label(self, row: Row) -> str:
        return ", ".join(value_label(factor, value) or "–" for factor, value in zip(self.row_factors, row))

    def bold(self, row: Row, column: str) -> bool:
        ranking = self.row_rankings.get(row)
        return ranking is not None and column in ranking.indistinguishable


def default_rows(runs: list[RunRecord]) -> tuple[str, ...]:
    """The papers' rows: the data set; the model for data-free models; both when the runs mix them."""
    with_data = {bool(r.settings.get("dataset")) for r in runs}
    return {frozenset({True}): ("dataset",), frozenset({False}): ("model",)}.get(
        frozenset(with_data), ("model", "dataset")
    )


def _seed_derived(factors: list[dict[str, str]]) -> set[str]:
    """Params equal to the seed in every run that has them (e.g. ``model.split_seed: ${seed}``)."""
    if len({f.get("seed", "") for f in factors}) < 2:
        return set()
    names = set().union(*factors) - set(KEY_SETTINGS) - {"method"}
    return {n for n in names if all(f[n] == f.get("seed") for f in factors if n in f)}


def panel_factors(factors: list[dict[str, str]], cell_keys: list, exclude: set[str]) -> list[str]:
    """Factors that vary among the runs of some cell (besides the seed): each value gets its own table."""
    groups: dict = defaultdict(list)
    for f, key in zip(factors, cell_keys):
        groups[key].append(f)
    names = {n for n in set().union(*factors) - exclude - {"seed"} - _seed_derived(factors) if changes_results(n)}
    varying = {n for n in names if any(len({f.get(n, "") for f in group}) > 1 for group in groups.values())}
    order = ["method", *KEY_SETTINGS]
    return sorted(varying, key=lambda n: (order.index(n) if n in order else len(order), n))


def build_tables(runs: list[RunRecord], metric: Metric, rows: tuple[str, ...], column: str,
                 confidence: float = 0.95, alpha: float = 0.05, names: MethodNames | None = None,
                 published: dict | None = None) -> tuple[list[Table], list[RunRecord]]:
    """The tables of ``metric`` over the finished runs that logged it, and the runs superseded by a
    later run of the same cell and seed (only the latest counts). ``names`` names and orders the
    methods (when the columns are methods); ``published`` maps a run id to its paper's values."""
    runs = [r for r in runs if r.status == "FINISHED" and metric.name in r.metrics]
    if not runs:
        return [], []
    factors = [r.factors() for r in runs]
    cell_of = [(tuple(f.get(k, "") for k in rows), f.get(column, "")) for f in factors]
    panel_names = panel_factors(factors, cell_of, set(rows) | {column})
    grouped: dict = defaultdict(dict)
    superseded = []
    for run, f, (row, col) in sorted(zip(runs, factors, cell_of), key=lambda t: t[0].start_time):
        panel = tuple((n, f.get(n, "")) for n in panel_names)
        previous = grouped[panel].get((row, col, run.seed))
        if previous is not None:
            superseded.append(previous)
        grouped[panel][(row, col, run.seed)] = run
    names = names if names is not None and column == "method" else MethodNames({})
    tables = [_table(metric, panel, rows, column, by_cell, confidence, alpha, names, published or {})
              for panel, by_cell in sorted(grouped.items(), key=lambda item: [natural_key(v) for _, v in item[0]])]
    return tables, superseded


def _table(metric: Metric, panel, row_factors, column, runs_by_key, confidence, alpha, names: MethodNames,
           published: dict) -> Table:
    rows = sorted({row for row, _, _ in runs_by_key}, key=lambda r: [value_sort_key(*fv) for fv in zip(row_factors, r)])
    columns = sorted({col for _, col, _ in runs_by_key}, key=names.sort_key)
    cells = {}
    for (row, col, seed), run in runs_by_key.items():
        cell = cells.setdefault((row, col), Cell({}, {}, None))
        cell.runs[seed] = run
        cell.values[seed] = run.metrics[metric.name]
    for cell in cells.values():
        cell.interval = mean_interval([cell.values[s] for s in sorted(cell.values, key=natural_key)], confidence)
    table = Table(metric, panel, row_factors, column, rows, columns, cells, {}, None, confidence, alpha)
    for row in rows:
        table.row_rankings[row] = _within_noise_floor(table, row, _rank_row(table, row))
        table.missing.extend(_missing(table, row))
    complete = [row for row in rows if all((row, c) in cells for c in columns)]
    if len(complete) >= 2 and len(columns) >= 2:
        means = np.array([[cells[row, c].interval.mean for c in columns] for row in complete])
        table.overall = rank_methods(means, columns, metric.higher, alpha)
    _settings(table, names)
    _published(table, published)
    table.notes = _notes(table, complete)
    return table


#: settings that are part of a method (its scheme, kernel and their parameters): they differ between methods by design
METHOD_SETTINGS = ("scheme", "kernel", "estimator.", "kernel.")


def _settings(table: Table, names: MethodNames) -> None:
    """The key settings every run of the table shares, the result-changing settings that differ between
    the columns of a row, and the column headings (a column whose value of such a setting is not the
    most common one says so: ``ELBO (N=1)``; on a tie every column does)."""
    runs = [run for cell in table.cells.values() for run in cell.runs.values()]
    factors = {run.run_id: run.factors() for run in runs}
    all_factors = list(factors.values())
    table.fixed = [(k, all_factors[0].get(k, "")) for k in STATED_SETTINGS
                   if k not in (*table.row_factors, table.column_factor)
                   and len({f.get(k, "") for f in all_factors}) == 1 and all_factors[0].get(k)]
    own = METHOD_SETTINGS if table.column_factor == "method" else (f"{table.column_factor}.",)
    candidates = {n for n in set().union(*all_factors) - {*table.row_factors, table.column_factor, "seed", "method"}
                  - dict(table.panel).keys() - _seed_derived(all_factors)
                  if changes_results(n) and not any(n.startswith(o) if o.endswith(".") else n == o for o in own)}
    for name in sorted(candidates):
        per_column: dict[str, set[str]] = defaultdict(set)
        differs = False
        for row in table.rows:
            in_row = {col: {factors[r.run_id].get(name, "") for r in table.cells[row, col].runs.values()}
                      for col in table.columns if (row, col) in table.cells}
            differs |= len(set().union(*in_row.values())) > 1
            for col, values in in_row.items():
                per_column[col] |= values
        if differs:
            table.differing[name] = {col: ",".join(sorted(v, key=natural_key)) for col, v in per_column.items()}
    usual = {name: _most_common(by_column.values()) for name, by_column in table.differing.items()}
    for col in table.columns:
        unusual = [f"{name}={value}" for name, by_column in table.differing.items()
                   if (value := by_column.get(col)) is not None and value != usual[name]]
        table.column_names[col] = names.name(col) + (f" ({', '.join(unusual)})" if unusual else "")


def _most_common(values) -> str | None:
    """The value held most often, or None on a tie (then every column names its value)."""
    top = Counter(values).most_common(2)
    return top[0][0] if len(top) == 1 or top[0][1] > top[1][1] else None


def _published(table: Table, published: dict) -> None:
    """The paper's value of each cell whose runs' experiment has one (the ``paper:`` block)."""
    for (row, col), cell in table.cells.items():
        blocks = {id(published[r.run_id]): published[r.run_id] for r in cell.runs.values() if r.run_id in published}
        if len(blocks) == 1:
            (block,) = blocks.values()
            value = block.value(col, table.metric.name)
            if value is not None:
                table.published[row, col] = value
                table.published_text[row, col] = block.text(col, table.metric.name)
                if not all(block.at_its_size(run) for run in cell.runs.values()):
                    table.unmarked.add((row, col))
                if block.source not in table.published_sources:
                    table.published_sources.append(block.source)


def agrees(table: Table, row: Row, column: str) -> bool | None:
    """Whether the paper's value lies in the cell's interval (None: no paper value, no interval, or runs of another
    size than the paper's, which no one expects to match it)."""
    value, interval = table.published.get((row, column)), table.cells[row, column].interval
    if value is None or interval.low is None or (row, column) in table.unmarked:
        return None
    return interval.low <= value <= interval.high


def _rank_row(table: Table, row: Row) -> Ranking:
    """The row's methods ranked over the seeds every one of them finished (the blocks)."""
    present = [c for c in table.columns if (row, c) in table.cells]
    blocks = sorted(set.intersection(*(set(table.cells[row, c].values) for c in present)), key=natural_key)
    scores = np.array([[table.cells[row, c].values[s] for c in present] for s in blocks]).reshape(
        len(blocks), len(present)
    )
    return rank_methods(scores, present, table.metric.higher, table.alpha)


def noise_floor(table: Table, row: Row) -> float:
    """The largest noise floor the row's runs logged for the table's metric (``<metric>_floor``: the
    reference's own Monte Carlo error, docs/references.md); 0 where none did."""
    name = floor_metric(table.metric.name)
    return max((run.metrics.get(name, 0.0) for (r, _), cell in table.cells.items() if r == row
                for run in cell.runs.values()), default=0.0)


def _within_noise_floor(table: Table, row: Row, ranking: Ranking) -> Ranking:
    """The ranking with every method whose mean is within the noise floor of the best method's added to
    the bold set: a difference the reference cannot resolve ranks nothing."""
    floor = noise_floor(table, row)
    if not floor:
        return ranking
    best = table.cells[row, ranking.best].interval.mean
    tied = {c for c in ranking.methods if abs(table.cells[row, c].interval.mean - best) <= floor}
    return replace(ranking, indistinguishable=ranking.indistinguishable | tied)


def floor_notes(table: Table) -> list[str]:
    """A note on the rows whose metric has a noise floor: what it is and that it bolds."""
    floors = {table.row_label(row): floor for row in table.rows if (floor := noise_floor(table, row))}
    if not floors:
        return []
    listed = "; ".join(f"{label} {floor:.2g}" for label, floor in floors.items())
    return [f"Noise floor of {table.metric.name} (what two independent references of the shipped precision "
            f"differ by, docs/references.md): {listed}. Also bold: every mean within it of the best's."]


def _missing(table: Table, row: Row) -> list[str]:
    """Cells of the row without a finished run, and seeds a cell lacks that other cells of the row have."""
    seeds = set().union(*(cell.values for (r, _), cell in table.cells.items() if r == row))
    missing = []
    for column in table.columns:
        cell = table.cells.get((row, column))
        if cell is None:
            missing.append(f"{table.row_label(row)} × {column}: no finished run")
        elif lacking := sorted(seeds - set(cell.values), key=natural_key):
            missing.append(f"{table.row_label(row)} × {column}: no finished run for seed {', '.join(lacking)}")
    return missing


def settings_text(table: Table) -> str:
    """The settings every run of the table shares and the number of replications, for notes and captions."""
    counts = sorted({cell.interval.n for cell in table.cells.values()})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return ", ".join([*(f"{setting_label(k)} {v}" for k, v in table.fixed), f"{n} replications (run seeds)"])


def few_replications(table: Table) -> str | None:
    """A warning when a cell rests on fewer than FEW_REPLICATIONS replications."""
    least = min(cell.interval.n for cell in table.cells.values())
    if least >= FEW_REPLICATIONS:
        return None
    return (f"Warning: cells with fewer than {FEW_REPLICATIONS} replications (n = {least}): their intervals and "
            "tests rest on too few runs to stand behind.")


def caption(table: Table) -> str:
    """A table's caption: what a cell is, the interval's level, and the fixed settings."""
    return (
        f"{table.metric.axis_label}, {table.metric.direction}: mean final value with its "
        f"{table.confidence:.0%} bootstrap interval"
        + (f"; {', '.join(f'{k}={v}' for k, v in table.panel)}" if table.panel else "")
        + f". Settings: {settings_text(table)}."
    )


def _notes(table: Table, complete: list[Row]) -> list[str]:
    counts = sorted({cell.interval.n for cell in table.cells.values()})
    n_text = f"n = {counts[0]}" if len(counts) == 1 else f"n = {counts[0]}–{counts[-1]} (shown where not {counts[-1]})"
    methods = {cell.interval.method for cell in table.cells.values()} - {"constant", "non-finite"}
    if methods == {"none"}:
        interval = "one replication per cell: no interval"
    else:
        kinds = "/".join(sorted(methods - {"none"})) or "every cell's values equal"
        interval = (f"[low, high]: {table.confidence:.0%} bootstrap interval ({kinds}, "
                    f"{BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED})")
    if any(cell.interval.method == "non-finite" for cell in table.cells.values()):
        interval += "; a cell with a NaN or infinite value shows its mean (NaN or ±∞) and no interval"
    notes = [f"Settings: {settings_text(table)}."]
    if warning := few_replications(table):
        notes.append(warning)
    for name, by_column in table.differing.items():
        usual = _most_common(by_column.values())
        listed = [f"{table.column_label(c)}: {v}" for c, v in by_column.items() if v != usual]
        notes.append(f"Warning: {setting_label(name)} differs between the {table.column_factor}s of a row: "
                     + "; ".join(listed + ([f"the others: {usual}"] if usual is not None else [])) + ".")
    notes.append(f"Mean final {table.metric.name} over the run seeds ({n_text}); {interval}. "
                 f"{table.metric.direction.capitalize()}.")
    notes += [
        f"Bold: per {', '.join(setting_label(f) for f in table.row_factors)}, "
        f"the best mean rank and every {table.column_factor} not "
        f"distinguishable from it at α = {table.alpha:g} "
        "(Friedman test with the seeds as blocks and Nemenyi post-hoc, Demšar 2006; Wilcoxon for two)."
    ]
    notes += floor_notes(table)
    if table.published:
        notes.append(f"paper: the published mean ({'; '.join(table.published_sources)}); ✓ inside our interval, "
                     "✗ outside it" + ("; unmarked where the runs are of another size than the paper's (fewer "
                                       "iterations, a subset of the rows: size=tiny, smoke or bench), which no one "
                                       "expects to match it" if table.unmarked else "") + ".")
    for row, ranking in table.row_rankings.items():
        present = len(ranking.methods)
        seeds = max(len(table.cells[row, c].values) for c in ranking.methods)
        common = (
            f" (on the {ranking.n_blocks} seeds all {present} share, of {seeds})" if ranking.n_blocks < seeds else ""
        )
        notes.append(f"{table.row_label(row)}: {ranking.describe()}{common}.")
    if table.overall is not None:
        left_out = [table.row_label(r) for r in table.rows if r not in complete]
        notes.append(
            f"Average rank over {len(complete)} rows (blocks: the rows' means, Demšar 2006): "
            f"{table.overall.describe()}"
            + (f"; rows without every {table.column_factor} left out: {', '.join(left_out)}" if left_out else "")
            + "."
        )
    return notes


# ------------------------------------------------------------------------------- rendering


def decimals(table: Table) -> int:
    """Digits after the point: two significant digits of the typical interval width (else of the values)."""
    widths = [c.interval.high - c.interval.low for c in table.cells.values()
              if c.interval.low is not None and c.interval.high > c.interval.low]
    scale = (
        float(np.median(widths))
        if widths
        else float(np.median([abs(c.interval.mean) for c in table.cells.values()])) / 100
    )
    return int(np.clip(1 - np.floor(np.log10(scale)), 0, 6)) if scale > 0 and np.isfinite(scale) else 3


#: magnitudes from which a value is written in scientific notation (a diverged fit's 10⁸¹ nats)
SCIENTIFIC_FROM = 1e5


def number_text(value: float, digits: int) -> str:
    """``digits`` after the point, or three significant digits in scientific notation for large values."""
    return f"{value:.3g}" if abs(value) >= SCIENTIFIC_FROM else f"{value:.{digits}f}"


@dataclass(frozen=True)
class CellText:
    mean: str
    interval: str  # "[low, high]" or ""
    count: str  # "n=3" where a cell has fewer replications than the table's most, else ""
    bold: bool
    published: str = ""  # the paper's value, or ""
    agrees: bool | None = None  # the paper's value inside the interval (None: nothing to compare)

    def paper(self, inside: str = "✓", outside: str = "✗") -> str:
        if not self.published:
            return ""
        return f"paper {self.published}" + ("" if self.agrees is None else f" {inside if self.agrees else outside}")


def cell_texts(table: Table) -> dict[tuple[Row, str], CellText]:
    digits = decimals(table)
    most = max(c.interval.n for c in table.cells.values())
    texts = {}
    for (row, col), cell in table.cells.items():
        iv = cell.interval
        interval = f"[{number_text(iv.low, digits)}, {number_text(iv.high, digits)}]" if iv.low is not None else ""
        texts[row, col] = CellText(number_text(iv.mean, digits), interval, f"n={iv.n}" if iv.n < most else "",
                                   table.bold(row, col), table.published_text.get((row, col), ""),
                                   agrees(table, row, col))
    return texts


def header(table: Table) -> list[str]:
    return [", ".join(setting_label(f) for f in table.row_factors), *(table.column_label(c) for c in table.columns)]


def overall_texts(table: Table) -> list[tuple[str, bool]]:
    ranking = table.overall
    return [(f"{r:.2f}", m in ranking.indistinguishable) for m, r in zip(ranking.methods, ranking.mean_ranks)]


def to_markdown(table: Table) -> str:
    texts = cell_texts(table)
    head = header(table)
    lines = [f"### {table.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table.rows:
        cells = []
        for col in table.columns:
            t = texts.get((row, col))
            cells.append(
                "—"
                if t is None
                else " ".join(
                    filter(
                        None,
                        [f"**{t.mean}**" if t.bold else t.mean, t.interval, t.count, t.published and f"({t.paper()})"],
                    )
                )
            )
        lines.append(f"| {table.row_label(row)} | " + " | ".join(cells) + " |")
    if table.overall is not None:
        lines.append("| average rank | " + " | ".join(f"**{r}**" if b else r for r, b in overall_texts(table)) + " |")
    lines += ["", *(f"{i}. {note}" for i, note in enumerate(table.notes, 1))]
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "χ²": r"$\chi^2$",
    "α": r"$\alpha$",
    "≥": r"$\geq$",
    "×": r"$\times$",
    "–": "--",
    "—": "---",
    "²": r"$^2$",
    "≤": r"$\leq$",
    "γ": r"$\gamma$",
    "π": r"$\pi$",
    "‖": r"$\|$",
    "✓": r"\ding{51}",  # pifont (LATEX_PACKAGES)
    "✗": r"\ding{55}",
    "k̂": r"$\hat{k}$",
    "−": "$-$",
    "∇": r"$\nabla$",
    "\u00a0": "~",
}
_LATEX_PATTERN = re.compile("|".join(re.escape(k) for k in sorted(_LATEX_SPECIAL, key=len, reverse=True)))


def latex_escape(text: str) -> str:
    return _LATEX_PATTERN.sub(lambda m: _LATEX_SPECIAL[m.group(0)], text)


#: the packages tables.tex needs: booktabs' rules, pifont's ✓ and ✗ (\ding{51}, \ding{55}); in every TeX distribution
LATEX_PACKAGES = "booktabs,pifont"


def to_latex(table: Table) -> str:
    """A booktabs table (needs ``\\usepackage{`` LATEX_PACKAGES ``}``)."""
    texts = cell_texts(table)
    head = [latex_escape(h) for h in header(table)]
    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{latex_escape(caption(table))}}}",
             rf"\begin{{tabular}}{{l{'c' * len(table.columns)}}}", r"\toprule", " & ".join(head) + r" \\", r"\midrule"]
    for row in table.rows:
        cells = []
        for col in table.columns:
            t = texts.get((row, col))
            if t is None:
                cells.append("---")
                continue
            mean = rf"$\mathbf{{{t.mean}}}$" if t.bold else f"${t.mean}$"
            extra = " ".join(f"${part}$" for part in (t.interval, t.count) if part)
            if t.published:
                extra += f" (paper ${t.published}$" + ("" if t.agrees is None else
                                                       " " + latex_escape("✓" if t.agrees else "✗")) + ")"
            cells.append(mean + (rf" {{\scriptsize {extra}}}" if extra else ""))
        lines.append(latex_escape(table.row_label(row)) + " & " + " & ".join(cells) + r" \\")
    if table.overall is not None:
        lines += [r"\midrule", "average rank & " + " & ".join(rf"$\mathbf{{{r}}}$" if b else f"${r}$"
                                                               for r, b in overall_texts(table)) + r" \\"]
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip\footnotesize"]
    lines += [f"{i}. {latex_escape(note)}\\\\" for i, note in enumerate(table.notes, 1)]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def to_html(table: Table, under_heading: bool = False) -> str:
    """A <table> with its caption and an ordered list of notes (styles come from the page). ``under_heading``:
    the page's heading names the metric already, so the caption names only the table's panel, if any."""
    texts = cell_texts(table)
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header(table))
    body = []
    for row in table.rows:
        cells = []
        for col in table.columns:
            t = texts.get((row, col))
            if t is None:
                cells.append('<td class="missing">—</td>')
                continue
            mean = esc(t.mean.replace("-", "−"))
            parts = [f"<b>{mean}</b>" if t.bold else mean]
            if t.interval:
                parts.append(f'<span class="ci">{esc(t.interval.replace("-", "−"))}</span>')
            if t.count:
                parts.append(f'<span class="n">{esc(t.count)}</span>')
            if t.published:
                parts.append(
                    f'<span class="paper{"" if t.agrees is not False else " off"}">'
                    f'{esc(t.paper().replace("-", "−"))}</span>'
                )
            cells.append(f"<td>{' '.join(parts)}</td>")
        body.append(f"<tr><th>{esc(table.row_label(row))}</th>{''.join(cells)}</tr>")
    if table.overall is not None:
        ranks = "".join(f"<td><b>{r}</b></td>" if b else f"<td>{r}</td>" for r, b in overall_texts(table))
        body.append(f'<tr class="rank"><th>average rank</th>{ranks}</tr>')
    notes = "".join(f"<li>{esc(note)}</li>" for note in table.notes)
    heading = table.panel_text if under_heading else table.title
    heading = f"<caption>{esc(heading)}</caption>" if heading else ""
    return (f'<table class="results">{heading}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>\n<ol class="notes">{notes}</ol>\n')
