"""The accelerated backend's cost axis and iterate trace are the numpy engine's: the rows each JAX scheme
declares (Scheme.cost) equal the rows the numpy engine counts for the same configuration, at every
evaluation, and a cell's replicates log them and return the trace the numpy engine keeps."""

import numpy as np
import pytest

pytest.importorskip("jax")

from mcsa_bench import get_registry
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import run

COST = ("log_density_evals", "gradient_evals")
#: (estimator, kernel options, N): every scheme and kernel the JAX backend covers, single-HMC (msc + hmc) and
#: rws with a wake every 3 iterations among them, and the extras plugin's twin
CONFIGURATIONS = [
    ("msc", "cis", 5), ("msc", "imh", 5), ("msc", ("hmc", {"n_leapfrog": 3}), 5), ("msc_rb", "cis", 5),
    ("jsa", "imh", 5), ("jsa", "cis", 5), ("jsa", ("hmc", {"n_leapfrog": 2}), 3), ("pmcsa", "imh", 5),
    ("pmcsa", "cis", 5), ("pmcsa", ("hmc", {"n_leapfrog": 2}), 4), ("snis", None, 5), ("elbo", None, 5),
    ("elbo", None, 1), (("rws", {"every": 3}), ("hmc", {"n_leapfrog": 4}), 5),
    ("pmcsa", "rwmh", 5), ("jsa", "rwmh", 3),  # a plugin's kernel twin (mcsa-bench-extras)
    ("msc", "ex2mcmc", 5), ("pmcsa", ("ex2mcmc", {"mala_steps": 2}), 4), ("jsa", ("ex2mcmc", {"mala_steps": 0}), 3),
]
N_ITERS = 10


def build(estimator, kernel, n_samples):
    return assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator=estimator, kernel=kernel,
                    n_samples=n_samples)


def config_id(config) -> str:
    estimator, kernel, n = config
    name = lambda part: part if part is None or isinstance(part, str) else part[0]  # noqa: E731
    return f"{name(estimator)}-{name(kernel)}-N{n}"


@pytest.mark.parametrize("config", CONFIGURATIONS, ids=config_id)
def test_each_schemes_declared_cost_is_what_the_numpy_engine_counts(config):
    parts = build(*config)
    numpy_run = run(*parts.run_args(), n_iters=N_ITERS, seed=0, eval_every=1)
    scheme = parts.jax_twins(N_ITERS)[2]
    declared = [scheme.cost(row["iteration"]).metrics() for row in numpy_run.history]
    assert declared == [{name: row[name] for name in COST} for row in numpy_run.history]
    assert numpy_run.history[-1]["log_density_evals"] > 0


def test_a_cell_logs_the_cost_and_returns_the_numpy_engines_trace():
    parts = build("pmcsa", "imh", 4)
    n_iters = 450  # the trace's second half, 225 iterations, at stride 2: 113 iterates
    numpy_run = run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=150)
    settings = CellSettings(n_iters=n_iters, eval_every=150)
    replicate = run_cell(*parts.jax_twins(n_iters), settings, [0]).replicates[0]
    assert [{name: row[name] for name in COST} for row in replicate.history] == [
        {name: row[name] for name in COST} for row in numpy_run.history]
    assert replicate.trace.shape == numpy_run.trace.shape == (113, parts.family.num_params)
    np.testing.assert_array_equal(replicate.trace[-1], replicate.iterate)  # λ_T: the last traced iterate
    assert np.all(np.diff(replicate.trace, axis=0) != 0)  # every row written, each a later λ
