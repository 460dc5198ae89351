"""The reference generator (mcsa_bench.tools.generate_references): its NUTS where the answer is exact,
its check of a posterior sampled in other coordinates, its refusal of too few draws. Needs the optional
extra [reference] (NumPyro); skipped without it."""

from __future__ import annotations

import numpy as np
import pytest

from mcsa_bench.references import DENSITY_TOLERANCE, RHAT_BAR


@pytest.mark.slow
def test_the_generators_nuts_recovers_the_gaussian_targets_exact_moments():
    """The sampler behind every shipped reference, tested where the answer is exact: NUTS's means within
    4 Monte Carlo standard errors of the target's, its sds within 4 standard errors (sd/√(2 ESS)).
    Needs the optional extra [reference] (NumPyro); skipped without it."""
    pytest.importorskip("numpyro", reason="the reference generator needs the extra [reference]")
    from mcsa_bench.tools import generate_references as generate

    spec = generate.gaussian_target_spec(dim=10, seed=0)
    samples, run = generate.sample(spec, chains=2, seed=0)
    model = generate.project_model(spec)
    sampled = generate.build_reference(spec, model, generate.chain_draws(spec, samples), run,
                                       np.random.default_rng(0))
    exact = model.reference()
    assert sampled.quality["divergences"] == 0 and sampled.quality["rhat_max"] <= RHAT_BAR
    mean_z = (sampled.mean - exact.mean) / sampled.mean_mcse
    sd_z = (sampled.sd - exact.sd) / (exact.sd / np.sqrt(2 * sampled.ess))
    assert np.max(np.abs(mean_z)) < 4, mean_z
    assert np.max(np.abs(sd_z)) < 4, sd_z


def test_a_posterior_sampled_in_other_coordinates_is_checked_to_be_the_projects():
    """GP regression is sampled conditionally whitened (z with u = Lᵀ(K + σ_y²I)⁻¹y + σ_y R⁻ᵀz), not in u:
    the density NUTS samples equals the project's log joint carried over by log|det ∂u/∂z| (to 1e-8
    beyond a constant), and the check catches a sampled density without its factor N(u; 0, I) σ_yⁿ/|R|."""
    pytest.importorskip("numpyro", reason="the reference generator needs the extra [reference]")
    import numpyro

    from mcsa_bench.tools import generate_references as generate

    spec = generate.gp_regression_spec("boston", max_rows=12)
    assert generate.sampled_coordinates_check(spec, points=5) <= DENSITY_TOLERANCE
    spec.sampled = numpyro.handlers.block(spec.sampled, hide=["u_prior"])
    assert generate.sampled_coordinates_check(spec, points=5) > 1e-3


def test_the_generator_refuses_fewer_draws_than_the_density_check_needs(capsys):
    """The density check takes 100 points from the draws: a smaller run is refused before sampling."""
    pytest.importorskip("numpyro", reason="the reference generator needs the extra [reference]")
    from mcsa_bench.tools import generate_references as generate

    assert generate.main(["gaussian--dim10-seed0", "--draws", "20", "--chains", "2"]) == 2
    assert "under the 100 draws" in capsys.readouterr().err
