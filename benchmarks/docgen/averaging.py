"""How much noise iterate averaging removes from a constant-stepsize MCSA answer (docs/estimators.md).

Logistic regression on pima, the papers' setting (raw features, N = 10, Adam 0.01, T = 10^4), one
split. The reference is the posterior itself, from a long HMC run of this project's `hmc` kernel
(32 chains, diagonal mass from a preliminary fit, dual-averaging warm-up): its mean m and standard
deviation s per coordinate. The best mean-field Gaussian for the inclusive KL is q* = N(m, s²), so a
fitted q = N(μ, σ²) is judged by |μ - m|/s and σ/s - 1 (in posterior standard deviations), and by
its excess inclusive KL, KL(π‖q) - KL(π‖q*) = E_π[log q*(z) - log q(z)], estimated on the HMC draws.
Each run gives both answers: its last iterate, and the average of the iterates over the second
half (`optimizer.average_from=0.5`; averaging does not change the trajectory).

    python benchmarks/docgen/averaging.py [--seeds 5] [--json benchmarks/results/averaging.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.api import Approximation
from mcsa_bench.assembly import assemble

MODEL = ("logistic", {"dataset": "pima", "standardize": False, "split_seed": 0})
SCHEMES = ("pmcsa", "jsa", "msc", "msc_rb")
_LOG_2PI = float(np.log(2 * np.pi))


def fit(scheme: str, seed: int, n_iters: int, average_from: float | None):
    parts = assemble(get_registry(), model=MODEL, estimator=scheme, n_samples=10,
                     optimizer=("adam", {"lr": 0.01, "average_from": average_from}))
    return parts, run(*parts.run_args(), n_iters=n_iters, seed=seed, eval_every=n_iters)


def reference_posterior(chains: int, warmup: int, draws: int, seed: int) -> tuple[np.ndarray, dict]:
    """Draws (chains·draws, D) of the posterior by HMC, and convergence numbers (split R-hat, ESS)."""
    parts, preliminary = fit("pmcsa", seed=seed, n_iters=20_000, average_from=0.5)
    q = preliminary.q  # its scales make the diagonal mass matrix
    registry = get_registry()
    kernel = registry.build("kernel", "hmc", step_size=0.1, n_leapfrog=16, mass="diagonal", adapt_steps=warmup // 2,
                            adapt_rate=0)  # ε frozen after the warm-up, as when the reference was drawn
    rng = np.random.default_rng(seed)
    state = kernel.init(parts.model, q.sample(rng, chains))
    for _ in range(warmup):
        state = kernel.step(rng, state, parts.model, q).state
    samples = np.empty((draws, chains, parts.model.dim))
    acceptance = 0.0
    for t in range(draws):
        transition = kernel.step(rng, state, parts.model, q)
        state = transition.state
        samples[t] = state.z
        acceptance += transition.acceptance.mean() / draws
    return samples, {"acceptance": acceptance, "step_size": kernel.step_size, **convergence(samples)}


def convergence(samples: np.ndarray) -> dict[str, float]:
    """Worst split R-hat over coordinates, and the smallest batch-means effective sample size."""
    half = samples.shape[0] // 2
    split = np.concatenate([samples[:half], samples[half : 2 * half]], axis=1)  # (n, 2C, D)
    n = split.shape[0]
    within = split.var(axis=0, ddof=1).mean(axis=0)
    between = n * split.mean(axis=0).var(axis=0, ddof=1)
    r_hat = np.sqrt(((n - 1) / n * within + between / n) / within)
    pooled = samples.reshape(-1, samples.shape[2])
    batches = samples.reshape(50, -1, samples.shape[2]).mean(axis=1)  # 50 batches of consecutive draws
    ess = pooled.var(axis=0) / (batches.var(axis=0, ddof=1) / 50)
    return {"max_split_r_hat": float(r_hat.max()), "min_ess": float(ess.min())}


def judge(q: Approximation, draws: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> dict[str, float]:
    mu, sigma = q.family.mean_std(q.params)
    log_q_star = -0.5 * (((draws - mean) / sd) ** 2).sum(1) - np.log(sd).sum() - 0.5 * len(mean) * _LOG_2PI
    return {
        "max_mean_error_sd": float(np.max(np.abs(mu - mean) / sd)),
        "rms_mean_error_sd": float(np.sqrt(np.mean(((mu - mean) / sd) ** 2))),
        "max_scale_error": float(np.max(np.abs(sigma / sd - 1))),
        "excess_kl": float(np.mean(log_q_star - q.log_prob(draws))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--json", default="benchmarks/results/averaging.json")
    args = parser.parse_args()

    start = time.time()
    samples, quality = reference_posterior(args.chains, warmup=2000, draws=args.draws, seed=100)
    draws = samples.reshape(-1, samples.shape[2])
    mean, sd = draws.mean(axis=0), draws.std(axis=0)
    print(f"reference: HMC, {args.chains} chains x {args.draws} draws ({time.time() - start:.0f} s); "
          + ", ".join(f"{k} {v:.3g}" for k, v in quality.items()))
    rows = []
    for scheme in SCHEMES:
        for seed in range(args.seeds):
            _, result = fit(scheme, seed, n_iters=10_000, average_from=0.5)
            last = Approximation(result.q.family, result.iterate)
            rows.append({"scheme": scheme, "seed": seed, "last": judge(last, draws, mean, sd),
                         "averaged": judge(result.q, draws, mean, sd)})
    print(f"{'scheme':<8} {'answer':<9} {'max |μ-m|/s':>12} {'rms |μ-m|/s':>12} {'max |σ/s-1|':>12} {'excess KL':>10}")
    for scheme in SCHEMES:
        for answer in ("last", "averaged"):
            values = {k: np.mean([r[answer][k] for r in rows if r["scheme"] == scheme]) for k in rows[0]["last"]}
            print(f"{scheme:<8} {answer:<9} {values['max_mean_error_sd']:12.3f} {values['rms_mean_error_sd']:12.3f} "
                  f"{values['max_scale_error']:12.3f} {values['excess_kl']:10.4f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"reference": {"mean": mean.tolist(), "sd": sd.tolist(), **quality},
                                           "runs": rows}, indent=1))
    print(f"(means over {args.seeds} seeds; every run in {args.json})")


if __name__ == "__main__":
    main()
