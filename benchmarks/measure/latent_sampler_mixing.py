"""How fast the second samplers of tests/latent_samplers.py mix (docs/references.md, "Checks against
references no one here wrote"): what sets the burn-in of the checks in tests/test_references.py.

``gp``: per GP classification reference, elliptical slice chains of u | θ, y at ``--draws`` of its stored θ
draws, every chain from a prior draw. The θ-averaged moments of each window of 50 steps in the first half
against those of the second half, as |z| over the 100 coordinates (both standard errors from the spread over θ):
where the rms |z| has fallen to about 1, the burn-in's bias is below the noise of a θ average over that many
draws.

``sv``: chains of the stochastic volatility Gibbs sampler (θ and h_std | y) with elliptical slice updates of
h_std or conditional SMC updates of h, from the same start; the chains' mean of μ, atanh φ, log σ every few
sweeps beside the shipped reference's.

    python benchmarks/measure/latent_sampler_mixing.py gp [--draws 300 --steps 1000]
    python benchmarks/measure/latent_sampler_mixing.py sv [--chains 16 --sweeps 150]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.latent_samplers

import numpy as np  # noqa: E402

from mcsa_bench.plugins import get_registry  # noqa: E402
from mcsa_bench.references import load, shipped  # noqa: E402
from tests import latent_samplers as samplers  # noqa: E402

WINDOW = 50


def _window_z(window: samplers.LatentMoments, final: samplers.LatentMoments) -> tuple[np.ndarray, np.ndarray]:
    mean_z = np.abs(window.mean - final.mean) / np.hypot(window.mean_se, final.mean_se)
    sd, final_sd = np.sqrt(window.var), np.sqrt(final.var)
    sd_z = np.abs(sd - final_sd) / np.hypot(window.var_se / (2 * sd), final.var_se / (2 * final_sd))
    return mean_z, sd_z


def gp_burn_in(reference, draws: int, steps: int) -> None:
    model = get_registry().build("model", reference.model, **reference.params)
    n = model.num_train
    stored = np.asarray(reference.draws, dtype=float)
    chol = samplers.gp_cholesky(model, stored[np.linspace(0, len(stored) - 1, draws).astype(int), n:])
    none = np.empty((draws, 0))

    def log_likelihood(u: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return model._log_likelihood(np.einsum("bij,bj->bi", chol[rows], u), none[rows])[0]

    start = time.process_time()
    _, _, path = samplers.elliptical_slice_chains(log_likelihood, (draws, n), np.random.default_rng(1), 0, steps,
                                                  trace=n)
    print(f"{reference.name}: {time.process_time() - start:.1f} CPU s for {draws} chains x {steps} steps")
    half = path[steps // 2 :]
    final = samplers.pooled_moments(half.mean(axis=0), half.var(axis=0))
    for first in range(0, steps // 2, WINDOW):
        window = path[first : first + WINDOW]
        mean_z, sd_z = _window_z(samplers.pooled_moments(window.mean(axis=0), window.var(axis=0)), final)
        print(f"  steps {first}-{first + WINDOW}: |z| of means max {mean_z.max():.2f} rms "
              f"{np.sqrt(np.mean(mean_z**2)):.2f}, of sds max {sd_z.max():.2f} rms {np.sqrt(np.mean(sd_z**2)):.2f}")


def sv_mixing(reference, chains: int, sweeps: int) -> None:
    model = get_registry().build("model", reference.model, **reference.params)
    print(f"{reference.name}: reference mean of μ, atanh φ, log σ {np.round(reference.mean[:3], 3)}, "
          f"sd {np.round(reference.sd[:3], 3)}")
    for label, update in (("conditional SMC, 16 particles", samplers.sv_particle_update(model, 16)),
                          ("elliptical slice, 5 steps", samplers.sv_slice_update(model, 5))):
        trace: list = []
        start = time.process_time()
        samplers.stochastic_volatility_chains(model, np.random.default_rng(0), chains, 0, sweeps, update, trace)
        print(f"  {label}: {time.process_time() - start:.1f} CPU s for {chains} chains x {sweeps} sweeps")
        for sweep in range(0, sweeps, max(1, sweeps // 10)):
            theta = np.array(trace)[sweep, :, :3]
            print(f"    sweep {sweep}: mean {np.round(theta.mean(axis=0), 3)}, sd over chains "
                  f"{np.round(theta.std(axis=0), 3)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["gp", "sv"])
    parser.add_argument("--reference", nargs="*", help="reference files (.npz); default: the shipped ones")
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--sweeps", type=int, default=150)
    args = parser.parse_args()
    model = "gp_classification" if args.which == "gp" else "stochastic_volatility"
    references = [load(path) for path in args.reference] if args.reference else shipped(model)
    for reference in references:
        if args.which == "gp":
            gp_burn_in(reference, args.draws, args.steps)
        else:
            sv_mixing(reference, args.chains, args.sweeps)


if __name__ == "__main__":
    main()
