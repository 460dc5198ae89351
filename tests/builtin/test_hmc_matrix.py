"""kernel=hmc at its defaults with every scheme that takes it (msc, jsa, pmcsa, rws) on every
built-in model/data pair and the extras plugin's models, at the small size of
benchmarks/docgen/hmc_matrix.py (40 data rows; T = 300, jsa 40): every run finishes, reports its
divergences, and after warm-up accepts within 0.6-0.9 (dual averaging and tracking aim at 0.8).
rws is exempt from the band: its warm-up, 100 wake transitions, lasts 500 iterations here.
docs/estimators.md has the same matrix at a realistic size.
"""

import math

import pytest

from benchmarks.docgen.hmc_matrix import ESTIMATORS, PAIRS, run_cell


@pytest.mark.slow
@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_hmc_at_its_defaults_finishes_and_accepts_near_its_target(estimator, pair):
    cell = run_cell(estimator, pair, "small", kernel={}, warmup=0.2)
    assert cell.finished, cell.error
    assert all(0.0 <= divergences <= 1.0 for _, _, divergences in cell.windows)
    if estimator == "rws":
        assert all(math.isfinite(acceptance) for _, acceptance, _ in cell.windows)
    else:
        assert 0.6 <= cell.acceptance <= 0.9, cell
