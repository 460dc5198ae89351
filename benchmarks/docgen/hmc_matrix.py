"""kernel=hmc at its defaults with every scheme that takes it, on every built-in model/data pair.

For each cell (scheme x model/data): whether the run finished, the mean acceptance rate after
warm-up (the evaluation windows after the first ``--warmup`` fraction of the run), the lowest
window's acceptance after warm-up (acceptance over the run, not only at its end), the fraction
of divergent transitions over the whole run, and the step size ε at the end. Results go to
``benchmarks/results/hmc_matrix_<size>.json`` and a Markdown table to stdout (docs/estimators.md
quotes it).

    python benchmarks/docgen/hmc_matrix.py --size small        # tests/builtin/test_hmc_matrix.py's size
    python benchmarks/docgen/hmc_matrix.py --size realistic    # T = 1000, N = 10; full data (GP: 100 rows)
    python benchmarks/docgen/hmc_matrix.py --cells logistic/pima msc,pmcsa --kernel n_leapfrog=8

Cells run one after another in this process (``--jobs 2``: two worker processes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure.harness import RESULTS, machine  # noqa: E402
from mcsa_bench import get_registry  # noqa: E402
from mcsa_bench.api import NonFiniteError  # noqa: E402
from mcsa_bench.assembly import assemble  # noqa: E402
from mcsa_bench.engine import run  # noqa: E402

#: every scheme that takes hmc (msc_rb needs CIS weights; snis and elbo use no kernel)
ESTIMATORS = ("msc", "jsa", "pmcsa", "rws")

#: label -> (model, parameters): every built-in model/data pair, and the extras plugin's models
PAIRS: dict[str, tuple[str, dict]] = {
    "gaussian": ("gaussian", {}),
    **{f"logistic/{data}{'' if standardize else '-raw'}": ("logistic", {"dataset": data, "standardize": standardize})
       for data in ("pima", "heart", "german_numeric") for standardize in (False, True)},
    **{f"gp_classification/{data}": ("gp_classification", {"dataset": data})
       for data in ("sonar", "ionosphere", "breast")},
    **{f"gp_regression/{data}": ("gp_regression", {"dataset": data}) for data in ("boston", "concrete")},
    **{f"bnn/{data}": ("bnn", {"dataset": data}) for data in ("boston", "concrete")},
    "radon": ("radon", {}),
    "stochastic_volatility": ("stochastic_volatility", {}),
    "eight_schools": ("eight_schools", {}),
    "funnel": ("funnel", {}),
}

#: --size: iterations T, evaluation window, rows of data (None: all; the GP models' cost grows like n³,
#: so a realistic run of theirs, 16 leapfrog steps of N = 10 Cholesky factorizations per iteration, keeps 100)
SIZES = {
    "small": {"n_iters": 300, "jsa_n_iters": 40, "eval_every": 25, "max_rows": 40, "gp_max_rows": 40},
    "realistic": {"n_iters": 1000, "eval_every": 50, "max_rows": None, "gp_max_rows": 100},
}
DATA_MODELS = {"logistic", "bnn", "radon", "stochastic_volatility"}
GP_MODELS = {"gp_classification", "gp_regression"}


@dataclass
class Cell:
    estimator: str
    pair: str
    finished: bool
    error: str | None
    acceptance: float | None  # mean over the windows after warm-up
    lowest_acceptance: float | None  # the lowest window after warm-up
    divergences: float | None  # fraction of transitions over the run
    divergences_after: float | None  # ... after warm-up
    step_size: float | None  # ε at the end (the median over chains)
    seconds: float
    windows: list[tuple[int, float, float]] | None = None  # (iteration, acceptance, divergences) per window


def run_cell(estimator: str, pair: str, size: str, kernel: dict, warmup: float, seed: int = 0) -> Cell:
    name, params = PAIRS[pair]
    settings = SIZES[size]
    if name in DATA_MODELS | GP_MODELS:
        params = {**params, "max_rows": settings["gp_max_rows" if name in GP_MODELS else "max_rows"]}
    parts = assemble(get_registry(), model=(name, params), estimator=estimator, kernel=("hmc", kernel),
                     n_samples=10)
    n_iters = settings.get(f"{estimator}_n_iters", settings["n_iters"])  # jsa makes N transitions per iteration
    start = time.perf_counter()
    try:
        result = run(*parts.run_args(), n_iters=n_iters, eval_every=settings["eval_every"], seed=seed)
    except NonFiniteError as error:
        return Cell(estimator, pair, False, str(error), None, None, None, None, None, time.perf_counter() - start)
    return summarize(estimator, pair, result.history, warmup_iterations(parts.estimator, n_iters, warmup),
                     float(np.median(parts.estimator.kernel.step_size)), time.perf_counter() - start)


def warmup_iterations(estimator, n_iters: int, fraction: float) -> int:
    """The first ``fraction`` of the run, or longer if the kernel's dual averaging lasts longer (its
    ``adapt_steps`` count transitions: N per iteration for jsa, one every ``every`` iterations for rws)."""
    transitions_per_iteration = {"JSA": estimator.n_samples, "RWS": 1 / getattr(estimator, "every", 1)}
    per_iteration = transitions_per_iteration.get(type(estimator).__name__, 1)
    return max(math.ceil(fraction * n_iters), math.ceil(estimator.kernel.adapt_steps / per_iteration))


def summarize(estimator: str, pair: str, history: list[dict], warmup_iterations: int, step_size: float,
              seconds: float) -> Cell:
    """Acceptance over the windows that end after warm-up; divergences over all windows (weighted equally:
    the windows have equal length)."""
    windows = [(row["iteration"], row["acceptance_rate"], row["divergences"]) for row in history if row["iteration"]]
    after = [window for window in windows if window[0] > warmup_iterations]
    acceptance = [window[1] for window in after]
    divergences = float(np.mean([window[2] for window in windows]))
    if not after:  # the warm-up outlasted the run
        return Cell(estimator, pair, True, None, None, None, divergences, None, step_size, seconds, windows)
    return Cell(estimator, pair, True, None, float(np.mean(acceptance)), float(np.min(acceptance)), divergences,
                float(np.mean([window[2] for window in after])), step_size, seconds, windows)


def table(cells: list[Cell]) -> str:
    pairs = list(dict.fromkeys(cell.pair for cell in cells))
    estimators = list(dict.fromkeys(cell.estimator for cell in cells))
    by_key = {(cell.pair, cell.estimator): cell for cell in cells}
    lines = ["| model/data | " + " | ".join(estimators) + " |", "|---|" + "---|" * len(estimators)]
    for pair in pairs:
        entries = []
        for estimator in estimators:
            cell = by_key.get((pair, estimator))
            if cell is None:
                entries.append("")
            elif not cell.finished:
                entries.append("FAILED")
            elif cell.acceptance is None:
                entries.append(f"warm-up / {cell.divergences:.3f}")
            else:
                entries.append(f"{cell.acceptance:.2f} ({cell.lowest_acceptance:.2f}) / {cell.divergences:.3f} "
                               f"({cell.divergences_after:.3f})")
        lines.append(f"| {pair} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def describe(cell: Cell) -> str:
    if not cell.finished:
        return f"FAILED {cell.error}"
    if cell.acceptance is None:
        return f"still in warm-up at the end; div {cell.divergences:.4f} eps {cell.step_size:.3g}"
    return (f"acc {cell.acceptance:.3f} (lowest {cell.lowest_acceptance:.3f}) div {cell.divergences:.4f} "
            f"(after warm-up {cell.divergences_after:.4f}) eps {cell.step_size:.3g}")


def parse_kernel(settings: list[str]) -> dict:
    kernel = {}
    for setting in settings:
        key, value = setting.split("=", 1)
        kernel[key] = value if key == "mass" else float(value) if "." in value or "e" in value else int(value)
    return kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--cells", nargs=2, metavar=("PAIRS", "ESTIMATORS"),
                        help="comma-separated model/data labels and schemes (default: all)")
    parser.add_argument("--kernel", nargs="*", default=[], help="kernel parameters key=value (default: hmc's defaults)")
    parser.add_argument("--n-iters", type=int, help="T instead of the size's")
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="fraction of the run before acceptance counts (at least the dual averaging's transitions)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, help="JSON results (default: benchmarks/results/hmc_matrix_<size>.json)")
    args = parser.parse_args()
    pairs, estimators = (args.cells[0].split(","), args.cells[1].split(",")) if args.cells else (PAIRS, ESTIMATORS)
    kernel = parse_kernel(args.kernel)
    if args.n_iters:
        SIZES[args.size].update({"n_iters": args.n_iters, "jsa_n_iters": args.n_iters})
    jobs = [(estimator, pair) for pair in pairs for estimator in estimators]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_cell, estimator, pair, args.size, kernel, args.warmup) for estimator, pair in jobs]
        cells = []
        for future in futures:
            cells.append(future.result())
            cell = cells[-1]
            print(f"{cell.pair:28s} {cell.estimator:6s} {describe(cell)}  {cell.seconds:.1f} s", flush=True)
    print()
    print(f"size {args.size} {SIZES[args.size]}, kernel hmc {kernel or 'defaults'}; "
          "acceptance after warm-up (lowest window) / divergent fraction over the run (after warm-up)")
    print(table(cells))
    out = args.out or RESULTS / f"hmc_matrix_{args.size}.json"
    out.write_text(json.dumps({"machine": machine(), "size": args.size, "settings": SIZES[args.size],
                               "kernel": kernel, "warmup": args.warmup, "cells": [asdict(c) for c in cells]},
                              indent=1) + "\n")


if __name__ == "__main__":
    main()
