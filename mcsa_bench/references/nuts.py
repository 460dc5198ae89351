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
    mass matrix, the seed."""

    chains: int = 4
    draws: int = 5000
    warmup: int = 1000
    target_accept: float = 0.8
    dense_mass: bool = False
    seed: int = 0


def sample(log_density: Callable, dim: int, settings: NutsSettings) -> tuple[np.ndarray, dict]:
    """(draws (chains, n, D), the run: NUTS's settings, divergences, seconds) of the density ``log_density``
    (one z (D,) -> log p, JAX), started at z = 0 with NumPyro's warm-up adapting the step size and mass."""
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import MCMC, NUTS

    kernel = NUTS(potential_fn=lambda z: -log_density(z), target_accept_prob=settings.target_accept,
                  dense_mass=settings.dense_mass)
    mcmc = MCMC(kernel, num_warmup=settings.warmup, num_samples=settings.draws, num_chains=settings.chains,
                chain_method="sequential", progress_bar=False)
    started = time.time()
    mcmc.run(jax.random.PRNGKey(settings.seed), init_params=jnp.zeros((settings.chains, dim)),
             extra_fields=("diverging",))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))
    run = {"sampler": "NumPyro NUTS", "numpyro": numpyro.__version__, "jax": jax.__version__,
           "chains": settings.chains, "warmup": settings.warmup, "draws_per_chain": settings.draws,
           "target_accept_prob": settings.target_accept, "dense_mass": settings.dense_mass, "seed": settings.seed,
           "divergences": int(np.sum(mcmc.get_extra_fields()["diverging"])),
           "seconds": round(time.time() - started, 1), "date": datetime.date.today().isoformat(),
           "machine": platform.machine(), "python": platform.python_version()}
    return draws, run


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
        problems.append(f"bulk ESS {reference.ess[worst]:,.0f} < {ESS_BAR:,.0f} for {names[worst]}{more} (try "
                        f"--draws {needed})")
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
