"""A reference for any model (mcsa_bench/references/nuts.py): NUTS on the density a model written in NumPyro
gives agrees with the reference the project ships for the hand-written eight schools (an independent NumPyro
program, tools/generate_references.py): means within 3 combined Monte Carlo standard errors, sds within 5 %;
a run short of the bar says which and what to try."""

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numpyro")

from mcsa_bench.autodiff.ppl import NumPyroModel
from mcsa_bench.references import find
from mcsa_bench.references.diagnostics import bulk_ess
from mcsa_bench.references.nuts import NutsSettings, reference_of, sample, shortfall
from mcsa_bench_extras.models import EightSchools

DATA = Path(__file__).resolve().parents[1] / "data" / "ppl"


@pytest.fixture(scope="module")
def made():
    model = NumPyroModel(f"{DATA / 'eight_schools_numpyro.py'}:model", str(DATA / "eight_schools.json"))
    draws, run = sample(model.log_density, model.dim, NutsSettings(chains=2, draws=1500, warmup=500,
                                                                   target_accept=0.95))
    return model, reference_of(draws, run, "eight_schools-test", "numpyro", {}, model.latent_names(), model.log_joint)


def test_nuts_on_a_numpyro_models_density_agrees_with_the_shipped_reference(made):
    model, reference = made
    shipped = find("eight_schools", EightSchools(centered=False))
    # the same posterior in the same coordinates (named after NumPyro's sites: tau for the shipped log_tau)
    difference = model.log_joint(shipped.check_points) - shipped.check_log_density
    assert np.ptp(difference) < 1e-8 * np.abs(shipped.check_log_density).max()
    combined = np.sqrt(reference.mean_mcse**2 + shipped.mean_mcse**2)
    assert np.all(np.abs(reference.mean - shipped.mean) <= 3 * combined), (reference.mean - shipped.mean) / combined
    assert np.all(np.abs(reference.sd / shipped.sd - 1) < 0.05), reference.sd / shipped.sd
    assert reference.describes(model) and reference.latent_names == model.latent_names()


def test_a_reference_short_of_the_bar_says_which_and_what_to_try(made):
    _, reference = made  # 3,000 draws in all: bulk ESS under 10,000 for every latent
    assert not reference.meets_bar
    message = shortfall(reference)
    assert "bulk ESS" in message and "< 10,000 for" in message and "and 9 more" in message and "--draws" in message
    assert "--pilot 1000" in message  # the other remedy, for latents on a ridge
    needed = int(re.search(r"--draws (\d+)", message).group(1))
    assert needed > 1500 * 10_000 / reference.quality["ess_min"]


def test_a_pilots_covariance_as_the_mass_matrix_samples_a_ridge_exactly_and_far_better_than_a_diagonal():
    """A Gaussian whose 6 latents lie on a ridge (sd 1 along their sum's direction, 0.01 across it), the shape
    of the item-response model's posterior (docs/references.md): with --pilot's dense mass the draws have the
    exact means and sds, and their bulk ESS is several times a diagonal mass's at the same length (on this
    ridge a diagonal mass gives under 0.05 ESS per draw, the pilot's about 1)."""
    import jax.numpy as jnp

    dim = 6
    ridge = np.ones(dim) / np.sqrt(dim)
    covariance = 0.01**2 * np.eye(dim) + (1.0 - 0.01**2) * np.outer(ridge, ridge)
    precision = jnp.asarray(np.linalg.inv(covariance))
    mean = np.arange(dim, dtype=float)

    def log_density(z):
        return -0.5 * (z - mean) @ precision @ (z - mean)

    settings = NutsSettings(chains=2, draws=1000, warmup=300)
    piloted, run = sample(log_density, dim, replace(settings, pilot=500))
    diagonal, _ = sample(log_density, dim, settings)
    reference = reference_of(piloted, run, "ridge", "test", {}, [f"z[{i}]" for i in range(dim)],
                             lambda z: np.zeros(len(z)))
    assert run["pilot_draws_per_chain"] == 500 and run["dense_mass"] and run["divergences"] == 0
    z = (reference.mean - mean) / reference.mean_mcse
    assert np.all(np.abs(z) <= 3.5), z  # 6 latents: a false alarm has odds of about 1 in 350
    sds = np.sqrt(np.diag(covariance))
    # the sd's relative Monte Carlo error is about 1 / sqrt(2 ESS)
    assert np.all(np.abs(reference.sd / sds - 1) <= 3.5 / np.sqrt(2 * reference.ess)), reference.sd / sds
    assert reference.ess.min() > 5 * bulk_ess(diagonal).min(), (reference.ess.min(), bulk_ess(diagonal).min())
