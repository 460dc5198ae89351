"""Make the shipped reference posteriors with NumPyro's NUTS (the optional extra ``[reference]``).

    python -m mcsa_bench.tools.generate_references --list
    python -m mcsa_bench.tools.generate_references logistic--pima-raw [more names] \
        [--chains 4 --draws 2500 --target-accept 0.9]

Each model is written here a second time, generatively, in NumPyro, independently of the project's
numpy code; only the data come from the project's loaders. Before sampling, the two log densities
are compared at 100 points (the project's ``log_joint`` of the unconstrained z against NumPyro's
log density of the constrained sites plus the log-Jacobian of z → sites, from NumPyro's own
transforms): they must agree up to a constant to 1e-8, and the points and NumPyro's values are
stored with the reference, so CI checks the project's model against them without NumPyro.

NumPyro rather than PyMC or nutpie: its NUTS is Stan's algorithm (multinomial sampling, windowed
mass-matrix adaptation) jitted on the CPU, its log density of a model is one call
(``numpyro.infer.util.log_density``), and its reparameterization handlers let one program be sampled
non-centred while the reference describes the project's own (centred) coordinates.
Hierarchies are sampled non-centred (``LocScaleReparam``) where the funnel would cause divergences.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.distributions import transforms  # noqa: E402
from numpyro.infer import MCMC, NUTS, init_to_uniform  # noqa: E402
from numpyro.infer.reparam import LocScaleReparam  # noqa: E402
from numpyro.infer.util import log_density  # noqa: E402

from mcsa_bench.references import DENSITY_TOLERANCE, PosteriorReference, folder, meets_bar, package_of  # noqa: E402
from mcsa_bench.references.diagnostics import bulk_ess, mean_mcse, rhat  # noqa: E402

numpyro.enable_x64()
CHECK_POINTS = 100
#: rows of the GP references' seeded subsets (max_rows)
GP_ROWS = 100
#: thinned draws stored per reference: enough for Monte Carlo metrics, small enough to ship
STORED_DRAWS = 2000
#: the covariance and the draws are stored up to this dimension (the exact and Monte Carlo excess KL
#: need them; beyond it, D² floats and D × 2,000 draws would make a file of tens of MB)
MAX_STORED_DIM = 800
EXP = transforms.ExpTransform()
#: tanh x = 2 σ(2x) − 1, composed from NumPyro's transforms (it has no tanh of its own)
TANH = transforms.ComposeTransform([transforms.AffineTransform(0.0, 2.0), transforms.SigmoidTransform(),
                                    transforms.AffineTransform(-1.0, 2.0)])


@dataclass
class Site:
    """One NumPyro site in the project's latent vector: ``size`` coordinates (None: a scalar),
    unconstrained by ``transform`` (z = transform⁻¹(site); None: the identity)."""

    name: str
    size: int | None = None
    transform: transforms.Transform | None = None

    @property
    def width(self) -> int:
        return 1 if self.size is None else self.size


@dataclass
class Spec:
    """One reference: the project's model (registry name and constructor params), the NumPyro program
    sampled (with ``reparam`` for NUTS), and the project's latent layout as NumPyro sites."""

    name: str
    model: str
    params: dict
    program: Callable[[], None]
    layout: list[Site]
    reparam: dict = field(default_factory=dict)
    density_reparam: bool = False  # the project's z is the reparameterized program's (non-centred)
    #: the same posterior in other coordinates, for NUTS only (``program`` stays the density check's):
    #: its deterministic sites carry the layout's values; ``sampled_as`` says what it changes, by site
    sampled: Callable[[], None] | None = None
    sampled_as: dict = field(default_factory=dict)
    dense_mass: bool = False
    #: the model's exact posterior (mean, covariance) from the project's model, which replace NUTS's
    #: moments in the reference (NUTS's are kept in its source, ``nuts``, as their independent check)
    exact_moments: Callable[[object], tuple[np.ndarray, np.ndarray]] | None = None
    target_accept: float = 0.8
    #: chains start uniformly within this distance of 0 in each unconstrained coordinate (NumPyro's and Stan's
    #: default 2; smaller where a start far out strands a chain: an ARMA model's explosive recursion)
    init_radius: float = 2.0
    draws: int = 2500
    warmup: int = 1000
    #: settings tried in turn (each overrides the fields above) until a reference meets the quality bar
    attempts: list[dict] = field(default_factory=lambda: [{}])


def _z_to_sites(layout: list[Site], z: jnp.ndarray) -> tuple[dict, jnp.ndarray]:
    """(constrained site values, log|det ∂sites/∂z|) of one latent vector."""
    sites, log_jacobian, start = {}, 0.0, 0
    for site in layout:
        raw = z[start] if site.size is None else z[start:start + site.size]
        start += site.width
        value = raw if site.transform is None else site.transform(raw)
        if site.transform is not None:
            log_jacobian = log_jacobian + jnp.sum(site.transform.log_abs_det_jacobian(raw, value))
        sites[site.name] = value
    return sites, log_jacobian


def _sites_to_z(layout: list[Site], samples: dict) -> np.ndarray:
    """(S, D) latent vectors of S posterior draws of the sites."""
    columns = []
    for site in layout:
        value = samples[site.name] if site.transform is None else site.transform.inv(samples[site.name])
        columns.append(np.asarray(value).reshape(len(value), site.width))
    return np.concatenate(columns, axis=1)


def numpyro_log_density(spec: Spec, z: np.ndarray) -> np.ndarray:
    """NumPyro's log density of the sites z maps to, plus the log-Jacobian: the project's log joint up to a constant."""
    program = numpyro.handlers.reparam(spec.program, spec.reparam) if spec.density_reparam else spec.program

    def one(point):
        sites, log_jacobian = _z_to_sites(spec.layout, point)
        return log_density(program, (), {}, sites)[0] + log_jacobian

    return np.asarray(jax.jit(jax.vmap(one))(jnp.asarray(z)))


def check_density(spec: Spec, project_model, points: np.ndarray) -> tuple[np.ndarray, float]:
    """(NumPyro's densities at the points, the largest discrepancy to the project's up to a constant)."""
    theirs = numpyro_log_density(spec, points)
    difference = project_model.log_joint(points) - theirs
    discrepancy = np.max(np.abs(difference - difference.mean()) / np.maximum(1.0, np.abs(theirs)))
    return theirs, float(discrepancy)


def _check_points(draws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Posterior draws moved by half a posterior sd in random directions: typical and atypical points."""
    picked = draws[rng.choice(len(draws), CHECK_POINTS, replace=False)]
    return picked + 0.5 * draws.std(axis=0) * rng.standard_normal(picked.shape)


def chain_draws(spec: Spec, samples: dict) -> np.ndarray:
    """(chains, n, D) draws in the spec's (the project's) coordinates from NUTS's samples grouped by chain."""
    chains, n = next(iter(samples.values())).shape[:2]
    flat = {name: value.reshape(chains * n, *value.shape[2:]) for name, value in samples.items()}
    return _sites_to_z(spec.layout, flat).reshape(chains, n, -1)


def _sampled_program(spec: Spec) -> Callable[[], None]:
    if spec.sampled is not None:
        return spec.sampled
    return numpyro.handlers.reparam(spec.program, spec.reparam) if spec.reparam else spec.program


def sampled_coordinates_check(spec: Spec, points: int = 20, seed: int = 0) -> float:
    """The largest discrepancy, beyond a constant and relative, between the log density NUTS samples
    (``spec.sampled``, in its unconstrained coordinates w) and the project's posterior carried over:
    log p(z(w)) + log|det ∂z/∂w|, with ``program``'s density at z and the Jacobian by automatic
    differentiation, at standard-normal points w. 0 when the spec samples the project's coordinates."""
    if spec.sampled is None:
        return 0.0
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model, potential_energy

    init = initialize_model(jax.random.PRNGKey(seed), spec.sampled)
    flat, unravel = ravel_pytree(init.param_info.z)

    def to_z(w):
        values = init.postprocess_fn(unravel(w))
        return jnp.concatenate([jnp.atleast_1d(site.transform.inv(values[site.name]) if site.transform
                                               else values[site.name]) for site in spec.layout])

    ws = jnp.asarray(np.random.default_rng(seed).standard_normal((points, flat.size)))
    theirs = np.array([-potential_energy(spec.sampled, (), {}, unravel(w)) for w in ws])
    log_jacobians = np.array([jnp.linalg.slogdet(jax.jacfwd(to_z)(w))[1] for w in ws])
    difference = theirs - (numpyro_log_density(spec, np.array([to_z(w) for w in ws])) + log_jacobians)
    return float(np.max(np.abs(difference - difference.mean()) / np.maximum(1.0, np.abs(theirs))))


def sample(spec: Spec, chains: int, seed: int) -> tuple[dict, dict]:
    """(NUTS's samples of every site grouped by chain, its diagnostics and settings)."""
    carried = sampled_coordinates_check(spec)
    if not carried <= DENSITY_TOLERANCE:
        raise SystemExit(f"{spec.name}: the density NUTS would sample is not the project's posterior in other "
                         f"coordinates (discrepancy {carried:.2e} beyond a constant; tolerance {DENSITY_TOLERANCE})")
    program = _sampled_program(spec)
    kernel = NUTS(program, target_accept_prob=spec.target_accept, dense_mass=spec.dense_mass,
                  init_strategy=init_to_uniform(radius=spec.init_radius))
    mcmc = MCMC(kernel, num_warmup=spec.warmup, num_samples=spec.draws, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    started = time.time()
    mcmc.run(jax.random.PRNGKey(seed), extra_fields=("diverging", "num_steps"))
    extra = mcmc.get_extra_fields()
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    settings = {"sampler": "NumPyro NUTS", "numpyro": numpyro.__version__, "jax": jax.__version__,
                "chains": chains, "warmup": spec.warmup, "draws_per_chain": spec.draws,
                "target_accept_prob": spec.target_accept, "dense_mass": spec.dense_mass,
                **({"init_radius": spec.init_radius} if spec.init_radius != 2.0 else {}),
                # by site: LocScaleReparam's centredness (0: non-centred) or what ``sampled`` changes
                "reparameterized": {**{site: reparam.centered for site, reparam in spec.reparam.items()},
                                    **spec.sampled_as},
                "seed": seed,
                "seconds": round(time.time() - started, 1),
                "mean_leapfrog_steps": float(np.mean(extra["num_steps"])),
                "date": datetime.date.today().isoformat(), "machine": platform.machine(),
                "python": platform.python_version()}
    return samples, {"divergences": int(np.sum(extra["diverging"])), **settings}


def build_reference(
    spec: Spec, project_model, draws: np.ndarray, run: dict, rng: np.random.Generator
) -> PosteriorReference:
    flat = draws.reshape(-1, draws.shape[-1])
    points = _check_points(flat, rng)
    theirs, discrepancy = check_density(spec, project_model, points)
    if not discrepancy <= DENSITY_TOLERANCE:
        raise SystemExit(f"{spec.name}: the project's log joint and NumPyro's differ by {discrepancy:.2e} "
                         f"(relative, beyond a constant) at the check points; tolerance {DENSITY_TOLERANCE}")
    r, e = rhat(draws), bulk_ess(draws)
    quality = {"rhat_max": float(np.max(r)), "ess_min": float(np.min(e)), "divergences": run["divergences"],
               "density_discrepancy": discrepancy, "exact_moments": spec.exact_moments is not None}
    quality["meets_bar"] = meets_bar(quality)
    thinned = flat[np.linspace(0, len(flat) - 1, min(STORED_DRAWS, len(flat))).astype(int)]
    dim = flat.shape[1]
    mean, sd, mcse = flat.mean(axis=0), flat.std(axis=0, ddof=1), mean_mcse(draws)
    cov = np.cov(flat, rowvar=False) if dim <= MAX_STORED_DIM else None
    if spec.exact_moments is not None:
        run = {**run, "nuts": {"mean": mean.tolist(), "sd": sd.tolist(), "mean_mcse": mcse.tolist()}}
        mean, cov = spec.exact_moments(project_model)
        sd, mcse = np.sqrt(np.diag(cov)), np.zeros(dim)
    return PosteriorReference(
        name=spec.name, model=spec.model, params=spec.params, latent_names=list(project_model.latent_names()),
        mean=mean, sd=sd, mean_mcse=mcse, ess=e, rhat=r, source=run, quality=quality, cov=cov,
        draws=thinned.astype(np.float32) if dim <= MAX_STORED_DIM else None, check_points=points,
        check_log_density=theirs)


# --------------------------------------------------------------------------------------------
# The models, written generatively in NumPyro
# --------------------------------------------------------------------------------------------


def _plate_normal(name: str, loc, scale, size: int):
    return numpyro.sample(name, dist.Normal(loc, scale).expand([size]).to_event(1))


def _training_arrays(dataset: str, task: str, standardize: bool, max_rows: int | None) -> tuple:
    """(x, y) of all rows of a data set (or its seeded subset of ``max_rows``), as the project's loader gives them."""
    from mcsa_bench.datasets import load_supervised
    data = load_supervised(dataset, task=task, test_fraction=0.0, standardize_features=standardize, max_rows=max_rows)
    return jnp.asarray(data.x_train), jnp.asarray(data.y_train)


def _with_subset(params: dict, max_rows: int | None) -> str:
    """Adds ``max_rows`` and the split seed that draws the subset to ``params``; the reference name's suffix."""
    if max_rows is None:
        return ""
    params.update(max_rows=max_rows, split_seed=0)
    return f"-{max_rows}rows"


#: NUTS's draws per chain where 4 × 4,000 fell short of the bar: bulk ESS then pima raw 8,528, heart raw
#: 7,882, heart standardized 6,755, german raw 5,993 (the others 21,443-27,483), scaled to ≥ 12,000
LOGISTIC_DRAWS = {("pima", False, "hierarchical"): 6000, ("heart", False, "hierarchical"): 6500,
                  ("heart", True, "hierarchical"): 7500, ("german_numeric", False, "hierarchical"): 8500,
                  ("sonar", False, "hierarchical"): 13000}


def logistic_spec(dataset: str, standardize: bool, prior: str = "hierarchical", max_rows: int | None = None) -> Spec:
    """σ_β, σ_α ~ N⁺(0, 1), β ~ N(0, σ_β²), α ~ N(0, σ_α²), y ~ Bernoulli(logit⁻¹(xβ + α)), or with
    ``prior="gaussian"`` (β, α) ~ N(0, I)."""
    x, y = _training_arrays(dataset, "classification", standardize, max_rows)
    d = x.shape[1]

    def program():
        if prior == "gaussian":
            beta, alpha = _plate_normal("beta", 0.0, 1.0, d), numpyro.sample("alpha", dist.Normal(0.0, 1.0))
        else:
            sigma_beta = numpyro.sample("sigma_beta", dist.HalfNormal(1.0))
            sigma_alpha = numpyro.sample("sigma_alpha", dist.HalfNormal(1.0))
            beta = _plate_normal("beta", 0.0, sigma_beta, d)
            alpha = numpyro.sample("alpha", dist.Normal(0.0, sigma_alpha))
        numpyro.sample("y", dist.Bernoulli(logits=x @ beta + alpha).to_event(1), obs=y)

    layout = [Site("beta", d), Site("alpha")]
    params = {"dataset": dataset, "standardize": standardize, "prior": prior, "test_fraction": 0.0}
    variant = ({True: "std", False: "raw"}[standardize] + ("-gaussian-prior" if prior == "gaussian" else "")
               + _with_subset(params, max_rows))
    draws = LOGISTIC_DRAWS.get((dataset, standardize, prior), 4000)
    if prior == "gaussian":
        return Spec(f"logistic--{dataset}-{variant}", "logistic", params, program, layout, dense_mass=True,
                    draws=draws)
    layout += [Site("sigma_beta", None, EXP), Site("sigma_alpha", None, EXP)]
    # α alone informs σ_α, and where α's posterior reaches 0 the pair is a funnel: sampled centred, NUTS
    # diverges in its neck (heart, raw features: 438 of 16,000 transitions, all at log σ_α ≈ −3; 115 at
    # target acceptance 0.99), and non-centred α, which raw features correlate with β, has a curved
    # ridge instead (48 at 0.95); half-centred, 5 of 4,000 at 0.95, 1 of 16,000 at 0.99. Tried in turn
    # until one meets the bar: centred, a smaller step, α non-centred, α half-centred
    # (LocScaleReparam(0.5)) with smaller steps.
    half = {"alpha": LocScaleReparam(0.5)}
    attempts = [{}, {"target_accept": 0.99}, {"target_accept": 0.95, "reparam": {"alpha": LocScaleReparam(0)}},
                {"target_accept": 0.99, "reparam": half}, {"target_accept": 0.995, "reparam": half}]
    if (dataset, standardize) == ("sonar", False):
        attempts = sonar_attempts()
    return Spec(f"logistic--{dataset}-{variant}", "logistic", params, program, layout, dense_mass=True,
                attempts=attempts, draws=draws)


def sonar_attempts() -> list[dict]:
    """Sonar's raw features (D = 63) make both of the hierarchy's funnels bite, where the attempts above fail:
    centred, 1,461 divergences in 4 × 5,000 at target acceptance 0.8, 206 at 0.99; α half-centred, 8 in
    4 × 14,000 at 0.99 and 5 at 0.995; α and β half-centred, 2 in 4 × 3,000. α non-centred and β
    half-centred: none in 4 × 3,000 at 0.99, bulk ESS 0.26 a draw (log σ_α the lowest), hence 13,000 a chain;
    in 4 × 13,000, 2 at 0.99 and none at 0.995 (bulk ESS 17,072, 173 s)."""
    both = {"alpha": LocScaleReparam(0), "beta": LocScaleReparam(0.5)}
    return [{"target_accept": 0.99, "reparam": both}, {"target_accept": 0.995, "reparam": both}]


def radon_specs() -> list[Spec]:
    """σ_a1, σ_a2, σ_y ~ Gamma(1, rate 0.02), μ ~ N(0, I_2), a_jc ~ N(μ_j, σ_aj²), y ~ N(a1_c + a2_c x, σ_y²);
    sampled non-centred in a1, a2; one reference per parameterization of the project's model (a_jc or
    η_jc = (a_jc − μ_j)/σ_aj). Their moments are the exact ones (``Radon.exact_posterior``); NUTS gives
    the draws, the check points and the independent check of those moments."""
    from mcsa_bench.builtin.models.radon import Radon
    data = Radon()
    y, x, county, k = jnp.asarray(data.y), jnp.asarray(data.x), jnp.asarray(data.county), data.num_counties

    def program():
        sigma_a1 = numpyro.sample("sigma_a1", dist.Gamma(1.0, 0.02))
        sigma_a2 = numpyro.sample("sigma_a2", dist.Gamma(1.0, 0.02))
        sigma_y = numpyro.sample("sigma_y", dist.Gamma(1.0, 0.02))
        mu_a1 = numpyro.sample("mu_a1", dist.Normal(0.0, 1.0))
        mu_a2 = numpyro.sample("mu_a2", dist.Normal(0.0, 1.0))
        a1 = _plate_normal("a1", mu_a1, sigma_a1, k)
        a2 = _plate_normal("a2", mu_a2, sigma_a2, k)
        numpyro.sample("y", dist.Normal(a1[county] + a2[county] * x, sigma_y).to_event(1), obs=y)

    scales = [Site("mu_a1"), Site("mu_a2"), Site("sigma_a1", None, EXP), Site("sigma_a2", None, EXP),
              Site("sigma_y", None, EXP)]
    reparam = {"a1": LocScaleReparam(0), "a2": LocScaleReparam(0)}
    # Both effects non-centred: at target acceptance 0.9 and 4 × 4,000 draws, 12 divergences and a bulk
    # ESS of 1,667 (log σ_a2); at 0.95 and 4 × 10,000, 34; at 0.99 and 4 × 10,000 none, ESS 3,657.
    common = dict(program=program, reparam=reparam, draws=15000, target_accept=0.99,
                  exact_moments=lambda model: model.exact_posterior())
    return [
        Spec("radon--radon", "radon", {"dataset": "radon"}, layout=[Site("a1", k), Site("a2", k), *scales],
             **common),
        Spec("radon--radon-noncentred", "radon", {"dataset": "radon", "parameterization": "noncentred"},
             layout=[Site("a1_decentered", k), Site("a2_decentered", k), *scales], density_reparam=True, **common),
    ]


def _matern52(x: jnp.ndarray, log_ell: jnp.ndarray) -> jnp.ndarray:
    """Matérn-5/2 ARD correlation matrix: (1 + √5 r + 5r²/3) e^{−√5 r}, r the ℓ-scaled distance."""
    scaled = x / jnp.exp(log_ell)
    sq = jnp.sum((scaled[:, None, :] - scaled[None, :, :]) ** 2, axis=-1)
    s = jnp.sqrt(5.0 * jnp.where(sq > 0.0, sq, 1.0))
    s = jnp.where(sq > 0.0, s, 0.0)
    return (1.0 + s + s * s / 3.0) * jnp.exp(-s)


def _gp_cholesky(x: jnp.ndarray, log_amp, log_noise, log_ell) -> jnp.ndarray:
    """chol(a² M + (b² + 1e-6) I)."""
    cov = jnp.exp(2.0 * log_amp) * _matern52(x, log_ell) + (jnp.exp(2.0 * log_noise) + 1e-6) * jnp.eye(x.shape[0])
    return jnp.linalg.cholesky(cov)


def _gp_latent(x: jnp.ndarray, log_amp, log_noise, log_ell) -> jnp.ndarray:
    """f = chol(a² M + (b² + 1e-6) I) u with u ~ N(0, I) (whitened)."""
    return _gp_cholesky(x, log_amp, log_noise, log_ell) @ _plate_normal("u", 0.0, 1.0, x.shape[0])


#: NUTS's budget per GP classification data set (100 rows): log α mixes slowest on each
GP_CLASSIFICATION_NUTS = {
    # 4 × 2,500 draws at target acceptance 0.8: 2 divergences, bulk ESS 2,965; 4 × 3,500 at 0.9: none,
    # 2,849; 4 × 6,000 at 0.9: 1 divergence, 5,472; 4 × 5,500 at 0.95: none, 9,796 (53 min); 4 × 6,800 at
    # 0.95 (seed 1): 1 divergence, 10,119 (79 min); 4 × 6,800 at 0.97 (seed 1): none, 11,813 (77 min).
    "sonar": {"draws": 6800, "target_accept": 0.97},
    # 4 × 3,500 draws at target acceptance 0.9: 14 divergences, bulk ESS 727 (475 s); 4 × 20,000 at
    # 0.97: none, 36,204 (2.5 h on the shared machine; a third of the draws would have met the bar).
    "ionosphere": {"draws": 20000, "target_accept": 0.97},
    # 4 × 3,500 draws at target acceptance 0.9: no divergences, bulk ESS 5,923 (34 min); 4 × 7,100 (seed 1):
    # none, 14,331 (40 min).
    "breast": {"draws": 7100, "target_accept": 0.9},
}


def gp_classification_spec(dataset: str, standardize: bool, max_rows: int | None = None) -> Spec:
    """log α, log σ, log ℓ_j ~ N(0, 1); f = chol(α² M + (σ² + δ) I) u; y ~ Bernoulli(logit⁻¹ f)."""
    x, y = _training_arrays(dataset, "classification", standardize, max_rows)
    n, d = x.shape

    def program():
        log_alpha = numpyro.sample("log_alpha", dist.Normal(0.0, 1.0))
        log_sigma = numpyro.sample("log_sigma", dist.Normal(0.0, 1.0))
        log_ell = _plate_normal("log_ell", 0.0, 1.0, d)
        f = _gp_latent(x, log_alpha, log_sigma, log_ell)
        numpyro.sample("y", dist.Bernoulli(logits=f).to_event(1), obs=y)

    layout = [Site("u", n), Site("log_alpha"), Site("log_sigma"), Site("log_ell", d)]
    params = {"dataset": dataset, "standardize": standardize, "test_fraction": 0.0}
    suffix = _with_subset(params, max_rows)
    return Spec(f"gp_classification--{dataset}{suffix}", "gp_classification", params, program, layout,
                **GP_CLASSIFICATION_NUTS[dataset])


def gp_regression_spec(dataset: str, max_rows: int | None = None) -> Spec:
    """log σ_f, log ε, log σ_y ~ N(0, 4²), log ℓ_j ~ N(0, 0.2²), ν ~ Gamma(4, scale 10);
    f = chol(σ_f² M + (ε² + δ) I) u; y ~ StudentT(ν, f, σ_y) on standardized targets.
    Sampled conditionally whitened instead of in u (see ``conditionally_whitened``)."""
    x, y = _training_arrays(dataset, "regression", True, max_rows)
    n, d = x.shape

    def hyperparameters():
        log_sigma_f = numpyro.sample("log_sigma_f", dist.Normal(0.0, 4.0))
        log_epsilon = numpyro.sample("log_epsilon", dist.Normal(0.0, 4.0))
        log_ell = _plate_normal("log_ell", 0.0, 0.2, d)
        log_sigma_y = numpyro.sample("log_sigma_y", dist.Normal(0.0, 4.0))
        nu = numpyro.sample("nu", dist.Gamma(4.0, 0.1))
        return log_sigma_f, log_epsilon, log_ell, log_sigma_y, nu

    def program():
        log_sigma_f, log_epsilon, log_ell, log_sigma_y, nu = hyperparameters()
        f = _gp_latent(x, log_sigma_f, log_epsilon, log_ell)
        numpyro.sample("y", dist.StudentT(nu, f, jnp.exp(log_sigma_y)).to_event(1), obs=y)

    def conditionally_whitened():
        """The posterior of (z, θ) with u = Lᵀ(K + s²I)⁻¹y + s R⁻ᵀz, K = LLᵀ, RRᵀ = LᵀL + s²I, s = σ_y:
        f = Lu is then N(m, Σ), the GP's posterior under a Gaussian likelihood of scale s, for z ~ N(0, I)
        (Σ = s²L(LᵀL + s²I)⁻¹Lᵀ by the push-through identity). The density is N(u(z); 0, I) sⁿ/|R| times
        the likelihood and p(θ). The posterior puts σ_y and ε near 0 (f interpolates y) with long left
        tails; there u's conditional width shrinks with σ_y/√λ_k along K's eigenvectors, a funnel NUTS
        cannot enter in u (boston: R-hat 1.37, bulk ESS 10, 512 divergences), and the data-centred
        residuals (y − f)/σ_y, width √λ_k/σ_y, are the mirrored funnel (concrete: 153 divergences at
        target acceptance 0.95). z's width is O(1) along every eigenvector at every σ_y."""
        log_sigma_f, log_epsilon, log_ell, log_sigma_y, nu = hyperparameters()
        z = numpyro.sample("z", dist.ImproperUniform(dist.constraints.real, (), (n,)))
        s = jnp.exp(log_sigma_y)
        chol = _gp_cholesky(x, log_sigma_f, log_epsilon, log_ell)
        noisy = jnp.linalg.cholesky(chol @ chol.T + s**2 * jnp.eye(n))
        r = jnp.linalg.cholesky(chol.T @ chol + s**2 * jnp.eye(n))
        mean_u = chol.T @ jax.scipy.linalg.cho_solve((noisy, True), y)
        u = numpyro.deterministic("u", mean_u + s * jax.scipy.linalg.solve_triangular(r.T, z, lower=False))
        numpyro.factor(
            "u_prior", jnp.sum(dist.Normal(0.0, 1.0).log_prob(u)) + n * log_sigma_y - jnp.sum(jnp.log(jnp.diag(r)))
        )
        numpyro.sample("y", dist.StudentT(nu, chol @ u, s).to_event(1), obs=y)

    layout = [Site("u", n), Site("log_sigma_f"), Site("log_epsilon"), Site("log_ell", d), Site("log_sigma_y"),
              Site("nu", None, EXP)]
    params = {"dataset": dataset, "test_fraction": 0.0}
    suffix = _with_subset(params, max_rows)
    # 4 × 2,000 draws at target acceptance 0.95, about 18 leapfrog steps per iteration: no divergences, bulk
    # ESS 5,595 (boston, 666 s) and 6,666 (concrete, 615 s); scaled for bulk ESS ≥ 12,000: 4 × 4,300 and
    # 4 × 3,600 (seed 1), about 23 leapfrog steps, no divergences, bulk ESS 15,340 (log σ_y) and 13,372
    # (1,410 s and 1,058 s on one core of the shared machine).
    return Spec(
        f"gp_regression--{dataset}{suffix}",
        "gp_regression",
        params,
        program,
        layout,
        draws={"boston": 4300, "concrete": 3600}.get(dataset, 4300),
        target_accept=0.95,
        sampled=conditionally_whitened,
        sampled_as={
            "u": "conditionally whitened: f ~ N(m, Sigma), the GP posterior under Gaussian noise of scale sigma_y"
        },
    )


def stochastic_volatility_spec(max_rows: int | None = None) -> Spec:
    """μ ~ Cauchy(0, 10), φ ~ U(−1, 1), σ ~ Cauchy⁺(0, 5), h_std ~ N(0, I); h_1 = μ + σ h_std,1/√(1−φ²),
    h_t = μ + φ(h_{t−1} − μ) + σ h_std,t; y_t ~ N(0, e^{h_t})."""
    from mcsa_bench.builtin.models.stochastic_volatility import StochasticVolatility
    returns = jnp.asarray(StochasticVolatility(max_rows=max_rows).returns)
    t_len = returns.size

    def program():
        mu = numpyro.sample("mu", dist.Cauchy(0.0, 10.0))
        phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
        sigma = numpyro.sample("sigma", dist.HalfCauchy(5.0))
        h_std = _plate_normal("h_std", 0.0, 1.0, t_len)
        first = mu + sigma * h_std[0] / jnp.sqrt(1.0 - phi**2)

        def step(previous, innovation):
            current = mu + phi * (previous - mu) + sigma * innovation
            return current, current

        _, rest = jax.lax.scan(step, first, h_std[1:])
        h = jnp.concatenate([first[None], rest])
        numpyro.sample("y", dist.Normal(0.0, jnp.exp(h / 2.0)).to_event(1), obs=returns)

    layout = [Site("mu"), Site("phi", None, TANH), Site("sigma", None, EXP), Site("h_std", t_len)]
    params = {"dataset": "sp500"} if max_rows is None else {"dataset": "sp500", "max_rows": max_rows}
    suffix = "" if max_rows is None else f"-{max_rows}returns"
    # At target acceptance 0.9 and 4 × 2,500 draws: 3 divergences, bulk ESS 2,855 (σ); at 0.95 and
    # 4 × 5,000, none and 6,105 (15 min); at 0.95 and 4 × 9,800 (seed 1), 3 and 11,844; at 0.99, none and
    # 13,292 (29 min, 255 leapfrog steps per iteration).
    return Spec(f"stochastic_volatility--sp500{suffix}", "stochastic_volatility", params, program, layout,
                draws=9800, attempts=[{"target_accept": 0.95}, {"target_accept": 0.99}])


def eight_schools_specs() -> list[Spec]:
    """μ ~ N(0, 5²), τ ~ Cauchy⁺(0, 5), θ_j ~ N(μ, τ²), y_j ~ N(θ_j, σ_j²); sampled non-centred,
    one reference per parameterization of the extras' model (θ or η = (θ − μ)/τ)."""
    y = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])

    def program():
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
        theta = _plate_normal("theta", mu, tau, 8)
        numpyro.sample("y", dist.Normal(theta, sigma).to_event(1), obs=y)

    reparam = {"theta": LocScaleReparam(0)}
    # 4 × 5,000 draws: bulk ESS 9,962
    common = dict(program=program, reparam=reparam, target_accept=0.95, draws=6500)
    return [
        Spec("eight_schools--centered", "eight_schools", {"centered": True},
             layout=[Site("mu"), Site("tau", None, EXP), Site("theta", 8)], **common),
        Spec("eight_schools--noncentered", "eight_schools", {"centered": False},
             layout=[Site("mu"), Site("tau", None, EXP), Site("theta_decentered", 8)], density_reparam=True, **common),
    ]


def gaussian_target_spec(dim: int = 10, seed: int = 0) -> Spec:
    """The Gaussian target N(m, Σ) with the project's m and Σ. Not shipped: its reference is exact
    (``Model.reference()``); tests/tools/test_generate_references.py samples it to test this script's NUTS
    against it."""
    from mcsa_bench.builtin.models.gaussian import GaussianTarget

    target = GaussianTarget(dim=dim, seed=seed)
    mean, cov = jnp.asarray(target.mean), jnp.asarray(target.cov)

    def program():
        numpyro.sample("z", dist.MultivariateNormal(mean, cov))

    return Spec(f"gaussian--dim{dim}-seed{seed}", "gaussian", {"dim": dim, "seed": seed}, program,
                layout=[Site("z", dim)], draws=2000, warmup=500)


def specs() -> dict[str, Callable[[], list[Spec]]]:
    """Every shipped reference by name, built lazily (building one loads its data)."""
    table: dict[str, Callable[[], list[Spec]]] = {}
    for dataset in ("pima", "heart", "german_numeric"):
        for standardize in (False, True):
            variant = "std" if standardize else "raw"
            table[f"logistic--{dataset}-{variant}"] = (lambda d=dataset, s=standardize: [logistic_spec(d, s)])
    table["logistic--german_numeric-std-gaussian-prior"] = lambda: [logistic_spec("german_numeric", True, "gaussian")]
    table["logistic--sonar-raw"] = lambda: [logistic_spec("sonar", False)]
    table["radon"] = radon_specs
    # 100 rows (seeded subset, split_seed 0) take minutes to an hour here; the full data sets, named
    # without a suffix and not shipped, days (benchmarks/measure/reference_nuts_cost.py, docs/references.md)
    for dataset, standardize in (("sonar", False), ("ionosphere", False), ("breast", True)):
        for rows, suffix in ((GP_ROWS, f"-{GP_ROWS}rows"), (None, "")):
            table[f"gp_classification--{dataset}{suffix}"] = (
                lambda d=dataset, s=standardize, r=rows: [gp_classification_spec(d, s, r)])
    for dataset in ("boston", "concrete"):
        for rows, suffix in ((GP_ROWS, f"-{GP_ROWS}rows"), (None, "")):
            table[f"gp_regression--{dataset}{suffix}"] = lambda d=dataset, r=rows: [gp_regression_spec(d, r)]
    table["stochastic_volatility--sp500"] = lambda: [stochastic_volatility_spec()]
    table["eight_schools"] = eight_schools_specs
    return table


#: the GP references on full data sets: listed, made only when named (days of NUTS here)
FULL_DATA_GP = {f"{model}--{dataset}" for model, dataset in (
    ("gp_classification", "sonar"), ("gp_classification", "ionosphere"), ("gp_classification", "breast"),
    ("gp_regression", "boston"), ("gp_regression", "concrete"))}


def project_model(spec: Spec):
    """The project's model of the spec, built through the registry like a run builds it."""
    from mcsa_bench.plugins import get_registry
    return get_registry().build("model", spec.model, **spec.params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mcsa_bench.tools.generate_references", description=__doc__.split("\n")[0]
    )
    parser.add_argument("names", nargs="*", help="references to make (default: all that are shipped)")
    parser.add_argument("--list", action="store_true", help="list the references this script makes")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, help="draws per chain (default: each reference's own)")
    parser.add_argument("--warmup", type=int, help="warm-up iterations per chain (default: each reference's own)")
    parser.add_argument("--target-accept", type=float, help="NUTS's target acceptance (default: each reference's own)")
    parser.add_argument("--out", help="directory for the .npz files (default: where the package that defines the "
                        "model ships its references: the core's references/data/, a plugin's references/)")
    args = parser.parse_args(argv)
    table = specs()
    if args.list:
        print("\n".join(table))
        return 0
    if args.draws is not None and args.draws * args.chains < CHECK_POINTS:
        print(f"--draws {args.draws} × --chains {args.chains} is under the {CHECK_POINTS} draws the density check "
              "takes its points from", file=sys.stderr)
        return 2
    unknown = [name for name in args.names if name not in table]
    if unknown:
        print(f"unknown reference(s) {', '.join(unknown)}; known: {', '.join(table)}", file=sys.stderr)
        return 2
    for name in args.names or [name for name in table if name not in FULL_DATA_GP]:
        group = table[name]()
        for spec in group:
            spec.draws, spec.warmup = args.draws or spec.draws, args.warmup or spec.warmup
            spec.target_accept = args.target_accept or spec.target_accept
        for references in attempt_references(group, args.chains, args.seed):
            for reference in references:
                print(f"{reference.name}: D={reference.dim} {reference.quality} in {reference.source['seconds']} s "
                      f"with {reference.source['target_accept_prob']=} {reference.source['reparameterized']=}",
                      flush=True)
            if all(reference.quality["meets_bar"] for reference in references):
                break
        for spec, reference in zip(group, references):
            out = args.out or folder(package_of(type(project_model(spec))))
            if out is None:
                raise SystemExit(f"{spec.name}: its model is not defined in a package, which could ship it; use --out")
            os.makedirs(out, exist_ok=True)
            reference.save(os.path.join(out, f"{reference.name}.npz"))
    return 0


def attempt_references(group: list[Spec], chains: int, seed: int):
    """The group's references from each of its first spec's attempts in turn (one NUTS run each)."""
    for attempt in group[0].attempts:
        for spec in group:
            for key, value in attempt.items():
                setattr(spec, key, value)
        samples, run = sample(group[0], chains, seed)
        rng = np.random.default_rng(seed)
        yield [build_reference(spec, project_model(spec), chain_draws(spec, samples), run, rng) for spec in group]


if __name__ == "__main__":
    sys.exit(main())
