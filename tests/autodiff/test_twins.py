"""The JAX backend's face of components written once in JAX (mcsa_bench/autodiff/twins.py): the twin of a
mean-field Gaussian written in JAX is the built-in twin to 1e-10 (log q and the draws of one key); `check
--jax` passes for the extras' eight schools and sinh-arcsinh family; runs of them on the two engines give the
same distribution of final metrics over 24 seeds (the two-sample test of tests/accel/test_agreement.py); a
numpy run of the written eight schools follows the hand-written model's; and without JAX such a component
is refused in one line naming the extra."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

from mcsa_bench import get_registry
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.accel.families import MeanFieldGaussian as MeanFieldGaussianTwin
from mcsa_bench.assembly import assemble
from mcsa_bench.autodiff.twins import FamilyTwin
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.engine import run
from mcsa_bench.testing.twins import check_twin
from tests.accel.test_agreement import same_distribution
from tests.autodiff.test_compiled import RTOL, JaxMeanFieldGaussian, relative_error

SEEDS, N_ITERS = range(24), 200


def test_the_twin_of_a_mean_field_gaussian_written_in_jax_is_the_built_in_twin_to_1e_10():
    dim = 5
    params = MeanFieldGaussian(dim).init_params() + 0.4 * np.random.default_rng(0).standard_normal(2 * dim)
    written, built_in = (twin.bind(jnp.asarray(params)) for twin in
                         (FamilyTwin(JaxMeanFieldGaussian(dim)), MeanFieldGaussianTwin(MeanFieldGaussian(dim))))
    key, z = jax.random.PRNGKey(1), jnp.asarray(np.random.default_rng(2).standard_normal((16, dim)))
    pairs = {"log q": (written.log_prob(z), built_in.log_prob(z)),
             "draws": (written.sample(key, 16), built_in.sample(key, 16)),
             "log q of the draws": (written.sample_with_log_prob(key, 16)[1],
                                    built_in.sample_with_log_prob(key, 16)[1]),
             "marginal means": (written.marginal_moments()[0], built_in.marginal_moments()[0])}
    errors = {name: relative_error(*pair) for name, pair in pairs.items()}
    assert max(errors["log q"], errors["draws"], errors["log q of the draws"]) < RTOL, errors
    assert errors["marginal means"] < 0.05  # from 8,192 draws: a Monte Carlo estimate, sd/√8192 ≈ 0.011 sd


@pytest.mark.parametrize("kind, name", [("model", "eight_schools_jax"), ("family", "sinh_arcsinh")])
def test_check_jax_passes_for_the_components_written_in_jax(kind, name):
    for result in check_twin(kind, name):
        assert not result.failed, result.message


def final_metric(metric: str, backend: str, **spec) -> np.ndarray:
    parts = assemble(get_registry(), n_samples=10, **spec)
    if backend == "numpy":
        rows = [run(*parts.run_args(), n_iters=N_ITERS, seed=seed, eval_every=N_ITERS).history[-1] for seed in SEEDS]
    else:
        cell = run_cell(*parts.jax_twins(N_ITERS), CellSettings(n_iters=N_ITERS, eval_every=N_ITERS), SEEDS)
        assert all(replicate.failure is None for replicate in cell.replicates)
        rows = [replicate.history[-1] for replicate in cell.replicates]
    return np.array([row[metric] for row in rows])


@pytest.mark.parametrize("spec", [
    {"model": "eight_schools_jax", "estimator": "pmcsa", "kernel": "imh"},
    {"model": "eight_schools_jax", "estimator": "elbo", "family": "sinh_arcsinh"},  # reparameterized by autodiff
    pytest.param({"model": "eight_schools_jax", "estimator": "msc", "kernel": ("hmc", {"mass": "identity"})},
                 marks=pytest.mark.slow),
], ids=["pmcsa-imh", "elbo-sinh_arcsinh", "msc-hmc"])
def test_a_model_written_in_jax_gives_the_same_final_metrics_on_both_engines(spec):
    agree, detail = same_distribution(final_metric("log_z", "jax", **spec), final_metric("log_z", "numpy", **spec))
    assert agree, detail


def test_a_numpy_run_of_the_written_eight_schools_follows_the_hand_written_models():
    """Same seed, same streams, log densities equal to rounding: pMCSA's accept decisions coincide, so the
    final λ agree to rounding after 200 iterations."""
    finals = [run(*assemble(get_registry(), model=model, estimator="pmcsa", n_samples=10).run_args(),
                  n_iters=N_ITERS, seed=3, eval_every=N_ITERS).q.params
              for model in ("eight_schools", "eight_schools_jax")]
    assert relative_error(*finals) < 1e-8


def test_without_jax_a_component_written_in_jax_is_refused_in_one_line(tmp_path):
    code = ("import sys; sys.modules['jax'] = None\n"
            "from mcsa_bench.cli import main\n"
            "sys.exit(main(['run', 'model=eight_schools_jax', 'n_iters=10']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == ("mcsa-bench: error: model 'eight_schools_jax': model EightSchoolsJax is written "
                                   "in JAX (mcsa_bench.autodiff): pip install 'mcsa-bench[jax]'")
    assert list(tmp_path.iterdir()) == []  # nothing created
