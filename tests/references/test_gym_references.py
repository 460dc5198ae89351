"""The references `references make`'s NUTS made of Inference Gym's two targets (benchmarks/results/published_nuts/
<name>.npz, by ``python benchmarks/docgen/published_nuts.py <name> --keep benchmarks/results/published_nuts``)
against the Gym's ground truth (mcsa_bench/references/inference_gym/, Stan's NUTS, 50,000 draws): that each
describes the Gym's model (its check points' log density is tests/references/stan_densities.py's, written with
scipy.stats, plus the log-Jacobian of z -> the sites), that its moments carried to the sites agree with the
Gym's at the tolerance its ESS sets, that this check catches a wrong mean or sd, and (slow) that a short MCSA
run's posterior-accuracy metrics read the same against either (docs/references.md, "Posteriors no one here
wrote")."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit, log_expit

from mcsa_bench.references import DENSITY_TOLERANCE, PosteriorReference, load
from mcsa_bench.references.external import SD_BAR, Moments, find, mean_z_bar
from tests.references.stan_densities import DENSITIES

KEPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "published_nuts"
GYM = ["stochastic_volatility_sp500_small", "synthetic_item_response_theory"]
#: z -> the site's value and log|dθ/dz|, for the latents whose support is not the real line (NumPyro's
#: biject_to: (-1, 1) by 2 sigmoid(z) - 1, (0, ∞) by exp); every other latent is its site's value
TRANSFORMS = {
    "persistence_of_volatility": (lambda z: 2.0 * expit(z) - 1.0, lambda z: np.log(2.0) + log_expit(z) + log_expit(-z)),
    "white_noise_shock_scale": (np.exp, lambda z: z),
}


def reference(name: str) -> PosteriorReference:
    return load(KEPT / f"{name}.npz")


def site_of(latent: str) -> str:
    return latent.split("[")[0]


def sites(reference: PosteriorReference, z: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Points z (n, D) of the reference's latents as the sites' values (n, *shape), and log|det ∂θ/∂z| (n,)."""
    names = [site_of(latent) for latent in reference.latent_names]
    values, log_jacobian = {}, np.zeros(len(z))
    for site in dict.fromkeys(names):
        columns = z[:, [i for i, name in enumerate(names) if name == site]]
        if site in TRANSFORMS:
            forward, log_derivative = TRANSFORMS[site]
            log_jacobian += log_derivative(columns).sum(axis=1)
            columns = forward(columns)
        values[site] = columns[:, 0] if names.count(site) == 1 else columns
    return values, log_jacobian


#: of the reference's 100 check points (the item-response model's density by scipy.stats: 0.1 s a point)
CHECKED_POINTS = 20
#: the site the Gym's ground truth and `references make`'s NUTS disagree on (docs/references.md, the Gym's
#: targets): its prior is Cauchy, and where the persistence nears 1 it is barely identified, so its mean
#: and sd hang on a long left tail that is rarely visited. The centred NUTS kept (4 × 65,000 draws, no
#: divergences) puts its 0.5 % quantile at -0.1 to 1.4 by chain and gives mean 7.846, sd 1.294; a non-centred
#: NumPyro NUTS (4 × 10,000, 769 divergences) 4.4 and 7.936, 0.913; the Gym's Stan (non-centred) 7.915, 1.048
UNRESOLVED = {"stochastic_volatility_sp500_small": {"mean_log_volatility"}}


@dataclass(frozen=True)
class SiteMoments:
    """The reference's moments on the sites' supports, flattened in the Gym's order: mean, its standard error,
    sd and the sd's relative standard error."""

    mean: np.ndarray
    mean_se: np.ndarray
    sd: np.ndarray
    sd_relative_se: np.ndarray


def site_moments(reference: PosteriorReference, order: list[str]) -> SiteMoments:
    """A real latent's moments are the reference's own; a transformed one's are those of its thinned draws
    carried through the transform, with the standard error sd_θ / √ESS (bulk ESS is rank-based, so the
    latent's ESS is its site's). The sd's relative error is √(1/(2 ESS)), a Gaussian's (and the thinned
    draws' √(1/(2n)) where the sd is theirs)."""
    names = [site_of(latent) for latent in reference.latent_names]
    thinned = sites(reference, np.asarray(reference.draws, dtype=float))[0]
    parts = []
    for site in order:
        index = np.array([i for i, name in enumerate(names) if name == site])
        ess = reference.ess[index]
        if site in TRANSFORMS:
            values = thinned[site].reshape(len(reference.draws), -1)
            sd = values.std(axis=0, ddof=1)
            parts.append((values.mean(axis=0), sd / np.sqrt(ess), sd,
                          np.sqrt(1.0 / (2.0 * ess) + 1.0 / (2.0 * len(values)))))
        else:
            parts.append((reference.mean[index], reference.mean_mcse[index], reference.sd[index],
                          np.sqrt(1.0 / (2.0 * ess))))
    return SiteMoments(*(np.concatenate([part[k] for part in parts]) for k in range(4)))


def gym_moments(name: str) -> tuple[list[str], Moments]:
    """The Gym's sites in its order (but those UNRESOLVED) and their moments, flattened."""
    truth = find(name).moments()
    order = [site for site in truth if site not in UNRESOLVED.get(name, set())]
    return order, Moments(*(np.concatenate([np.ravel(getattr(truth[site], key)) for site in order])
                            for key in ("mean", "sd", "mean_se")))


@dataclass(frozen=True)
class GymAgreement:
    """Per coordinate: the means' difference in standard errors of the difference (the reference's MCSE and
    the Gym's combined), the sds' relative difference and its tolerance."""

    z: np.ndarray
    sd_deviation: np.ndarray
    sd_tolerance: np.ndarray
    z_bar: float

    @property
    def agrees(self) -> bool:
        return bool(np.max(np.abs(self.z)) <= self.z_bar and np.all(np.abs(self.sd_deviation) <= self.sd_tolerance))


def gym_agreement(ours: SiteMoments, theirs: Moments) -> GymAgreement:
    """Means within mean_z_bar(D) standard errors of the difference; sds within 5 %, or where the reference
    cannot resolve 5 %, within mean_z_bar(D) of the sd's relative standard errors (the Gym publishes none for
    its sds; its 50,000 draws' error is left out)."""
    z_bar = mean_z_bar(ours.mean.size)
    z = (ours.mean - theirs.mean) / np.sqrt(ours.mean_se**2 + theirs.mean_se**2)
    tolerance = np.maximum(SD_BAR, z_bar * ours.sd_relative_se)
    return GymAgreement(z, ours.sd / theirs.sd - 1.0, tolerance, z_bar)


@pytest.mark.parametrize("name", GYM)
def test_the_kept_reference_describes_the_gyms_model(name):
    """The reference's first CHECKED_POINTS check points (NUTS's draws moved by half an sd) carried to the
    sites: their stored log density (the model's, in z) is the Gym's model written out with scipy.stats plus
    the log-Jacobian of the transforms above, to the references' 1e-8 beyond a constant, over densities that
    differ by much more."""
    ref, posterior = reference(name), find(name)
    points = ref.check_points[:CHECKED_POINTS]
    values, log_jacobian = sites(ref, points)
    independent = np.array([DENSITIES[name](posterior.data(), {site: v[i] for site, v in values.items()})
                            for i in range(len(points))]) + log_jacobian
    difference = ref.check_log_density[:CHECKED_POINTS] - independent
    relative = np.abs(difference - difference.mean()) / np.maximum(1.0, np.abs(independent))
    assert np.max(relative) <= DENSITY_TOLERANCE and np.ptp(independent) > 1.0


@pytest.mark.parametrize("name", GYM)
def test_the_kept_reference_agrees_with_the_gyms_ground_truth(name):
    """Every mean within mean_z_bar(D) standard errors of the difference, every sd within its tolerance
    (gym_agreement), but UNRESOLVED's; no divergences. At the ESS recorded in
    benchmarks/results/published_nuts.json: 10,786 and 21,101 (both the bar's), whose tolerances these are."""
    ref = reference(name)
    order, theirs = gym_moments(name)
    agree = gym_agreement(site_moments(ref, order), theirs)
    assert agree.z.size == ref.dim - len(UNRESOLVED.get(name, ())) and ref.quality["divergences"] == 0
    assert agree.agrees, (np.max(np.abs(agree.z)), np.max(np.abs(agree.sd_deviation) / agree.sd_tolerance))


def test_the_gym_check_catches_a_moved_mean_and_a_scaled_sd():
    """The item-response reference against the Gym's ground truth with one mean moved by 6 standard errors of
    the difference, or one sd made 15 % larger (more than the 5 % bar and its ESS's tolerance)."""
    ref = reference(GYM[1])
    order, theirs = gym_moments(GYM[1])
    ours = site_moments(ref, order)
    se = np.sqrt(ours.mean_se[7] ** 2 + theirs.mean_se[7] ** 2)
    moved = Moments(theirs.mean + 6.0 * se * (np.arange(ref.dim) == 7), theirs.sd, theirs.mean_se)
    assert gym_agreement(ours, theirs).agrees and not gym_agreement(ours, moved).agrees
    scaled = Moments(theirs.mean, theirs.sd * np.where(np.arange(ref.dim) == 7, 1.15, 1.0), theirs.mean_se)
    assert not gym_agreement(ours, scaled).agrees


def tolerance(metric: str, value: float, floors: dict[str, float]) -> float:
    """How far a metric may read apart against two references that agree as gym_agreement requires: its noise
    floor, plus for a mean error (in posterior sds) the 5 % the sds may differ by, in proportion to it, and for
    a log sd ratio log 1.05."""
    spread = SD_BAR * value if metric.startswith("ref_mean_error") else np.log1p(SD_BAR)
    return floors[f"{metric}_floor"] + spread


@pytest.mark.slow
@pytest.mark.parametrize("name", GYM)
def test_a_runs_accuracy_metrics_read_the_same_against_the_gym_and_the_kept_reference(name):
    """A short pMCSA run (mean-field Gaussian, 300 iterations) on the model as a run builds it: its
    ref_mean_error_* and ref_log_sd_ratio_* over the real latents (all 501 of the item-response model; 100 of
    the 103 of the volatility model: the Gym publishes two on (-1, 1) and (0, ∞), and one is UNRESOLVED)
    against the Gym's ground truth and against the kept reference differ by less than :func:`tolerance` (the
    kept reference's noise floors, what they read between two references of its precision, the Gym's being
    finer, and the sds' 5 %), and give one verdict. Measured at a load of 9: 15.23 against 15.29 posterior sds
    (ref_mean_error_max) and 1.204 against 1.201 (ref_log_sd_ratio_max) on the volatility model, 9.48 against
    9.54 and 1.885 against 1.876 on the item-response model; 30-70 s each."""
    pytest.importorskip("numpyro")
    from mcsa_bench import get_registry, run
    from mcsa_bench.api import Approximation
    from mcsa_bench.assembly import assemble
    from mcsa_bench.references.accuracy import accuracy_verdict, moment_metrics, noise_floors

    ref, posterior = reference(name), find(name)
    parts = assemble(get_registry(), model=("numpyro", {"source": f"{posterior.model_file}:model",
                                                        "data": str(posterior.data_file)}),
                     family="meanfield_gaussian", estimator="pmcsa", n_samples=10)
    assert parts.model.latent_names() == ref.latent_names
    result = run(*parts.run_args(), n_iters=300, seed=0, eval_every=300)
    moments = Approximation(parts.family, result.params).moments()  # a Gaussian q: in closed form
    mean, sd = moments.mean, moments.sd
    order, theirs = gym_moments(name)
    index = np.concatenate([[i for i, latent in enumerate(ref.latent_names) if site_of(latent) == site]
                            for site in order])
    real = np.array([site_of(ref.latent_names[i]) not in TRANSFORMS for i in index])
    compared = index[real]
    against_ours = moment_metrics(mean[compared], sd[compared], ref.mean[compared], ref.sd[compared])
    against_gym = moment_metrics(mean[compared], sd[compared], theirs.mean[real], theirs.sd[real])
    restricted = replace(ref, latent_names=[ref.latent_names[i] for i in compared], mean=ref.mean[compared],
                         sd=ref.sd[compared], mean_mcse=ref.mean_mcse[compared], ess=ref.ess[compared],
                         rhat=ref.rhat[compared], cov=None, draws=None)
    floors = noise_floors(restricted, parts.family)
    print(name, {k: (round(against_gym[k], 4), round(against_ours[k], 4), round(floors[f"{k}_floor"], 4))
                 for k in against_ours})
    for metric, value in against_ours.items():
        assert abs(against_gym[metric] - value) <= tolerance(metric, value, floors), (metric, against_gym, against_ours)
    assert accuracy_verdict(against_gym, floors).level == accuracy_verdict(against_ours, floors).level
