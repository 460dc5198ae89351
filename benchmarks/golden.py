"""The golden slice of docs/results.md: a few cells of every results table at reduced size and a fixed seed.

Each cell is one job of a grid as `mcsa-bench run -m experiment=<grid> size=bench` composes it
(same data set, method, budget, optimizer and stepsize), with fewer iterations (and, for the GP
models, fewer rows), run in this process through the engine exactly as a job runs it, minus the
tracking store. Its final metrics, the table's, are stored in benchmarks/results/golden.json;
tests/test_golden.py recomputes them in CI, so any change of a published number shows up in the
commit that makes it:

    python benchmarks/golden.py            # recompute and compare with the stored values (what CI does)
    python benchmarks/golden.py --update   # recompute and store them: after a deliberate change
    python benchmarks/golden.py --grids logistic bnn   # some tables only

The stored file also records the arithmetic it was computed with (numpy's SIMD targets, the
OpenBLAS kernels, library versions): see tests/test_golden.py for what the tolerance allows and why.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "results" / "golden.json"
UPDATE_COMMAND = "python benchmarks/golden.py --update"
#: with the stored values' arithmetic every value must come back bit for bit; with other arithmetic
#: (another CPU or library build) within |computed − stored| ≤ RTOL·|stored| (tests/test_golden.py says why)
RTOL = 1e-10

#: per grid, the reduced size on top of its size=bench job, and the metrics its docs/results.md table reports
REDUCED = {
    "gaussian_variance": (("n_iters=200", "eval_every=200", "diagnostics.every=100", "diagnostics.replicas=64"),
                          ("grad_variance",)),
    "stepsize_robustness": (("n_iters=300", "eval_every=300"), ("kl_inclusive",)),
    "logistic": (("n_iters=300", "eval_every=300"), ("test_lpd", "test_accuracy")),
    "gp_classification": (("n_iters=20", "eval_every=20", "max_rows=100"), ("test_lpd", "test_accuracy")),
    "bnn": (("n_iters=200", "eval_every=200"), ("test_lpd",)),
    "gp_regression": (("n_iters=10", "eval_every=10", "max_rows=100"), ("test_lpd",)),
    "marginal_likelihood": (("n_iters=200", "eval_every=200"), ("log_z",)),
}


@dataclass(frozen=True)
class Cell:
    """One job of ``grid`` at size=bench, chosen by ``choose`` (the grid's swept keys), at seed 0,
    run at the grid's reduced size (:data:`REDUCED`) plus ``extra`` overrides."""

    grid: str
    choose: tuple[str, ...]
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return " ".join((f"experiment={self.grid}", *self.choose, *self.extra))

    @property
    def overrides(self) -> list[str]:
        return [f"experiment={self.grid}", "size=bench", *self.choose, "seed=0", *REDUCED[self.grid][0], *self.extra]

    @property
    def metrics(self) -> tuple[str, ...]:
        return REDUCED[self.grid][1]


#: extra overrides of a method wherever it appears; single-HMC makes 256 leapfrog steps per iteration,
#: and after 20 of them rounding differences had grown to 1e-5 (measured; after 10, 3e-16)
METHOD_EXTRA = {"msc_hmc": ("n_iters=10", "eval_every=10")}


def _diagonal(grid: str, rows: list[tuple[str, ...]], methods: list[str]) -> list[Cell]:
    """One cell per method (a column of the grid's table), the rows taken in turn: every column and,
    with at least as many methods as rows, every row at least once."""
    return [Cell(grid, (*rows[i % len(rows)], f"method={method}"), METHOD_EXTRA.get(method, ()))
            for i, method in enumerate(methods)]


SCHEMES = ["pmcsa", "jsa", "msc", "msc_rb"]
#: every column (method) of every table and every data set at least once: tests/test_golden.py checks
#: this against the grids' sweeps
CELLS: tuple[Cell, ...] = (
    *_diagonal("gaussian_variance", [("n_samples=8",), ("n_samples=16",), ("n_samples=32",), ("n_samples=64",)],
               SCHEMES),
    *_diagonal("stepsize_robustness", [("optimizer=adam", "optimizer.lr=0.0379"),
                                       ("optimizer=momentum", "optimizer.lr=0.00616"),
                                       ("optimizer=nesterov", "optimizer.lr=0.234"),
                                       ("optimizer=sgd", "optimizer.lr=0.0379")], SCHEMES),
    *_diagonal("logistic", [(f"experiment@_global_=logistic_{data}",) for data in ("pima", "heart", "german")],
               [*SCHEMES, "msc_hmc", "snis", "elbo_n1"]),
    *_diagonal("gp_classification", [(f"experiment@_global_=gp_classification_{data}",)
                                     for data in ("sonar", "ionosphere", "breast")], [*SCHEMES, "snis", "elbo_n1"]),
    *_diagonal("bnn", [(f"experiment@_global_=bnn_{data}",) for data in ("boston", "concrete")], [*SCHEMES, "elbo"]),
    *_diagonal("gp_regression", [(f"experiment@_global_=gp_regression_{data}",) for data in ("boston", "concrete")],
               [*SCHEMES, "elbo_n1"]),
    *_diagonal("marginal_likelihood", [("experiment@_global_=radon",), ("experiment@_global_=radon",),
                                       ("experiment@_global_=stochastic_volatility_sp500",)],
               [*SCHEMES, "snis", "elbo_n1"]),
)


def compute(cell: Cell) -> dict[str, float]:
    """The cell's final metrics, computed as a job computes them (one BLAS thread), without tracking."""
    from threadpoolctl import threadpool_limits

    from mcsa_bench import get_registry, run
    from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs

    registry = get_registry()
    register_configs(registry)
    jobs = compose_jobs(cell.overrides, multirun=True)
    if len(jobs) != 1:
        raise ValueError(f"golden cell {cell.name!r} composes {len(jobs)} jobs, not one: choose every swept key")
    settings = RunSettings.from_config(jobs[0][1])
    with threadpool_limits(limits=1):
        parts = settings.assemble(registry)
        result = run(*parts.run_args(), n_iters=settings.n_iters, seed=settings.seed, eval_every=settings.evaluation.every,
                     eval_schedule=settings.evaluation.kind,
                     diagnostics_every=settings.diagnostics_every, diagnostics_replicas=settings.diagnostics_replicas)
    final = result.history[-1]
    return {metric: float(final[metric]) for metric in cell.metrics}


def arithmetic() -> dict[str, object]:
    """What decides the last bits of a result besides the code: libraries and the CPU kernels they chose."""
    import numpy as np
    import scipy
    from threadpoolctl import threadpool_info

    try:  # numpy's runtime dispatch, as np.show_runtime() reports it
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        simd = [target for target in __cpu_dispatch__ if __cpu_features__.get(target)]
    except ImportError:
        simd = None
    blas = sorted(({key: pool.get(key) for key in ("internal_api", "version", "architecture")}
                   for pool in threadpool_info() if pool.get("user_api") == "blas"), key=json.dumps)
    return {"machine": platform.machine(), "libc": " ".join(platform.libc_ver()), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__, "numpy_simd": simd, "blas": blas}


def load(path: Path = GOLDEN) -> dict:
    return json.loads(path.read_text())


def stored_values(golden: dict) -> dict[str, dict[str, float]]:
    return {cell["name"]: cell["metrics"] for cell in golden["cells"]}


def differences(cell: Cell, stored: dict[str, float] | None, computed: dict[str, float], *, exact: bool) -> list[str]:
    """One line per metric of ``cell`` that moved (or has no stored value): any change when ``exact``
    (the stored values' arithmetic), else a change beyond :data:`RTOL`."""
    if stored is None:
        return [f"{cell.name}: no stored value (a new cell); store it with: {UPDATE_COMMAND}"]
    lines = []
    for metric, value in computed.items():
        before = stored.get(metric)
        if before is None:
            lines.append(f"{cell.name}: {metric} has no stored value; store it with: {UPDATE_COMMAND}")
            continue
        change = abs(value - before)
        if change == 0 or (not exact and change <= RTOL * abs(before)):
            continue
        relative = change / abs(before) if before else math.inf
        kind = (f"within {RTOL:g}: a change of rounding only, e.g. reordered floating-point operations"
                if change <= RTOL * abs(before) else f"beyond the {RTOL:g} a change of rounding can explain")
        lines.append(f"{cell.name}: {metric} moved from {before!r} to {value!r} (by {value - before:+.3g}, "
                     f"{relative:.2g} relative: {kind})")
    return lines


def failure_message(lines: list[str], golden: dict) -> str:
    """What a failing comparison says: the cells that moved, and what to do."""
    here = arithmetic()
    machine = ("" if golden.get("arithmetic") == here else
               f"\nThese values were computed with other arithmetic than the stored ones ({golden.get('arithmetic')}; "
               f"here: {here}), so only changes beyond {RTOL:g} relative count.")
    return ("\n".join(lines) + f"\n{len(lines)} value(s) of the golden slice of docs/results.md moved. If the change "
            f"is deliberate, regenerate them with `{UPDATE_COMMAND}` and commit benchmarks/results/golden.json "
            "with it, saying which published numbers move (a rounding-only change moves the chaotic ones, msc_rb and "
            "snis at full size, within their Monte Carlo error: docs/results.md)." + machine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help=f"store the recomputed values in {GOLDEN}")
    parser.add_argument("--grids", nargs="+", choices=sorted(REDUCED), help="only these tables (default: all)")
    args = parser.parse_args()
    cells = [cell for cell in CELLS if args.grids is None or cell.grid in args.grids]
    golden = load() if GOLDEN.exists() else {"cells": []}
    stored, exact = stored_values(golden), golden.get("arithmetic") == arithmetic()
    if args.update and args.grids and not exact:
        parser.error("the stored values came from other arithmetic: update every cell (drop --grids)")
    computed, lines, total = {}, [], 0.0
    for cell in cells:
        start = time.process_time()
        computed[cell.name] = compute(cell)
        seconds = time.process_time() - start
        total += seconds
        moved = differences(cell, stored.get(cell.name), computed[cell.name], exact=exact)
        lines += moved
        print(f"{seconds:6.2f} s CPU  {'MOVED' if moved else 'same '}  {cell.name}  {computed[cell.name]}", flush=True)
    print(f"{total:.1f} s of CPU for {len(cells)} cells")
    if args.update:
        values = {**stored, **computed}
        golden = {"about": __doc__.splitlines()[0].rstrip(".") + " (benchmarks/golden.py, tests/test_golden.py)",
                  "arithmetic": arithmetic(),
                  "cells": [{"name": cell.name, "metrics": values[cell.name]} for cell in CELLS if cell.name in values]}
        GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
        print(f"stored {len(golden['cells'])} cells in {GOLDEN}")
    elif lines:
        print(failure_message(lines, golden), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
