"""docs/results.md pinned to the code: its golden slice (benchmarks/fixtures/golden.py) recomputed and compared.

Every results table of docs/results.md has cells in the slice (37 cells: every column, i.e. method,
of each table and every data set at least once, at reduced size and seed 0,
benchmarks/results/golden.json); a change of any of them fails here, naming the cell, the metric,
the change and the command that stores the new values (`python benchmarks/fixtures/golden.py --update`),
so a change of a published number is deliberate and shows in its commit. Measured cost: 13.4 s of
CPU for the 37 cells (one BLAS thread; 0.15-1.6 s per cell), spread over the seven tables' tests
(this file under pytest -n 0: 17 s of CPU with start-up, on a quiet machine).

The tolerance. Within one machine type the runs are bit-reproducible, so with the arithmetic the
stored values were computed with ('arithmetic' in golden.json: numpy's SIMD targets, the OpenBLAS
kernels, library versions, libc) every value must come back bit for bit. Even a change that only
reorders floating-point operations fails then, on purpose: at full size such a change moves the
chaotic cells of docs/results.md by their Monte Carlo error (MCMC accept/reject and self-normalized
weights amplify rounding; at T = 2000 on pima, a one-ulp change of the initial λ moves msc_rb's
and snis's test LPD by 0.25-0.5 while pmcsa, jsa, msc and elbo stay within 1e-9), as two
last-bit rewrites did before the published run (Adam's step, 069b2e7, and the softplus
derivative, 82f4982, moved msc_rb on pima from -0.600 to -0.718 on this machine). With other
arithmetic (another CPU, e.g. without AVX-512, or another OpenBLAS build) the values may differ by
rounding, so the reduced sizes were chosen before any cell turns chaotic: under six arithmetic
environments (OpenBLAS SkylakeX, Haswell, Sandybridge and Core2 kernels, numpy's AVX-512, AVX2 and
baseline code paths: OPENBLAS_CORETYPE and NPY_DISABLE_CPU_FEATURES) the largest relative
difference of any cell was 7e-15 (three candidate cells were dropped for theirs: pmcsa with SGD at
γ = 1, 6 %; single-HMC after 20 iterations, 1e-5; msc_rb with SGD at γ = 0.234, 6e-10). There the
tolerance is RTOL = 1e-10 relative: over 10^4 times the largest rounding difference measured, and
200 times below the smallest deliberate change measured (Adam's eps from 1e-8 to 2e-8 moves pima's
pmcsa test LPD by 2e-8 relative).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _script(path: str):
    """A benchmarks/ script as a module (it is not a package)."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


golden = _script("fixtures/golden.py")
paper_grids = _script("docgen/paper_grids.py")


@pytest.fixture(scope="module")
def stored() -> dict:
    return golden.load()


def test_every_results_table_has_cells_and_every_cell_a_stored_value(stored):
    assert {cell.grid for cell in golden.CELLS} == set(paper_grids.GRIDS) == set(golden.REDUCED)
    names = [cell.name for cell in golden.CELLS]
    assert len(set(names)) == len(names)
    values = golden.stored_values(stored)
    assert list(values) == names, f"benchmarks/results/golden.json is stale: run {golden.UPDATE_COMMAND}"
    for cell in golden.CELLS:
        assert set(values[cell.name]) == set(cell.metrics), cell.name


def test_every_method_and_data_set_of_every_grid_has_a_cell():
    """Against the grids' own sweeps (conf/experiment/<grid>.yaml): a method or data set added to a
    grid, hence a column or row added to its table, needs a golden cell too."""
    from omegaconf import OmegaConf

    for grid in paper_grids.GRIDS:
        swept = OmegaConf.load(ROOT / "conf" / "experiment" / f"{grid}.yaml").hydra.sweeper.params
        chosen = [dict(override.split("=", 1) for override in cell.choose)
                  for cell in golden.CELLS if cell.grid == grid]
        for key in ("method", "experiment@_global_", "optimizer"):
            if key in swept:
                missing = set(str(swept[key]).split(",")) - {choice.get(key) for choice in chosen}
                assert not missing, f"{grid}: no golden cell with {key} = {', '.join(sorted(missing))}"


@pytest.mark.parametrize("grid", paper_grids.GRIDS)
def test_the_golden_slice_of_each_table_is_reproduced(grid, stored):
    values, exact = golden.stored_values(stored), stored["arithmetic"] == golden.arithmetic()
    lines = []
    for cell in (cell for cell in golden.CELLS if cell.grid == grid):
        lines += golden.differences(cell, values.get(cell.name), golden.compute(cell), exact=exact)
    assert not lines, golden.failure_message(lines, stored)


def test_a_moved_value_names_its_cell_the_change_and_the_command_to_store_it(stored):
    cell = golden.CELLS[0]
    (metric,) = cell.metrics
    moved = golden.differences(cell, {metric: 6.0}, {metric: 6.5}, exact=False)
    assert len(moved) == 1 and cell.name in moved[0] and metric in moved[0]
    assert "from 6.0 to 6.5 (by +0.5, 0.083 relative: beyond the 1e-10 a change of rounding" in moved[0]
    message = golden.failure_message(moved, stored)
    assert moved[0] in message and golden.UPDATE_COMMAND in message

    rounding = {metric: 6.0 * (1 + 4e-16)}
    assert golden.differences(cell, {metric: 6.0}, rounding, exact=False) == []  # other arithmetic: within RTOL
    (line,) = golden.differences(cell, {metric: 6.0}, rounding, exact=True)  # the stored arithmetic: bit for bit
    assert "6.0 to 6.000000000000003" in line and "a change of rounding only" in line
    assert golden.differences(cell, {metric: 6.0}, {metric: math.nan}, exact=False)  # NaN is a change
    (new,) = golden.differences(cell, None, {metric: 6.0}, exact=True)
    assert "no stored value" in new and golden.UPDATE_COMMAND in new
