"""The report's figures (matplotlib, PNG and SVG), each drawn only when its data exist.

- metric vs iteration and vs wall-clock time: per method the median over replications and the
  10–90 % percentile band (the papers' 80 % bands);
- final metric vs a swept setting: gradient variance vs N (NeurIPS paper Fig. 1) and final metric
  vs stepsize per optimizer (Fig. 2), median and 10–90 % band over replications;
- critical-difference diagram of a table (Demšar 2006, Fig. 1 there).

matplotlib's object-oriented API (``matplotlib.figure.Figure``) draws without pyplot, so no
backend or global state is touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from mcsa_bench.report.labels import MethodNames, natural_key, setting_label
from mcsa_bench.report.stats import Ranking
from mcsa_bench.report.tables import Table, few_replications, settings_text
from mcsa_bench.tracking.record import LATER_KEY_DEFAULTS

BAND = (10, 90)  # percentiles of the bands
TIME_GRID_POINTS = 200
DPI = 200  # PNG resolution; the SVG and PDF are vector
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PAGE_WIDTH = 7.0  # inches: a page's text width
PANEL_HEIGHT = 2.3  # inches
PANELS_PER_ROW = 3
YLABEL_CHARACTERS = 30  # a longer y label is wrapped: a panel is 2.3 in high
#: a method that takes this many times longer than the next slowest is cut off the wall-clock axis
SLOW_FACTOR = 3.0
#: the legend's most columns: below a column-wide figure, below a page-wide one (fewer where the names are long)
LEGEND_COLUMNS = (4, 7)
#: metrics that follow a power law in N and in the stepsize (NeurIPS paper Figs. 1-2): log axis when positive
POWER_LAW_METRICS = ("grad_variance", "kl_inclusive", "kl_exclusive", "excess_inclusive_kl")
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "lines.linewidth": 1.3, "axes.spines.top": False, "axes.spines.right": False,
         "svg.fonttype": "none", "pdf.fonttype": 42, "svg.hashsalt": "mcsa-bench"}  # SVG ids: no random salt
#: the files' metadata by format: no creation date, so the same figure always gives the same bytes
METADATA = {".png": None, ".svg": {"Creator": "mcsa-bench report", "Date": None},
            ".pdf": {"Creator": "mcsa-bench report", "CreationDate": None}}


@dataclass(frozen=True)
class FigureFile:
    kind: str
    section: str  # the slug of the table it belongs to, or "settings" for final values vs a setting
    caption: str
    png: Path
    svg: Path
    pdf: Path
    scale: str = ""  # the y scale drawn ("linear" or "log") when an alternate with the other scale exists
    alternate: Path | None = None  # that alternate PNG (``--interactive``)


@dataclass(frozen=True)
class Skipped:
    kind: str
    subject: str
    reason: str


def method_colors(columns, names: MethodNames) -> dict[str, str]:
    """One colour per column value, in the report's method order, the same in every figure of a report."""
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return {c: palette[i % len(palette)] for i, c in enumerate(sorted(set(columns), key=names.sort_key))}


def _new_figure(n_panels: int):
    """Panels sized for a paper: one panel fills a column, more fill the page's width, three to a row."""
    from matplotlib.figure import Figure

    columns = min(PANELS_PER_ROW, n_panels)
    rows = -(-n_panels // columns)
    width = COLUMN_WIDTH if n_panels == 1 else PAGE_WIDTH
    figure = Figure(figsize=(width, PANEL_HEIGHT * rows + 0.45), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for extra in axes[n_panels:]:
        extra.set_visible(False)
    return figure, axes[:n_panels]


def _label_axes(axes, xlabel: str, ylabel: str) -> None:
    """Every panel's x label; the y label (wrapped to fit the panel's height) on the first panel of each row."""
    import textwrap

    for index, axis in enumerate(axes):
        axis.set_xlabel(xlabel)
        if index % PANELS_PER_ROW == 0:
            axis.set_ylabel(textwrap.fill(ylabel, YLABEL_CHARACTERS))


def _legend(figure, axes) -> None:
    """One legend for every panel, below them, off the data, and never wider than the figure: as many columns
    as fit (measured by the renderer), and names too long for a line of their own wrapped."""
    import textwrap

    entries = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if not entries:
        return
    handles, labels = list(entries.values()), list(entries)

    def place(texts, ncols):
        legend = figure.legend(handles, texts, loc="outside lower center", frameon=False, ncols=ncols)
        return legend, _width_fraction(figure, legend)

    for ncols in range(min(len(entries), LEGEND_COLUMNS[int(figure.get_figwidth() >= PAGE_WIDTH)]), 0, -1):
        legend, overflow = place(labels, ncols)
        if overflow <= 1:
            return
        legend.remove()
    characters = max(len(label) for label in labels)
    while True:  # one column is too wide: shorter lines, until they fit with a margin
        characters = max(1, int(characters / overflow * 0.9))
        legend, overflow = place([textwrap.fill(label, characters, break_on_hyphens=False) for label in labels], 1)
        if overflow <= 0.95 or characters == 1:
            return
        legend.remove()


def _width_fraction(figure, artist) -> float:
    """An artist's width as a fraction of its figure's, as the renderer draws it (no renderer given: the figure's)."""
    return artist.get_window_extent().width / figure.bbox.width


def render(figure, paths: tuple[Path, ...]) -> None:
    """The figure's files (PNG, SVG, PDF, in that order), laid out once: the first draw places every panel and
    the legend, and the others draw them where they are (constrained layout would redo the same layout for each)."""
    from matplotlib import rc_context

    with rc_context(STYLE):  # the formats' own settings (fonts kept as text) are read when saving
        for path in paths:
            figure.savefig(path, dpi=DPI, metadata=METADATA[path.suffix])
            figure.set_layout_engine("none")  # keeps the positions the first draw chose


def _render_pickled(figure: bytes, paths: tuple[Path, ...]) -> None:
    import pickle

    render(pickle.loads(figure), paths)


class Renderer:
    """Renders figures as they are made: in this process, or, given ``workers`` > 1 and more than one figure,
    in a pool of that many processes, each figure pickled to one (drawing and the PDF's font subsetting are
    most of a report's CPU, and figures are independent). The files are byte for byte the same either way
    (tests/report/test_readable.py); ``close`` waits for them and raises a worker's error."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self._pool = None
        self._waiting: list = []  # the first figure, until a second one makes a pool worth starting
        self._pending: list = []

    def __call__(self, figure, paths: tuple[Path, ...]) -> None:
        if self.workers <= 1:
            render(figure, paths)
            return
        self._waiting.append((figure, paths))
        if len(self._waiting) > 1 or self._pool is not None:
            self._start()
            self._pending += [self._pool.submit(_render_pickled, _pickled(f), p) for f, p in self._waiting]
            self._waiting.clear()

    def _start(self) -> None:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # forked: a worker starts with what this process imported and its matplotlib settings
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))

    def close(self) -> None:
        try:
            for figure, paths in self._waiting:
                render(figure, paths)
            for done in self._pending:
                done.result()
        finally:
            self._waiting.clear()
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)


def _pickled(figure) -> bytes:
    import pickle

    return pickle.dumps(figure, protocol=pickle.HIGHEST_PROTOCOL)


def cores() -> int:
    """The cores this process may run on."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _band(axis, x, curves, color, label) -> None:
    """Median line and 10–90 % band of ``curves`` (runs × len(x), NaN where a run has no value)."""
    keep = np.any(np.isfinite(curves), axis=0)
    median, low, high = _median_and_band(curves[:, keep])
    x = np.asarray(x)[keep]
    axis.plot(x, median, color=color, label=label)
    if curves.shape[0] > 1:
        axis.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)


def _median_and_band(curves):
    """Per column, the median and the BAND percentiles of the values that are not NaN. numpy's nan-aware
    versions take a column at a time: they are kept for the columns with a NaN (a run that had not started or
    had ended there), the others go through the plain ones at once (the same numbers)."""
    complete = ~np.isnan(curves).any(axis=0)
    median, low, high = np.empty((3, curves.shape[1]))
    median[complete] = np.median(curves[:, complete], axis=0)
    low[complete], high[complete] = np.percentile(curves[:, complete], BAND, axis=0)
    if not complete.all():
        partial = curves[:, ~complete]
        median[~complete] = np.nanmedian(partial, axis=0)
        low[~complete], high[~complete] = np.nanpercentile(partial, BAND, axis=0)
    return median, low, high


def _log_scale(axis, values, metric: str = "", force: str | None = None) -> None:
    """A log y axis where the law is a power (POWER_LAW_METRICS) or the values span two decades, or where
    ``force`` is "log"; never for values that are not all positive (``values``: arrays of any shape)."""
    values = np.concatenate([np.ravel(v) for v in values]) if len(values) else np.empty(0)
    values = values[np.isfinite(values)]
    positive = values.size and np.all(values > 0)
    wanted = (
        (metric in POWER_LAW_METRICS or values.max() / values.min() > 100)
        if force is None and positive
        else force == "log"
    )
    if positive and wanted:
        axis.set_yscale("log")
        if values.max() / values.min() < 10:  # within a decade the ticks are minor ones: plain numbers, not 4.2 × 10¹
            from matplotlib.ticker import FuncFormatter

            plain = FuncFormatter(_plain_number)
            axis.yaxis.set_major_formatter(plain)
            axis.yaxis.set_minor_formatter(plain)


def _plain_number(value, _position) -> str:
    return f"{value:g}"


def _cut_slow(axis, ends: dict[str, float]) -> str:
    """Keep a method much slower than the others (msc+hmc) from flattening their curves: the axis ends a
    little after the next slowest, and the returned sentence names what runs on beyond it."""
    if len(ends) < 2:
        return ""
    ordered = sorted(ends.values())
    if ordered[-1] <= SLOW_FACTOR * ordered[-2]:
        return ""
    limit = 1.1 * ordered[-2]
    axis.set_xlim(0, limit)
    beyond = [f"{label} to {end:.3g} s" for label, end in ends.items() if end > limit]
    return f"runs on beyond the axis: {', '.join(beyond)}"


def _styled(draw):
    """Draw (and save) under the report's style: paper-sized fonts, no top and right spines."""
    def styled(*args, **kwargs):
        from matplotlib import rc_context

        with rc_context(STYLE):
            return draw(*args, **kwargs)

    return styled


#: the x axes of curves besides a cost metric's own name
CURVE_AXES = {"iteration": "iteration", "wall_time": "wall-clock time"}


class FigureMaker:
    """Draws a report's figures into ``directory``; ``history(run_id, metric)`` gives (steps, values);
    ``renderer`` writes each figure's files (default: at once, in this process)."""

    def __init__(self, directory: Path, history: Callable[[str, str], tuple[np.ndarray, np.ndarray]],
                 colors: dict[str, str], names: MethodNames, alternate_scales: bool = False,
                 renderer: Callable = render):
        self.directory = directory
        self.renderer = renderer
        self.alternate_scales = alternate_scales
        self.history = history
        self.colors = colors
        self.names = names
        self.figures: list[FigureFile] = []
        self.skipped: list[Skipped] = []

    def skip(self, kind: str, subject: str, reason: str) -> None:
        self.skipped.append(Skipped(kind, subject, reason))

    # ------------------------------------------------------------------- metric over time

    @_styled
    def curves(self, table: Table, over: str) -> None:
        """``table.metric`` vs iteration (``over="iteration"``), vs wall-clock seconds (``"wall_time"``) or vs
        another cost the runs logged (``"log_density_evals"``: accuracy against cost)."""
        kind = f"{table.metric.name} vs {CURVE_AXES.get(over, over)}"
        figure, scales, notes = self._curves_figure(table, over)
        if figure is None:
            self.skip(kind, table.title, "no run of this table has the metric's history"
                      + ("" if over == "iteration" else f" together with {over}"))
            return
        stem = {"iteration": "iteration__", "wall_time": "wallclock__"}.get(over, f"{over}__") + table.slug
        what = {"iteration": "iterations", "wall_time": "wall-clock seconds of optimization (evaluation excluded)"
                }.get(over, f"{over} (the cost so far)")
        self._add(
            figure,
            kind,
            table.slug,
            stem,
            f"{table.metric.axis_label} over {what}"
            + (f" ({', '.join(f'{k}={v}' for k, v in table.panel)})" if table.panel else "")
            + f": median over the run seeds and the {BAND[0]}–{BAND[1]} % band of the seeds per "
            f"{table.column_factor}. Settings: {settings_text(table)}."
            + (f" {'; '.join(notes)}." if notes else "")
            + (f" {warning}" if (warning := few_replications(table)) else ""),
        )
        if self.alternate_scales:  # the page's scale choice: the same figure with the other y scale, PNG only
            other = "linear" if "log" in scales else "log"
            alternate, other_scales, _ = self._curves_figure(table, over, other)
            if other in other_scales:
                path = self.directory / f"{stem}.{other}.png"
                self.renderer(alternate, (path,))
                self.figures[-1] = replace(self.figures[-1], scale="log" if "log" in scales else "linear",
                                           alternate=path)

    def _curves_figure(self, table: Table, over: str, y_scale: str | None = None):
        """The figure (None when no run has the history), the y scales of its panels, and the caption's notes
        on its axes (methods cut off the wall-clock axis, a log iteration axis). ``y_scale`` forces "linear"
        or "log" (where every value is positive)."""
        figure, axes = _new_figure(len(table.rows))
        drawn, notes, scales, steps_seen, schedules = False, [], set(), [], set()
        for axis, row in zip(axes, table.rows):
            values_seen, ends = [], {}
            for column in table.columns:
                cell = table.cells.get((row, column))
                if cell is None:
                    continue
                traced = [(run, trace) for run in cell.runs.values()
                          if (trace := self._trace(run.run_id, table.metric.name, over)) is not None]
                if not traced:
                    continue
                schedules |= {_eval_schedule(run) for run, _ in traced}
                traces = [trace for _, trace in traced]
                x, curves = (_on_common_steps(traces) if over == "iteration" else _on_time_grid(traces))
                steps_seen.append(x)
                _band(axis, x, curves, self.colors.get(column), table.column_label(column))
                values_seen.append(curves)
                ends[table.column_label(column)] = float(x[-1])
                drawn = True
            axis.set_title(table.row_label(row))
            _log_scale(axis, values_seen, force=y_scale)
            scales.add(axis.get_yscale())
            axis.grid(alpha=0.3)
            if over == "wall_time" and (note := _cut_slow(axis, ends)):
                notes.append(f"{table.row_label(row)}: {note}")
        if not drawn:
            return None, scales, notes
        if over == "iteration" and schedules == {"geometric"}:
            notes.append(_log_iteration_axis(axes, np.concatenate(steps_seen)))
        _label_axes(axes, setting_label(over), table.metric.axis_label)
        _legend(figure, axes)
        return figure, scales, notes

    def _trace(self, run_id: str, metric: str, over: str):
        steps, values = self.history(run_id, metric)
        if steps.size == 0:
            return None
        if over == "iteration":
            return steps, values
        time_steps, seconds = self.history(run_id, over)
        common, at_metric, at_time = np.intersect1d(steps, time_steps, return_indices=True)
        return (seconds[at_time], values[at_metric]) if common.size else None

    # ---------------------------------------------------------------- final vs a setting

    @_styled
    def final_vs_setting(self, tables: list[Table], setting: str, kind: str) -> None:
        """Final metric vs a numeric setting (the last row factor) on log axes, a line per column, a panel
        per value of the other row factors (e.g. per optimizer) and per table panel."""
        panels = []  # (title, {column: {x: the seeds' final values}})
        for table in tables:
            by_facet: dict = {}
            for row in table.rows:
                facet, x = row[:-1], row[-1]
                for column in table.columns:
                    cell = table.cells.get((row, column))
                    if cell is not None:
                        by_facet.setdefault(facet, {}).setdefault(column, {})[float(x)] = list(cell.values.values())
            for facet, lines in sorted(by_facet.items(), key=lambda item: [natural_key(v) for v in item[0]]):
                fixed = [*(f"{k}={v}" for k, v in table.panel), *(f"{k}={v}" for k, v in zip(table.row_factors, facet))]
                panels.append((", ".join(fixed) or table.metric.name, lines))
        figure, axes = _new_figure(len(panels))
        metric = tables[0].metric.name
        for axis, (title, lines) in zip(axes, panels):
            seen = []
            for column, points in sorted(lines.items(), key=lambda item: self.names.sort_key(item[0])):
                xs = sorted(points)
                width = max(len(v) for v in points.values())
                curves = np.full((width, len(xs)), np.nan)
                for j, x in enumerate(xs):
                    curves[: len(points[x]), j] = points[x]
                _band(axis, xs, curves, self.colors.get(column), self.names.name(column))
                axis.plot(xs, np.nanmedian(curves, axis=0), "o", color=self.colors.get(column), markersize=2.5)
                seen.append(curves)
            axis.set_xscale("log")
            ticks = sorted({x for points in lines.values() for x in points})
            axis.set_xticks(ticks, [f"{x:g}" for x in ticks])
            axis.minorticks_off()
            axis.set_title(title)
            _log_scale(axis, seen, metric)
            axis.grid(alpha=0.3)
        _label_axes(axes, setting_label(setting), f"final {tables[0].metric.axis_label}")
        _legend(figure, axes)
        stem = f"{metric}_vs_{setting}"
        self._add(
            figure,
            kind,
            "settings",
            stem,
            f"{kind}. Final {tables[0].metric.axis_label} against {setting_label(setting)} "
            f"(log axes where the law is a "
            f"power or the values span decades): median over the run seeds and the {BAND[0]}–{BAND[1]} % band of "
            f"the seeds per {tables[0].column_factor}. Settings: {settings_text(tables[0])}.",
        )

    # ------------------------------------------------------------ critical difference

    @_styled
    def critical_difference(self, table: Table) -> None:
        """Demšar's critical-difference diagram: across rows when the table has several, else over the seeds."""
        kind = "critical-difference diagram"
        ranking = table.overall
        over = f"the {ranking.n_blocks} rows' means" if ranking is not None else ""
        if ranking is None and len(table.rows) == 1:
            ranking, over = table.row_rankings[table.rows[0]], "the run seeds"
        if ranking is None:
            self.skip(kind, table.title, f"fewer than two rows with every {table.column_factor}")
            return
        if len(ranking.methods) < 2 or ranking.test == "none":
            self.skip(kind, table.title, f"{ranking.describe()}")
            return
        figure = _cd_figure(ranking, [table.column_label(m) for m in ranking.methods])
        self._add(figure, kind, table.slug, "cd__" + table.slug,
                  f"{table.metric.axis_label}: mean ranks (1 = best) over {over}. {ranking.describe()}. "
                  "Methods joined by a bar are not significantly different (Nemenyi; with p ≥ α or two methods "
                  f"under Wilcoxon: the test's verdict). Settings: {settings_text(table)}.")

    def _add(self, figure, kind: str, section: str, stem: str, caption: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        png, svg, pdf = paths = tuple(self.directory / f"{stem}.{suffix}" for suffix in ("png", "svg", "pdf"))
        self.renderer(figure, paths)
        self.figures.append(FigureFile(kind, section, caption, png, svg, pdf))


def _eval_schedule(run) -> str:
    """The evaluation schedule a run recorded (its ``eval_schedule`` param; runs from before it existed: linear)."""
    return run.params.get("eval_schedule", LATER_KEY_DEFAULTS["eval_schedule"])


def _log_iteration_axis(axes, steps: np.ndarray) -> str:
    """For runs that evaluate at doubling iterations (``eval_schedule=geometric``), a log iteration axis past
    the first evaluation after 0, with 0 at the start of a short linear stretch (such a curve has its
    resolution there), and the caption's note saying so."""
    positive = np.unique(steps[steps > 0])
    first = float(positive[0])
    decades = 10.0 ** np.arange(math.ceil(math.log10(first)), math.floor(math.log10(positive[-1])) + 1)
    for axis in axes:
        axis.set_xscale("symlog", linthresh=first, linscale=0.3)
        axis.set_xticks([0.0, *decades], ["0", *(f"{tick:,.0f}" for tick in decades)])
        axis.minorticks_off()
    return f"iterations on a log axis past {first:g} (the runs evaluate at doubling iterations)"


def _on_common_steps(traces):
    grid = np.unique(np.concatenate([steps for steps, _ in traces]))
    curves = np.array([np.where((grid >= s[0]) & (grid <= s[-1]), np.interp(grid, s, v), np.nan) for s, v in traces])
    return grid, curves


def _on_time_grid(traces):
    """Runs take different times per step: each run's value at a common grid of seconds, held at its
    final value after it ended (that is the answer it returns from then on)."""
    end = max(t[-1] for t, _ in traces)
    grid = np.linspace(0.0, end, TIME_GRID_POINTS)
    curves = np.array([np.where(grid >= t[0], np.interp(grid, t, v), np.nan) for t, v in traces])
    return grid, curves


def not_distinguishable_groups(ranking: Ranking) -> list[tuple[float, float]]:
    """Rank intervals of maximal groups of methods not significantly different from each other."""
    ranks = sorted(ranking.mean_ranks)
    if ranking.test == "friedman" and ranking.pvalue < ranking.alpha:
        cd = ranking.critical_difference
        groups, reach = [], -1
        for i, r in enumerate(ranks):
            j = max(j for j in range(i, len(ranks)) if ranks[j] - r < cd)
            if j > i and j > reach:
                groups.append((r, ranks[j]))
                reach = j
        return groups
    return [(ranks[0], ranks[-1])] if len(ranking.indistinguishable) > 1 else []


def _cd_figure(ranking: Ranking, labels: list[str]):
    from matplotlib.figure import Figure

    k = len(ranking.methods)
    order = np.argsort(ranking.mean_ranks)
    half = (k + 1) // 2
    height = 0.75 + 0.28 * max(half, k - half)
    figure = Figure(figsize=(COLUMN_WIDTH if k <= 4 else PAGE_WIDTH, height + 0.3), layout="constrained")
    axis = figure.add_subplot()
    axis.set_xlim(0.2, k + 0.8)
    axis.set_ylim(height, -0.9)  # y grows downwards, like the diagram in Demšar's paper
    axis.axis("off")
    axis.hlines(0, 1, k, color="black", linewidth=1)
    for tick in range(1, k + 1):
        axis.vlines(tick, -0.1, 0, color="black", linewidth=1)
        axis.text(tick, -0.18, str(tick), ha="center", va="bottom", fontsize=7)
    if ranking.critical_difference is not None:
        cd = ranking.critical_difference
        axis.hlines(-0.65, 1, 1 + cd, color="black", linewidth=1.5)
        axis.text(1 + cd / 2, -0.7, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=7)
    for position, index in enumerate(order):
        rank = ranking.mean_ranks[index]
        left = position < half
        y = 0.45 + 0.28 * (position if left else k - 1 - position)
        x_text = 0.9 if left else k + 0.1
        axis.plot([rank, rank, x_text], [0, y, y], color="black", linewidth=0.8)
        axis.text(x_text + (-0.05 if left else 0.05), y, f"{labels[index]} ({rank:.2f})",
                  ha="right" if left else "left", va="center", fontsize=7)
    for row, (low, high) in enumerate(not_distinguishable_groups(ranking)):
        y = 0.2 + 0.1 * row
        axis.hlines(y, low - 0.03, high + 0.03, color="black", linewidth=3)
    return figure
