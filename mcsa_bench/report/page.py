"""The report as one self-contained HTML page: inline CSS, figures embedded as data: URIs, no external
resource, so it reads the same offline, attached to a run, or mailed. No script, except with
``--interactive``: a few inline lines to choose the metric shown and the curves' y scale."""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING

from mcsa_bench.report.figures import DPI
from mcsa_bench.report.tables import to_html
from mcsa_bench.tracking.record import HEALTH_REASON_TAG

if TYPE_CHECKING:
    from mcsa_bench.report.document import Report
    from mcsa_bench.report.runs import RunRecord

esc = html.escape

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d232a; margin: 2rem auto;
       max-width: 1180px; padding: 0 1.2rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d0d5db; }
code { background: #f1f3f5; padding: 0 .25em; border-radius: 3px; font-size: 90%; }
.meta { color: #4d5661; } .warn { color: #9a3412; }
table { border-collapse: collapse; margin: .8rem 0; font-variant-numeric: tabular-nums; }
th, td { padding: .3rem .7rem; border-bottom: 1px solid #e3e6ea; text-align: right; vertical-align: top; }
th:first-child { text-align: left; } thead th { border-bottom: 2px solid #1d232a; text-align: center; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: .3rem; }
table.results b { color: #0b3d91; } .ci, .n { color: #5f6b77; font-size: 85%; white-space: nowrap; }
tr.rank th, tr.rank td { border-top: 2px solid #8a939c; } td.missing { color: #b42318; text-align: center; }
ol.notes { font-size: 85%; color: #4d5661; margin-top: 0; }
.figures { display: flex; flex-wrap: wrap; gap: 0 1.5rem; align-items: flex-start; }
figure { margin: 1rem 0 1.5rem; max-width: 100%; } figure img { max-width: 100%; border: 1px solid #e3e6ea; }
figcaption { font-size: 88%; color: #4d5661; } .paper { color: #1a7f37; font-size: 85%; white-space: nowrap; }
.paper.off { color: #b42318; } .controls { background: #f1f3f5; padding: .4rem .7rem; border-radius: 4px; }
table.list td, table.list th { text-align: left; font-size: 88%; }
"""


def _png_width(path) -> int:
    """Width in pixels, from the PNG header (IHDR), so a caption wraps at its figure's width."""
    return int.from_bytes(path.read_bytes()[16:20], "big")


def _img(path, scale: str = "", hidden: bool = False) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    extra = (f' data-scale="{scale}"' if scale else "") + (" hidden" if hidden else "")
    return f'<img alt="{esc(path.stem)}"{extra} src="data:image/png;base64,{data}">'


#: on screen, a figure's inch is this many CSS pixels (a page-wide figure: 7 in, 910 px)
SCREEN_PIXELS_PER_INCH = 130


def _figure(figure) -> str:
    width = round(_png_width(figure.png) * SCREEN_PIXELS_PER_INCH / DPI)
    images = _img(figure.png)
    if figure.alternate is not None:  # --interactive: the page's scale choice switches between the two
        other = "linear" if figure.scale == "log" else "log"
        images = _img(figure.png, figure.scale) + _img(figure.alternate, other, hidden=True)
    return (f'<figure style="width: {width}px">{images}<figcaption>{esc(figure.caption)} '
            f"(files <code>figures/{esc(figure.png.name)}</code>, <code>.svg</code>, <code>.pdf</code>)"
            "</figcaption></figure>")


def _figures(figures) -> str:
    return f'<div class="figures">{"".join(_figure(f) for f in figures)}</div>' if figures else ""


def _run_rows(runs: list[RunRecord], columns: list[str], extra=None) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in ["run", "status", *columns, *(extra or {})])
    body = []
    for run in runs:
        cells = [f"{esc(run.name)}<br><code>{esc(run.run_id)}</code>", esc(run.status),
                 *(esc(run.settings.get(c, "")) for c in columns), *(esc(f(run)) for f in (extra or {}).values())]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table class="list"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


SETTINGS_SHOWN = ["method", "model", "dataset", "N", "optimizer", "lr", "T", "seed"]


def _problems(report: Report) -> str:
    parts = ["<h2 id=\"not-in-tables\">Runs not in the tables, and reused runs</h2>"]
    runs = report.runset
    lacking = {run.run_id: names for run, names in report.without_metrics}
    if runs.grid_note:
        parts.append(f"<p class=\"meta\">{esc(runs.grid_note)}.</p>")
    sections = [
        (
            "Failed, killed and unfinished runs",
            runs.not_finished
            and _run_rows(runs.not_finished, SETTINGS_SHOWN, {"error": lambda r: r.error or "(none recorded)"}),
        ),
        (
            'Finished runs whose fit diverged (in the tables; docs/estimators.md, "Run health")',
            runs.diverged
            and _run_rows(runs.diverged, SETTINGS_SHOWN, {"reason": lambda r: r.tags.get(HEALTH_REASON_TAG, "")}),
        ),
        (
            "Jobs of the sweep that have no run",
            runs.missing_jobs
            and "<ul>" + "".join(f"<li><code>{esc(job)}</code></li>" for job in runs.missing_jobs) + "</ul>",
        ),
        (
            "Cells and replications without a finished run",
            any(t.missing for ts in report.tables.values() for t in ts)
            and "".join(
                f"<p>{esc(t.title)}</p><ul>" + "".join(f"<li>{esc(m)}</li>" for m in t.missing) + "</ul>"
                for ts in report.tables.values()
                for t in ts
                if t.missing
            ),
        ),
        (
            "Runs superseded by a later run of the same setting and seed",
            report.superseded and _run_rows(report.superseded, SETTINGS_SHOWN),
        ),
        (
            "Earlier runs reused for jobs the sweep skipped (resume=true); they are in the tables",
            runs.reused and _run_rows(runs.reused, SETTINGS_SHOWN),
        ),
        (
            "Finished runs without a reported metric",
            report.without_metrics
            and _run_rows(
                [r for r, _ in report.without_metrics],
                SETTINGS_SHOWN,
                {"lacks": lambda r: ", ".join(lacking[r.run_id])},
            ),
        ),
    ]
    for title, content in sections:
        parts.append(f"<h3>{esc(title)}</h3>" + (content if content else "<p>None.</p>"))
    return "\n".join(parts)


def _accuracy_tables(report: Report) -> str:
    """The accuracy verdicts per cell and the cost to reach 0.1 sd (mcsa_bench.report.verdicts), if any."""
    if not report.accuracy:
        return ""
    return ('<h2 id="accuracy">Accuracy verdicts and cost</h2>\n'
            + "\n".join(table.html() for table in report.accuracy))


def _method() -> str:
    return """<h2 id="method">How to read this report</h2>
<p>A cell is the mean of the final value of the metric (its last logged value, at iteration T) over
the replications, the run seeds, with its bootstrap confidence interval: BCa, 9999 resamples, a
fixed seed (the percentile interval where BCa is undefined; no interval for a single replication).
Settings that vary within a cell other than the seed (for example N) split the runs into separate
tables.</p>
<p>Bold marks, per row, the method with the best mean rank and every method not distinguishable from
it: ranks are taken per seed (methods with the same seed share the data split), the Friedman test
decides whether any difference exists (p &lt; α), and Nemenyi's critical difference
CD = q<sub>α</sub>&nbsp;√(k(k+1)/(6n)) says which methods differ from the best (Demšar 2006). With
p ≥ α every method is bold; two methods are compared by the Wilcoxon signed-rank test. The
average-rank row ranks the methods over the rows (data sets) by their means, as in Demšar's paper,
and the critical-difference diagrams draw that ranking.</p>
<p>Failed, killed or still running runs never enter a table; they are listed above, together with
every expected job, cell or replication that has no finished run.</p>"""


def _provenance(provenance: dict) -> str:
    def text(value) -> str:
        if isinstance(value, dict):
            return "<br>".join(f"{esc(k)}: {text(v)}" for k, v in value.items())
        if isinstance(value, list):
            return esc(", ".join(value) or "none recorded")
        return esc(str(value))

    rows = "".join(f"<tr><th>{esc(key)}</th><td>{text(value)}</td></tr>" for key, value in provenance.items())
    return f'<h2 id="provenance">Provenance</h2><table class="list"><tbody>{rows}</tbody></table>'


def render_page(report: Report) -> str:
    runs = report.runset
    counts = {}
    for run in runs.runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no runs"
    warn = runs.not_finished or runs.missing_jobs
    body = [
        f"<h1>mcsa-bench report: {esc(report.name)}</h1>",
        f'<p class="meta">Made {esc(report.created)} by <code>{esc(report.command)}</code><br>'
        f"Store <code>{esc(report.store_uri)}</code>, {esc(runs.source)}"
        + (f"; filters <code>{esc(' '.join(report.filters))}</code>" if report.filters else "")
        + "<br>"
        f"Runs: {esc(status)}"
        + (
            f'; <span class="warn">{len(runs.missing_jobs)} expected job(s) without a run</span>'
            if runs.missing_jobs
            else ""
        )
        + (' — <a href="#not-in-tables">see the runs not in the tables</a>' if warn else "")
        + "</p>",
    ]
    if report.metrics:
        body.append(
            "<p>Metrics: " + ", ".join(f'<a href="#m-{esc(m.name)}">{esc(m.name)}</a>' for m in report.metrics) + "</p>"
        )
    if report.options.interactive:
        body.append(_controls(report))
    for metric in report.metrics:
        section = [f"<h2 id=\"m-{esc(metric.name)}\">{esc(metric.name)} ({esc(metric.direction)})</h2>"]
        tables = report.tables.get(metric.name, [])
        if not tables:
            section.append("<p>No finished run logged this metric.</p>")
        for table in tables:
            section.append(to_html(table))
            section.append(_figures([f for f in report.figures if f.section == table.slug]))
        body.append(f'<section class="metric" data-metric="{esc(metric.name)}">' + "\n".join(section) + "</section>")
    body.append(_accuracy_tables(report))
    sweeps = [f for f in report.figures if f.section == "settings"]
    if sweeps:
        body.append("<h2 id=\"settings\">Final values against a swept setting</h2>")
        body.append(_figures(sweeps))
    body.append(_problems(report))
    body.append("<h2 id=\"skipped\">Figures not drawn</h2>")
    body.append("<ul>" + "".join(f"<li>{esc(s.kind)} — {esc(s.subject)}: {esc(s.reason)}</li>" for s in report.skipped)
                + "</ul>" if report.skipped else "<p>None.</p>")
    body.append(_method())
    body.append(_provenance(report.provenance))
    body.append(f"<details><summary>All {len(runs.runs)} runs</summary>"
                + _run_rows(runs.runs, SETTINGS_SHOWN) + "</details>")
    return _document(f"mcsa-bench report: {report.name}", "\n".join(body), SCRIPT if report.options.interactive else "")


#: --interactive: show one metric, and the curves in the chosen y scale; also from the address,
#: report.html#metric=test_lpd&scale=log. Inline, no network.
SCRIPT = """
const choice = {metric: document.getElementById("choose-metric"), scale: document.getElementById("choose-scale")};
function show() {
  for (const section of document.querySelectorAll("section.metric"))
    section.hidden = Boolean(choice.metric.value) && section.dataset.metric !== choice.metric.value;
  for (const figure of document.querySelectorAll("figure")) {
    const images = figure.querySelectorAll("img[data-scale]");
    if (!images.length) continue;
    const wanted = [...images].some(i => i.dataset.scale === choice.scale.value)
      ? choice.scale.value : images[0].dataset.scale;
    for (const image of images) image.hidden = image.dataset.scale !== wanted;
  }
}
for (const [key, value] of new URLSearchParams(location.hash.slice(1))) if (choice[key]) choice[key].value = value;
choice.metric.onchange = choice.scale.onchange = show;
show();
"""


def _controls(report: Report) -> str:
    metrics = "".join(f'<option value="{esc(m.name)}">{esc(m.name)}</option>' for m in report.metrics)
    return ('<p class="controls">Show <select id="choose-metric"><option value="">every metric</option>'
            f'{metrics}</select> with curves on a <select id="choose-scale"><option value="">y scale as drawn</option>'
            '<option value="linear">linear y scale</option><option value="log">log y scale</option></select></p>')


def render_tables_page(report: Report) -> str:
    """Only the tables, for pasting into a web page."""
    body = [f"<h1>{esc(report.name)}</h1>"] + [to_html(t) for ts in report.tables.values() for t in ts]
    return _document(f"tables: {report.name}", "\n".join(body))


def _document(title: str, body: str, script: str = "") -> str:
    script = f"<script>{script}</script>\n" if script else ""
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n{body}\n{script}</body></html>\n")
