"""`mcsa-bench references make`'s NUTS on the shipped posteriors of posteriordb and Inference Gym, against their
published answers (docs/references.md, "Posteriors no one here wrote").

Per posterior, what ``references make model=posteriordb model.posterior=<name> [--dense-mass ...]`` does
(mcsa_bench/jobs/make_reference.py: the model as a run builds it, NumPyro's NUTS from z = 0 on its
unconstrained latents, chains one after another, held to the references' bar: bulk ESS ≥ 10,000 for every
latent, R-hat ≤ 1.01, no divergences), then its draws carried to the sites' supports and compared with
posteriordb's draws or Inference Gym's ground truth (``mcsa_bench.references.external.agreement``: means
within 3 standard errors of the difference, both Monte Carlo standard errors combined, or the Bonferroni bound
of many coordinates where larger; sds within 5 %). Writes one row per posterior; with ``--keep DIR``, the
reference NUTS made too (``DIR/<name>.npz``, whether or not it meets the bar: the Gym's targets' are
committed in benchmarks/results/published_nuts/ and checked against the Gym's ground truth by
tests/references/test_gym_references.py). ``--draws``, ``--warmup``, ``--target-accept`` override SETTINGS.

    python benchmarks/docgen/published_nuts.py [names] [--out benchmarks/results/published_nuts.json]
        [--keep benchmarks/results/published_nuts] [--draws N] [--warmup N] [--target-accept A]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

from mcsa_bench.jobs.make_reference import model_of  # noqa: E402
from mcsa_bench.references import PosteriorReference  # noqa: E402
from mcsa_bench.references.external import Published, agreement, published  # noqa: E402
from mcsa_bench.references.nuts import NutsSettings, reference_of, sample, shortfall  # noqa: E402

DEFAULTS = {"warmup": 1000, "draws": 3000, "target_accept": 0.8, "dense_mass": False, "pilot": 0}
#: NUTS's settings per posterior (over DEFAULTS, `references make`'s options), chosen from trial runs of
#: 4 × 1,000 draws (mean leapfrog steps per iteration, bulk ESS per draw of the slowest latent) for a bulk ESS
#: of about 12,000 or more
SETTINGS: dict[str, dict] = {
    "arma-arma11": {"draws": 4000},
    "diamonds-diamonds": {"dense_mass": True, "draws": 3000},  # dense: 14 steps, 1.26 (4 x 10,000: 1.12)
    "earnings-logearn_interaction": {"dense_mass": True, "draws": 6000},  # diagonal: 149 steps; dense: 25, 0.55
    # diagonal: 172 steps and 4 divergences; dense at 0.95: 41 steps, 0.17 (rho)
    "gp_pois_regr-gp_pois_regr": {"dense_mass": True, "target_accept": 0.95, "warmup": 2000, "draws": 18000},
    "hmm_example-hmm_example": {"dense_mass": True, "draws": 4000},  # diagonal: 26 steps, 0.39; dense: 5.9, 0.86
    "kidiq-kidscore_interaction": {"dense_mass": True, "draws": 3000},  # diagonal: 76 steps; dense: 5.5, 1.06
    # x not centred: diagonal 509 steps; dense 160, 0.26 (sigma); dense after 3,000 warm-up iterations: 83, 0.31
    "kilpisjarvi_mod-kilpisjarvi": {"dense_mass": True, "warmup": 3000, "draws": 12000},
    "low_dim_gauss_mix-low_dim_gauss_mix": {"draws": 3000},  # diagonal: 6.4 steps, 1.07
    "mesquite-logmesquite": {"dense_mass": True, "draws": 3000},  # diagonal: 25 steps, 0.39; dense: 6.6, 1.08
    "nes1976-nes": {"dense_mass": True, "draws": 2500},  # diagonal: 43 steps, 0.48; dense: 6.7, 1.72
    "sblrc-blr": {"dense_mass": True, "warmup": 3000, "draws": 10000},  # dense: 14 steps, 0.17 (sigma)
    # the Gym's centred form: 4 x 300 after 300 of warm-up, bulk ESS per draw 0.056 (white_noise_shock_scale),
    # 0.94 CPU ms per iteration; 4 x 25,000: 0.042 (4,153)
    "stochastic_volatility_sp500_small": {"draws": 65000},
    # diagonal: 4 x 2,500 after 500, 0.040 (mean_student_ability, on the ridge mean + ability_i) at 26 CPU ms per
    # iteration, so the bar wants about 4 x 62,000, 1.8 CPU hours; dense: 4 x 500 had not finished in 4 CPU min;
    # the covariance of a diagonal pilot of 2 x 500 as the dense mass: 62 steps, 0.76 (2 x 500 after 200)
    "synthetic_item_response_theory": {"warmup": 500, "pilot": 1000, "draws": 5000},
}


def overrides(posterior: Published) -> list[str]:
    """The model as `references make` and a run take it."""
    if posterior.collection == "posteriordb":
        return ["model=posteriordb", f"model.posterior={posterior.name}"]
    return ["model=numpyro", f"model.source={posterior.model_file}:model", f"model.data={posterior.data_file}"]


def check(posterior: Published, **settings) -> dict:
    """`references make`'s NUTS on one posterior with its settings (``settings`` override them): the bar's
    diagnostics, the agreement with the published answer, and what it cost."""
    return check_and_reference(posterior, **settings)[0]


def check_and_reference(posterior: Published, **settings) -> tuple[dict, PosteriorReference]:
    """:func:`check`'s row and the reference NUTS made."""
    settings = {**DEFAULTS, **SETTINGS.get(posterior.name, {}), **settings}
    nuts = NutsSettings(draws=settings["draws"], warmup=settings["warmup"], target_accept=settings["target_accept"],
                        dense_mass=settings["dense_mass"], pilot=settings["pilot"])
    parts = model_of(overrides(posterior))
    model, name = parts.model, parts.sources["model"].name
    started, cpu = time.perf_counter(), time.process_time()
    draws, run = sample(parts.jax_twin("model").log_joint, model.dim, nuts)
    reference = reference_of(draws, run, posterior.name, name, parts.model_identity(), model.latent_names(),
                             model.log_joint)
    sites = model.constrained(draws.reshape(-1, model.dim))
    agree = agreement({site: values.reshape(*draws.shape[:2], *values.shape[1:]) for site, values in sites.items()},
                      posterior.moments())
    quality = reference.quality
    return {
        "posterior": posterior.name, "collection": posterior.collection, "dim": model.dim,
        "chains": nuts.chains, "warmup": nuts.warmup, "draws_per_chain": nuts.draws,
        "target_accept": nuts.target_accept, "dense_mass": nuts.dense_mass, "pilot": nuts.pilot, "seed": nuts.seed,
        "divergences": quality["divergences"], "min_bulk_ess": quality["ess_min"],
        "min_bulk_ess_latent": model.latent_names()[int(np.argmin(reference.ess))],
        "max_rhat": quality["rhat_max"], "meets_bar": quality["meets_bar"], "shortfall": shortfall(reference),
        "max_abs_mean_z": agree.max_abs_z, "mean_z_bar": agree.z_bar,
        "max_abs_sd_ratio_minus_1": agree.max_sd_deviation, "worst": agree.worst(), "agrees": agree.agrees,
        "passed": quality["meets_bar"] and agree.agrees,
        "nuts_seconds": run["seconds"], "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1), "load": os.getloadavg()[0],
        "numpyro": run["numpyro"], "jax": run["jax"], "date": run["date"],
    }, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="posteriors to check (default: all shipped)")
    parser.add_argument("--out", default="benchmarks/results/published_nuts.json")
    parser.add_argument("--keep", help="a folder to store each reference in, as <name>.npz")
    parser.add_argument("--draws", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--target-accept", type=float)
    args = parser.parse_args()
    chosen = [p for p in published() if not args.names or p.name in args.names]
    given = {key: value for key, value in (("draws", args.draws), ("warmup", args.warmup),
                                           ("target_accept", args.target_accept)) if value is not None}
    for posterior in chosen:
        row, reference = check_and_reference(posterior, **given)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            reference.save(os.path.join(args.keep, f"{posterior.name}.npz"))
        print(f"{row['posterior']:38} D={row['dim']:3} {row['chains']}x{row['draws_per_chain']} "
              f"(warm-up {row['warmup']}) ESS {row['min_bulk_ess']:8.0f} R-hat {row['max_rhat']:.4f} "
              f"div {row['divergences']:3} |z| {row['max_abs_mean_z']:.2f}/{row['mean_z_bar']:.2f} "
              f"sd {row['max_abs_sd_ratio_minus_1']:.3f} {row['seconds']:6.1f} s "
              f"{'pass' if row['passed'] else 'FAIL'}", flush=True)
        kept = json.loads(open(args.out).read())["rows"] if os.path.exists(args.out) else []
        rows = sorted([r for r in kept if r["posterior"] != row["posterior"]] + [row], key=lambda r: r["posterior"])
        with open(args.out, "w") as handle:  # after each posterior: a stopped run keeps what it measured
            json.dump({"what": __doc__.split("\n")[0], "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
