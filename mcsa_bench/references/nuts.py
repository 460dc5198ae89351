"""A reference posterior for any model with a JAX log density: NumPyro's NUTS on the log density of the
unconstrained latents, its draws judged by the shipped references' bar (bulk ESS ≥ 10,000 for every latent,
R-hat ≤ 1.01, no divergences: references.meets_bar), and a :class:`~mcsa_bench.references.PosteriorReference`
made of them (``mcsa-bench references make``, docs/references.md, "A reference for any model").

The shipped references (tools/generate_references.py) sample a second, independent implementation of each
model; this samples the model's own density, so its check points hold that density: it tells later runs
which model it was made for, not whether the model is right (check it against a known answer first).
Needs NumPyro (``pip install 'mcsa-bench[numpyro]'``).
"""

from __future__ import annotations

import datetime
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mcsa_bench.references import ESS_BAR, RHAT_BAR, PosteriorReference, meets_bar
from mcsa_bench.references.diagnostics import bulk_ess, mean_mcse, rhat

#: stored with the reference: thinned draws (the Monte Carlo metrics), check points (which model it describes)
STORED_DRAWS, CHECK_POINTS = 2000, 100
#: the covariance and the draws are stored up to this dimension (beyond it the file would be tens of MB)
MAX_STORED_DIM = 800


@dataclass(frozen=True)
class NutsSettings:
    """How NUTS is run: chains (sequential), draws and warm-up per chain, the target acceptance, a dense
    mass matrix, the seed, and ``pilot``: draws per chain of a diagonal-mass pilot run whose covariance
    becomes the main run's fixed dense mass matrix (0: none; the main run's warm-up then adapts only the
    step size)."""

    chains: int = 4
    draws: int = 5000
    warmup: int = 1000
    target_accept: float = 0.8
    dense_mass: bool = False
    seed: int = 0
    pilot: int = 0


def sample(log_density: Callable, dim: int, settings: NutsSettings) -> tuple[np.ndarray, dict]:
    """(draws (chains, n, D), the run: NUTS's settings, divergences, seconds) of the density ``log_density``
    (one z (D,) -> log p, JAX), started at z = 0 with NumPyro's warm-up adapting the step size and mass.

    With a pilot, a diagonal-mass run of ``settings.pilot`` draws per chain comes first (its warm-up is
    ``settings.warmup`` too), and the main run starts from its last draws with their pooled covariance as
    its inverse mass matrix. A posterior whose latents lie on a ridge (a sum identified, its parts not)
    needs a dense mass, and NumPyro's own dense adaptation estimates D x D from the 25 draws of its first
    window, which in hundreds of dimensions is singular and makes the trees as deep as they go (the Gym's
    item-response model, docs/references.md). Only the main run's draws and divergences count."""
    import jax
    import jax.numpy as jnp
    import numpyro

    started = time.time()
    key, init = jax.random.PRNGKey(settings.seed), jnp.zeros((settings.chains, dim))
    if settings.pilot:
        pilot, _ = _nuts(log_density, init, settings.warmup, settings.pilot, settings, jax.random.fold_in(key, 1))
        init = jnp.asarray(pilot[:, -1])
        mass = {"inverse_mass_matrix": jnp.asarray(np.cov(pilot.reshape(-1, dim), rowvar=False)),
                "adapt_mass_matrix": False, "dense_mass": True}
    else:
        mass = {"dense_mass": settings.dense_mass}
    draws, divergences = _nuts(log_density, init, settings.warmup, settings.draws, settings, key, **mass)
    run = {"sampler": "NumPyro NUTS", "numpyro": numpyro.__version__, "jax": jax.__version__,
           "chains": settings.chains, "warmup": settings.warmup, "draws_per_chain": settings.draws,
           "target_accept_prob": settings.target_accept, "dense_mass": settings.dense_mass or bool(settings.pilot),
           "pilot_draws_per_chain": settings.pilot, "seed": settings.seed, "divergences": divergences,
           "seconds": round(time.time() - started, 1), "date": datetime.date.today().isoformat(),
           "machine": platform.machine(), "python": platform.python_version()}
    return draws, run


def _nuts(log_density: Callable, init, warmup: int, draws: int, settings: NutsSettings, key,
          **mass) -> tuple[np.ndarray, int]:
    """NumPyro's NUTS, chains one after another from ``init`` (chains, D): (draws (chains, n, D), divergences)."""
    from numpyro.infer import MCMC, NUTS

    kernel = NUTS(potential_fn=lambda z: -log_density(z), target_accept_prob=settings.target_accept, **mass)
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=draws, num_chains=settings.chains,
                chain_method="sequential", progress_bar=False)
    mcmc.run(key, init_params=init, extra_fields=("diverging",))
    return np.asarray(mcmc.get_samples(group_by_chain=True)), int(np.sum(mcmc.get_extra_fields()["diverging"]))


def shortfall(reference: PosteriorReference) -> str | None:
    """Why a made reference misses the bar and what to try, in one sentence; None when it meets it."""
    if reference.meets_bar:
        return None
    quality, names = reference.quality, reference.latent_names
    problems = []
    if quality["divergences"]:
        problems.append(f"{quality['divergences']} divergent transitions (try --target-accept 0.95 or 0.99, or a "
                        "non-centred reparameterization of a hierarchy)")
    worst_rhat = int(np.argmax(reference.rhat))
    if not reference.rhat[worst_rhat] <= RHAT_BAR:
        problems.append(f"R-hat {reference.rhat[worst_rhat]:.3f} > {RHAT_BAR} for {names[worst_rhat]} (try a longer "
                        "warm-up, --warmup, or a reparameterization)")
    low = reference.ess < ESS_BAR
    if np.any(low):
        worst = int(np.argmin(reference.ess))
        more = f" and {int(low.sum()) - 1} more" if low.sum() > 1 else ""
        needed = int(np.ceil(reference.source["draws_per_chain"] * ESS_BAR / max(reference.ess[worst], 1.0) * 1.1))
        pilot = "" if reference.source.get("pilot_draws_per_chain") else (
            ", or for latents on a ridge --pilot 1000: a dense mass matrix from a pilot run")
        problems.append(f"bulk ESS {reference.ess[worst]:,.0f} < {ESS_BAR:,.0f} for {names[worst]}{more} (try "
                        f"--draws {needed}{pilot})")
    return "; ".join(problems)


def reference_of(draws: np.ndarray, run: dict, name: str, model: str, params: dict, latent_names: list[str],
                 log_joint: Callable[[np.ndarray], np.ndarray], seed: int = 0) -> PosteriorReference:
    """The reference of NUTS's ``draws`` (chains, n, D): moments, MCSEs, ESS and R-hat per latent, the quality
    against the bar, thinned draws and the covariance (up to MAX_STORED_DIM), and check points (draws moved by
    half a posterior sd) with the model's log density there (``log_joint``: batched, numpy)."""
    flat = draws.reshape(-1, draws.shape[-1])
    rng = np.random.default_rng(seed)
    picked = flat[rng.choice(len(flat), min(CHECK_POINTS, len(flat)), replace=False)]
    points = picked + 0.5 * flat.std(axis=0) * rng.standard_normal(picked.shape)
    r, e = rhat(draws), bulk_ess(draws)
    quality = {"rhat_max": float(np.max(r)), "ess_min": float(np.min(e)), "divergences": run["divergences"]}
    quality["meets_bar"] = meets_bar(quality)
    dim = flat.shape[1]
    thinned = flat[np.linspace(0, len(flat) - 1, min(STORED_DRAWS, len(flat))).astype(int)]
    small = dim <= MAX_STORED_DIM
    return PosteriorReference(
        name=name, model=model, params=params, latent_names=list(latent_names), mean=flat.mean(axis=0),
        sd=flat.std(axis=0, ddof=1), mean_mcse=mean_mcse(draws), ess=e, rhat=r, source=run, quality=quality,
        cov=np.cov(flat, rowvar=False) if small else None, draws=thinned.astype(np.float32) if small else None,
        check_points=points, check_log_density=np.asarray(log_joint(points)))
