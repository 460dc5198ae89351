"""Our numbers next to the papers': for each report directory written by ``mcsa-bench report``
(its summary.json), a Markdown table per metric with, per data set and method, our mean and
bootstrap interval, the number of replications, the paper's value (the ``paper:`` block of the
experiment config, conf/experiment/<model>_<data>.yaml) and whether the paper's value lies inside
our interval. Used for docs/results.md.

    python benchmarks/docgen/compare_papers.py outputs/reports/logistic [outputs/reports/gp_classification ...]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from omegaconf import OmegaConf

EXPERIMENTS = Path(__file__).resolve().parents[2] / "conf" / "experiment"


def paper_values() -> dict[str, dict]:
    """Row label (the data set, or the model for data-free models) -> the paper block of its experiment config."""
    values = {}
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        config = OmegaConf.load(path)
        paper = config.get("paper")
        if not paper or "values" not in paper:
            continue
        model = next((str(v) for d in config.get("defaults", []) if hasattr(d, "items")
                      for k, v in d.items() if k == "override /model"), None)
        dataset = OmegaConf.select(config, "model.dataset")
        values[f"{model}/{dataset}" if dataset else str(model)] = OmegaConf.to_container(paper)
    return values


def _models_by_dataset(report: Path) -> dict[str, set[str]]:
    """Data set -> the models its runs used (runs.csv), to find a row's experiment config."""
    models: dict[str, set[str]] = {}
    with open(report / "runs.csv", newline="", encoding="utf-8") as handle:
        for run in csv.DictReader(handle):
            models.setdefault(run["dataset"], set()).add(run["model"])
    return models


def _paper_for(table: dict, row: list[str], papers: dict[str, dict], models: dict[str, set[str]]) -> dict | None:
    labels = dict(zip(table["row_factors"], row))
    dataset = labels.get("dataset")
    if not dataset:
        return papers.get(str(labels.get("model")))
    candidates = {labels["model"]} if "model" in labels else models.get(dataset, set())
    found = [papers[f"{m}/{dataset}"] for m in sorted(candidates) if f"{m}/{dataset}" in papers]
    return found[0] if len(found) == 1 else None


def compare(report: Path, papers: dict[str, dict]) -> str:
    summary = json.loads((report / "summary.json").read_text())
    models = _models_by_dataset(report)
    lines = [f"### {summary['name']}", ""]
    for table in summary["tables"]:
        metric = table["metric"]
        panel = ", ".join(f"{k}={v}" for k, v in table["panel"].items())
        lines += [f"{metric}{f' ({panel})' if panel else ''}, {summary['confidence']:.0%} bootstrap intervals; "
                  f"**bold**: best and not distinguishable from it (Friedman/Nemenyi, α = {summary['alpha']})", "",
                  "| row | method | ours | n | paper | paper in our interval |", "|---|---|---|---|---|---|"]
        for cell in table["cells"]:
            paper = _paper_for(table, cell["row"], papers, models)
            reported = (paper or {}).get("values", {}).get(cell["column"], {}).get(metric)
            ours = f"{cell['mean']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"
            if cell["bold"]:
                ours = f"**{ours}**"
            inside = "" if reported is None else ("yes" if cell["low"] <= float(reported) <= cell["high"] else
                                                  f"no ({cell['mean'] - float(reported):+.3f})")
            lines.append(f"| {' / '.join(cell['row'])} | {cell['column']} | {ours} | {cell['n']} | "
                         f"{'' if reported is None else reported} | {inside} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="report directories (with summary.json)")
    args = parser.parse_args()
    papers = paper_values()
    print("\n".join(compare(report, papers) for report in args.reports))


if __name__ == "__main__":
    main()
