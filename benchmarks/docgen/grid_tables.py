"""The tables docs/results.md shows for the GP grids, made by `mcsa-bench report` from the grids' runs
themselves: each grid's store exported to one bundle (`mcsa-bench export`, committed in
benchmarks/results/grids/), and every table between

    <!-- generated: report BUNDLE METRIC ROWS -->
    ...
    <!-- end generated -->

on the page is the report's table of METRIC, its rows ROWS, from that bundle (tests/test_docs.py checks
that each still is). Making a bundle of a grid run in several sweeps, each in its own store:

    mcsa-bench export --experiment mcsa-bench --out /tmp/a.zip tracking.uri=sqlite:///A/mlflow.db   # each
    mcsa-bench merge /tmp/a.zip /tmp/b.zip tracking.uri=sqlite:////tmp/grid.db
    mcsa-bench export --experiment mcsa-bench --out benchmarks/results/grids/NAME.zip tracking.uri=sqlite:////tmp/grid.db

then ``python benchmarks/docgen/grid_tables.py --write`` regenerates every block on the page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = ROOT / "benchmarks" / "results" / "grids"
PAGE = ROOT / "docs" / "results.md"
#: a block: its header, bundle, metric, rows, table (lines of "|", at least one), end
BLOCK = re.compile(r"(<!-- generated: report (\S+) (\S+) (\S+) -->\n)"
                   r"(\|[^\n]*(?:\n\|[^\n]*)*)(\n<!-- end generated -->)")


def table(bundle: str, metric: str, rows: str) -> str:
    """The report's Markdown table of ``metric`` (rows ``rows``) from the bundle, figures left out."""
    from mcsa_bench.cli import main

    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        code = main(["report", "--bundle", str(BUNDLES / bundle), "--metric", metric, "--rows", rows,
                     "--no-figures", "--out", out])
        if code != 0:
            raise RuntimeError(f"report of {bundle} exited {code}")
        text = (Path(out) / "tables.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def blocks(text: str) -> list[tuple[str, str, str, str]]:
    """(bundle, metric, rows, the table on the page) of every generated block of ``text``."""
    return [(bundle, metric, rows, body) for _, bundle, metric, rows, body, _ in BLOCK.findall(text)]


def regenerate(text: str) -> str:
    """``text`` with every generated block's table made again from its bundle."""
    return BLOCK.sub(lambda m: m[1] + table(m[2], m[3], m[4]) + m[6], text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the blocks of {PAGE.relative_to(ROOT)}")
    args = parser.parse_args()
    text = PAGE.read_text(encoding="utf-8")
    new = regenerate(text)
    if args.write:
        PAGE.write_text(new, encoding="utf-8")
    changed = sum(old != fresh for old, fresh in zip(blocks(text), blocks(new)))
    print(f"{len(blocks(text))} generated tables, {changed} changed" + ("" if args.write else " (not written)"))


if __name__ == "__main__":
    main()
