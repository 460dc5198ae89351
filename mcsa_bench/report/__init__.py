"""``mcsa-bench report``: the papers' tables and figures from the runs in the MLflow store.

Modules, by concern: ``runs`` (reading runs from MLflow), ``stats`` (bootstrap intervals,
Friedman/Nemenyi), ``tables`` (grouping and Markdown/LaTeX/HTML tables), ``figures``
(matplotlib), ``page`` (the self-contained HTML page), ``build`` (a report and its files),
``command`` (the command line). docs/report.md describes the report.

The report reads only the store, as the run record defines it (:mod:`mcsa_bench.tracking.record`): it
imports neither :mod:`mcsa_bench.jobs`, nor Hydra, nor the plugin registry (tests/test_layers.py).

This module imports nothing heavy, so the CLI can register the command without slowing
``mcsa-bench --help``: MLflow, scipy and matplotlib load when the command runs.
"""

from __future__ import annotations


def report_command(argv: list[str], reconstruction=None) -> int:
    """``mcsa-bench report``; ``reconstruction`` rebuilds what stores written by older versions lack
    (:class:`mcsa_bench.report.runs.Reconstruction`; the CLI passes mcsa_bench.jobs.reconstruction's)."""
    from mcsa_bench.report.command import main

    return main(argv, reconstruction)


__all__ = ["report_command"]
