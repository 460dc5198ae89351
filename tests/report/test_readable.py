"""What a newcomer reads in a report (issue 40, item 2): legends inside their figure at any method-name
length, headings in words from the metric catalogue and said once, the papers' data-set order and names,
the papers' values as printed, a LaTeX cross that compiles with the preamble tables.tex names, one naming
rule for every method, and the Gaussian target's dimension."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mcsa_bench.cli import main
from tests.report.test_build import add_run, create_experiment

ROOT = Path(__file__).resolve().parents[2]

LONG_NAMES = {
    "the scheme × kernel names": ["pmcsa+hmc", "jsa+hmc", "msc_rb+hmc", "msc+imh", "snis+hmc", "rws+hmc", "elbo+imh"],
    "names of 40 characters": [f"plugin_method_{i}_" + "x" * 22 + f"_{i}" for i in range(5)],
    "a name longer than the page is wide": ["a_" + "very_" * 40 + "long_method", "pmcsa"],
}


def curves_figure(tmp_path, methods: list[str], datasets: list[str]):
    """The iteration figure of a table of ``methods`` (named as they are) on one panel per data set."""
    from mcsa_bench.report.figures import FigureMaker, method_colors
    from mcsa_bench.report.labels import MethodNames
    from mcsa_bench.report.runs import RunRecord
    from mcsa_bench.report.tables import Metric, build_tables

    names = MethodNames({})
    runs = [RunRecord(f"{m}-{d}-{seed}", m, "FINISHED", seed, {}, {}, {"test_lpd": -0.5},
                      {"method": m, "dataset": d, "seed": str(seed)})
            for m in methods for d in datasets for seed in range(2)]
    (table,), _ = build_tables(runs, Metric("test_lpd", True), ("dataset",), "method", names=names)
    steps = np.arange(0.0, 101.0, 20.0)
    maker = FigureMaker(tmp_path, lambda run_id, metric: (steps, -1.0 + steps / 200),
                        method_colors(methods, names), names)
    figure, _, _ = maker._curves_figure(table, "iteration")
    return figure


@pytest.mark.parametrize("case", list(LONG_NAMES))
@pytest.mark.parametrize("panels", [1, 4])
def test_the_legend_lies_inside_the_figure_in_png_and_svg_at_any_name_length(tmp_path, case, panels):
    """The renderer's extent of the legend, as a fraction of the figure's, after drawing each format; every
    entry is in it, whole (a name too long for one line is wrapped, not cut)."""
    methods = LONG_NAMES[case]
    figure = curves_figure(tmp_path, methods, [f"data{i}" for i in range(panels)])
    (legend,) = figure.legends
    for file_format in ("png", "svg"):
        figure.savefig(io.BytesIO(), format=file_format, dpi=200)
        box = legend.get_window_extent().transformed(figure.transFigure.inverted())
        assert box.x0 >= -1e-9 and box.x1 <= 1 + 1e-9 and box.y0 >= 0 and box.y1 <= 1, (file_format, box)  # centred
    assert sorted(text.get_text().replace("\n", "") for text in legend.get_texts()) == sorted(methods)


# ------------------------------------------------------------------------------------------- tables

PUBLISHED = {"pima": "logistic_pima", "heart": "logistic_heart", "german_numeric": "logistic_german"}


@pytest.fixture(scope="module")
def report(tmp_path_factory, migrated_store):
    """A logistic grid's shape, the data sets logged in alphabetical order (german_numeric, heart, pima), with
    ``jsa+cis`` beside the paper's methods; and a 10-D Gaussian target's runs."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("readable")
    shutil.copy(migrated_store, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    grid = create_experiment(client, root, "grid")
    for dataset in sorted(PUBLISHED):
        for index, method in enumerate(("pmcsa", "jsa+cis", "msc")):
            for seed in range(3):
                add_run(client, grid, method=method, dataset=dataset, seed=seed, final=-0.5 - 0.01 * (index + seed),
                        tags={"hydra.overrides": f"experiment@_global_={PUBLISHED[dataset]} seed={seed}"})
    gaussian = create_experiment(client, root, "gaussian")
    for method in ("pmcsa", "msc"):
        for seed in range(3):
            add_run(client, gaussian, method=method, dataset="", model="gaussian", dim=10, seed=seed,
                    final=1.0 + seed, metric="kl_inclusive")
    outputs = {}
    for name in ("grid", "gaussian"):
        outputs[name] = root / name
        assert main(["report", "--experiment", name, "--out", str(outputs[name]), f"tracking.uri={uri}"]) == 0
    return outputs


def test_html_tables_are_headed_by_the_metrics_label_unit_and_direction_once(report):
    page = (report["grid"] / "report.html").read_text()
    heading = "test log predictive density (nats per point), higher is better"
    assert f">{heading}</h2>" in page and page.count(heading) == 1  # the table under it has no second heading
    assert "test_lpd (higher is better)" not in page
    tables_only = (report["grid"] / "tables.html").read_text()
    assert f"<caption>{heading}</caption>" in tables_only  # a page of tables alone: each table says what it is
    assert f"### {heading}" in (report["grid"] / "tables.md").read_text()


def test_data_sets_come_in_the_papers_order_under_the_papers_names(report):
    markdown = (report["grid"] / "tables.md").read_text()
    rows = re.findall(r"^\| (Pima Indians|heart disease|German credit) \|", markdown, flags=re.MULTILINE)
    assert rows[:3] == ["Pima Indians", "heart disease", "German credit"]  # parallel-state paper, Table 2
    (table,) = json.loads((report["grid"] / "summary.json").read_text())["tables"]
    assert [row for (row,) in table["rows"]] == ["pima", "heart", "german_numeric"]  # the keys stay in the summary


def test_the_papers_values_keep_their_trailing_zeros(report):
    """German credit, pMCSA: the paper prints -0.50 (conf/experiment/logistic_german.yaml), heart disease -0.40."""
    markdown = (report["grid"] / "tables.md").read_text()
    assert "paper -0.50" in markdown and "paper -0.40" in markdown and "paper -0.5 " not in markdown
    assert "paper −0.50" in (report["grid"] / "report.html").read_text()
    assert "paper $-0.50$" in (report["grid"] / "tables.tex").read_text()


def test_latex_marks_use_pifont_which_the_preamble_line_names(report):
    latex = (report["grid"] / "tables.tex").read_text()
    assert latex.startswith("% mcsa-bench report tables; needs \\usepackage{booktabs,pifont}\n")
    assert "\\ding{55}" in latex or "\\ding{51}" in latex
    assert "$\\times$)" not in latex and "✗" not in latex and "✓" not in latex


def test_every_method_is_named_by_one_rule_schemes_with_another_kernel_included(report):
    markdown = (report["grid"] / "tables.md").read_text()
    assert "| data set | pMCSA | JSA+CIS | MSC |" in markdown and "jsa+cis" not in markdown


def test_the_gaussian_targets_tables_state_its_dimension(report):
    markdown = (report["gaussian"] / "tables.md").read_text()
    assert "| gaussian |" in markdown and "Settings: dimension D 10," in markdown
    assert "dimension D 10" in (report["gaussian"] / "tables.tex").read_text()


def render_figures(out: str, workers: int) -> None:
    """Three figures' files in ``out`` by a Renderer of ``workers``, the last with long names (a wrapped legend)."""
    from mcsa_bench.report.figures import Renderer

    out = Path(out)
    out.mkdir()
    renderer = Renderer(workers)
    tables = (["pmcsa", "jsa"], ["msc", "msc_rb", "snis"], LONG_NAMES["names of 40 characters"])
    for number, methods in enumerate(tables):
        figure = curves_figure(out.parent, methods, ["data0", "data1"])
        renderer(figure, tuple(out / f"figure{number}.{suffix}" for suffix in ("png", "svg", "pdf")))
    renderer.close()


def test_figures_rendered_in_a_pool_are_byte_identical_to_those_rendered_in_process(tmp_path):
    """report.figures.Renderer: PNG, SVG and PDF the same whichever process draws them, and whenever (no
    date, SVG ids from a fixed salt), so a report remade from the same runs has the same files. Each way runs
    in a process of its own, as each `mcsa-bench report` does: not in the test worker, whose matplotlib
    state earlier tests have changed (in one CI run that moved the long-named figure's SVG and PDF)."""
    files = {}
    for workers in (2, 1):
        out = tmp_path / f"workers{workers}"
        code = f"from tests.report.test_readable import render_figures; render_figures({str(out)!r}, {workers})"
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        files[workers] = {path.name: path.read_bytes() for path in sorted(out.iterdir())}
    assert len(files[1]) == 9 and files[2].keys() == files[1].keys()
    assert [name for name in files[1] if files[2][name] != files[1][name]] == []
