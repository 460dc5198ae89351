"""run_cell: a replicate depends on its seed alone (not on R, its position or its chunk), a replicate
that goes non-finite fails alone, the evaluation schedule and metric names are the numpy engine's,
float32 runs, and a combination without a JAX twin is refused in one line."""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("jax")

import jax.numpy as jnp

from mcsa_bench import get_registry
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.api import ConfigurationError
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import run

N_ITERS = 40
SETTINGS = CellSettings(n_iters=N_ITERS, eval_every=3, eval_schedule="geometric")


@pytest.fixture(scope="module")
def parts():
    return assemble(get_registry(), model=("gaussian", {"dim": 4}), estimator="pmcsa", n_samples=5)


@pytest.fixture(scope="module")
def cell(parts):
    return run_cell(*parts.jax_twins(N_ITERS), SETTINGS, range(6))


def without_wall_time(history):
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in history]


#: a logged metric's last bits may depend on the batch around it: XLA's vectorized exp and log round
#: differently from their scalar tails, and which entries take the tail depends on R (an acceptance rate
#: moved by 1 ulp between R = 2 and R = 6 with JAX 0.10.2). The stream, each accept/reject decision and
#: so λ do not depend on it (asserted bit for bit below); a metric is compared to 16 ulps.
METRIC_RTOL = 16 * np.finfo(float).eps


def assert_same_metrics(first, second):
    """Two histories (without wall times) log the same metrics at the same iterations, to METRIC_RTOL."""
    assert [sorted(row) for row in first] == [sorted(row) for row in second]
    for row, other in zip(first, second):
        np.testing.assert_allclose([row[k] for k in sorted(row)], [other[k] for k in sorted(row)],
                                   rtol=METRIC_RTOL, atol=0)


def assert_same_replicate(a, b):
    assert a.seed == b.seed
    assert_same_metrics(without_wall_time(a.history), without_wall_time(b.history))
    np.testing.assert_array_equal(a.params, b.params)
    np.testing.assert_array_equal(a.iterate, b.iterate)


def test_a_replicate_depends_on_its_seed_alone(parts, cell):
    subset = run_cell(*parts.jax_twins(N_ITERS), SETTINGS, [4, 1])
    assert_same_replicate(subset.replicates[0], cell.replicates[4])
    assert_same_replicate(subset.replicates[1], cell.replicates[1])
    assert cell.replicates[0].history[-1] != cell.replicates[1].history[-1]


def test_chunks_give_the_same_replicates(parts, cell):
    chunked = run_cell(*parts.jax_twins(N_ITERS),
                       dataclasses.replace(SETTINGS, max_replicates_per_chunk=2), range(5))
    assert chunked.chunk_size == 2 and len(chunked.replicates) == 5
    for a, b in zip(chunked.replicates, cell.replicates):
        assert_same_replicate(a, b)


def test_evaluations_and_metric_names_are_the_numpy_engines(parts, cell):
    numpy_run = run(*parts.run_args(), n_iters=N_ITERS, seed=0, eval_every=3, eval_schedule="geometric")
    history = cell.replicates[0].history
    iterations = [row["iteration"] for row in history]
    assert iterations == [row["iteration"] for row in numpy_run.history] == [0, 3, 6, 12, 24, 40]
    assert [sorted(row) for row in history] == [sorted(row) for row in numpy_run.history]
    assert all(np.isfinite(list(row.values())).all() for row in history)
    walls = [row["wall_time"] for row in history]
    assert walls[0] == 0.0 and walls == sorted(walls)


def test_the_diagnostic_leaves_the_trajectory_as_it_is_and_logs_the_numpy_engines_names(parts, cell):
    """Its copies have their own stream: λ and every metric but its own are the cell's without it."""
    settings = dataclasses.replace(SETTINGS, diagnostics_every=4, diagnostics_replicas=3)
    diagnosed = run_cell(*parts.jax_twins(N_ITERS), settings, range(6))
    numpy_run = run(*parts.run_args(), n_iters=N_ITERS, seed=0, eval_every=3, eval_schedule="geometric",
                    diagnostics_every=4, diagnostics_replicas=3)
    history = diagnosed.replicates[0].history
    assert [sorted(row) for row in history] == [sorted(row) for row in numpy_run.history]
    assert {"grad_variance", "grad_bias"} <= set(history[-1]) and "grad_variance" not in history[1]  # t = 3: none
    for with_it, without in zip(diagnosed.replicates, cell.replicates):
        np.testing.assert_array_equal(with_it.params, without.params)
        # a program with the diagnostic's outputs is another program: XLA may fuse the metrics' exp and log
        # otherwise, so they are compared to METRIC_RTOL (a diagnostic on the cell's stream moves them by O(1))
        assert_same_metrics([{k: v for k, v in row.items() if k not in ("grad_variance", "grad_bias")}
                             for row in without_wall_time(with_it.history)], without_wall_time(without.history))


def nan_beyond(model, threshold):
    """The model with a NaN log density where z_0 > threshold (a bug in a region q reaches by chance)."""
    return dataclasses.replace(model, log_joint=lambda z: jnp.where(z[0] > threshold, jnp.nan, model.log_joint(z)))


def test_a_replicate_that_goes_nan_fails_alone(parts):
    model, family, scheme, optimizer = parts.jax_twins(N_ITERS)
    settings = CellSettings(n_iters=N_ITERS, eval_every=5)
    plain = run_cell(model, family, scheme, optimizer, settings, range(8)).replicates
    broken = run_cell(nan_beyond(model, 3.0), family, scheme, optimizer, settings, range(8)).replicates
    failed = [r for r in broken if r.failure is not None]
    assert 0 < len(failed) < len(broken), [r.failure for r in broken]
    for bad, good in zip(broken, plain):
        if bad.failure is None:
            assert_same_replicate(bad, good)
            continue
        assert bad.failure.quantity == "log density" and 1 <= bad.failure.iteration <= N_ITERS
        assert_same_metrics(without_wall_time(bad.history), [row for row in without_wall_time(good.history)
                                                             if row["iteration"] < bad.failure.iteration])
        assert np.isfinite(bad.params).all()
        # the trace (iterations 21..40) holds the iterates before the failure: the good replicate's
        np.testing.assert_array_equal(bad.trace, good.trace[:max(0, bad.failure.iteration - 21)])


def test_float32_runs_in_float32_and_lands_near_float64(parts, cell):
    single = run_cell(*parts.jax_twins(N_ITERS), dataclasses.replace(SETTINGS, dtype="float32"), range(6))
    assert single.replicates[0].params.dtype == np.float32
    kl32 = np.array([r.history[-1]["kl_inclusive"] for r in single.replicates])
    kl64 = np.array([r.history[-1]["kl_inclusive"] for r in cell.replicates])
    # same seeds, same streams: the runs differ by rounding, amplified by the accept/reject decisions
    assert np.all(np.isfinite(kl32)) and abs(kl32.mean() - kl64.mean()) < 0.5 * kl64.mean()


def test_a_component_without_a_twin_is_refused_in_one_line():
    with pytest.raises(ConfigurationError, match=r"kernel 'mala' has no JAX twin \(backend=jax\); covered kernels: "
                                                  r"cis, ex2mcmc, hmc, imh, rwmh"):
        get_registry().jax_twin("kernel", "mala")
    defensive = assemble(get_registry(), model=("gaussian", {"dim": 2}), estimator="pmcsa",
                         kernel=("imh", {"defensive": 0.1}), n_samples=2)
    with pytest.raises(ConfigurationError, match="defensive > 0 has no JAX twin; covered: defensive=0"):
        defensive.jax_twins(10)


def test_bad_settings_are_one_line():
    with pytest.raises(ConfigurationError, match="unknown dtype 'float16'; allowed: float64, float32"):
        CellSettings(n_iters=10, dtype="float16")
    with pytest.raises(ConfigurationError, match="unknown eval_schedule"):
        CellSettings(n_iters=10, eval_schedule="sometimes")


def test_the_automatic_chunk_is_what_fits_the_memory_budget(parts, monkeypatch):
    """Above PROBE_ABOVE replicates, the programs' memory at the probe size, scaled per replicate,
    against the budget: everything under an unlimited budget, one replicate under a budget of a byte."""
    from mcsa_bench.accel import engine

    cell = engine._Cell(*parts.jax_twins(N_ITERS), SETTINGS)
    monkeypatch.setattr(engine, "PROBE_ABOVE", 2)
    monkeypatch.setattr(engine, "_device_memory_budget", lambda: 10**15)
    assert engine._chunk_size(cell, 5, SETTINGS) == 5
    monkeypatch.setattr(engine, "_device_memory_budget", lambda: 1)
    assert engine._chunk_size(cell, 5, SETTINGS) == 1
    assert engine._chunk_size(cell, 5, dataclasses.replace(SETTINGS, max_replicates_per_chunk=3)) == 3
