"""Why the full-rank Gaussian family fails where mean-field converges (docs/estimators.md, "The
full-rank Gaussian family"): pMCSA (N = 10, Adam, T = 10^4) on logistic regression on all rows of
raw-feature pima and heart, and radon, scored against the shipped reference posteriors. Each line
changes one thing from the papers' setting and reports, over seeds, the final IMH acceptance, the
largest posterior-sd-scaled mean error, the largest |log sd ratio| and the excess inclusive KL.

With ``--from-optimum``: does the optimum itself stay put? ELBO (N = 1) and pMCSA (N = 10) start at
the moment-matched full-rank optimum and take T Adam steps (relative off-diagonals with stepsize 0.01
and 0.001, fan_in with 0.01); it reports the excess KL after 500 steps and at T, and how far the
off-diagonal multipliers M (L = diag(L_ii)(I + M)) moved, as the root mean square of M − M* against
that of M* itself.

    OMP_NUM_THREADS=1 python benchmarks/docgen/fullrank.py [--seeds 2] [--iters 10000]
    OMP_NUM_THREADS=1 python benchmarks/docgen/fullrank.py --from-optimum [--iters 3000]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import assemble

MODELS = {
    "pima raw": ("logistic", {"dataset": "pima", "standardize": False, "test_fraction": 0.0}),
    "heart raw": ("logistic", {"dataset": "heart", "standardize": False, "test_fraction": 0.0}),
    "pima std": ("logistic", {"dataset": "pima", "standardize": True, "test_fraction": 0.0}),
    "radon": ("radon", {}),
}
#: --from-optimum's models: two of D = 162 and 175 where every method fails, one of D = 26 where it does not
FROM_OPTIMUM = {
    "GP sonar": ("gp_classification", {"dataset": "sonar", "standardize": False, "test_fraction": 0.0,
                                       "max_rows": 100, "split_seed": 0}),
    "radon": MODELS["radon"],
    "german std": ("logistic", {"dataset": "german_numeric", "standardize": True, "test_fraction": 0.0}),
}
#: label -> (family, family options, Adam stepsize, warm start from the mean-field fit)
ABSOLUTE = {"offdiagonal": "absolute"}
VARIANTS = {
    "mean-field (control)": ("meanfield_gaussian", {}, 0.01, False),
    "full-rank, papers' setting": ("fullrank_gaussian", ABSOLUTE, 0.01, False),
    "full-rank, init_std 0.1": ("fullrank_gaussian", {**ABSOLUTE, "init_std": 0.1}, 0.01, False),
    "full-rank, scale=exp": ("fullrank_gaussian", {**ABSOLUTE, "scale": "exp"}, 0.01, False),
    "full-rank, Adam 0.001": ("fullrank_gaussian", ABSOLUTE, 0.001, False),
    "full-rank, warm start from mean-field": ("fullrank_gaussian", ABSOLUTE, 0.01, True),
    "full-rank, relative off-diagonals": ("fullrank_gaussian", {"offdiagonal": "relative"}, 0.01, False),
    "full-rank, relative, Adam 0.001": ("fullrank_gaussian", {"offdiagonal": "relative"}, 0.001, False),
    "full-rank, relative, warm start from mean-field": ("fullrank_gaussian", {"offdiagonal": "relative"}, 0.01, True),
}


def fit(model, family, options, lr, seed, n_iters, init_params=None):
    parts = assemble(get_registry(), model=model, family=(family, options), estimator="pmcsa", n_samples=10,
                     optimizer=("adam", {"lr": lr}))
    result = run(*parts.run_args(), n_iters=n_iters, seed=seed, eval_every=n_iters // 10, init_params=init_params,
                 reference=parts.reference)
    return parts, result


def warm_start(model, options, seed, n_iters):
    """The full-rank λ (of the family with ``options``) of the mean-field fit: its means, and its sds on
    L's diagonal."""
    parts, result = fit(model, "meanfield_gaussian", {}, 0.01, seed, n_iters)
    moments = result.q.moments()
    mean, sd = moments.mean, moments.sd
    full_rank = get_registry().build("family", "fullrank_gaussian", dim=parts.model.dim, **options)
    return full_rank.moment_matched(mean, np.diag(sd**2))


def drift_from_optimum(n_iters: int) -> None:
    print(f"load {os.getloadavg()[0]:.1f}; Adam, T = {n_iters}, seed 0, from the moment-matched optimum")
    print(f"{'model':11} {'method':6} {'form':9} {'lr':>6} {'KL @500':>9} {'KL @T':>9} {'rms(M-M*) @T':>13} "
          f"{'rms(M*)':>8}")
    for label, model in FROM_OPTIMUM.items():
        for method, n_samples in (("elbo", 1), ("pmcsa", 10)):
            for form, lr in (("relative", 0.01), ("relative", 0.001), ("fan_in", 0.01)):
                parts = assemble(get_registry(), model=model, family=("fullrank_gaussian", {"offdiagonal": form}),
                                 estimator=method, n_samples=n_samples, optimizer=("adam", {"lr": lr}))
                reference = parts.reference
                start = parts.family.moment_matched(reference.mean, reference.cov)
                below = np.tril_indices(parts.model.dim, -1)
                optimum = parts.family.prepare(start).multipliers[below]
                result = run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=500, init_params=start,
                             reference=reference)
                moved = parts.family.prepare(result.q.params).multipliers[below] - optimum
                kl = [h["excess_inclusive_kl"] for h in result.history]
                print(
                    f"{label:11} {method:6} {form:9} {lr:6g} {kl[1]:9.3g} {kl[-1]:9.3g} "
                    f"{np.sqrt(np.mean(moved**2)):13.3f} "
                    f"{np.sqrt(np.mean(optimum**2)):8.3f}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--from-optimum", action="store_true")
    args = parser.parse_args()
    if args.from_optimum:
        drift_from_optimum(args.iters)
        return
    print(f"load {os.getloadavg()[0]:.1f}; pMCSA, N = 10, T = {args.iters}, {args.seeds} seeds; "
          "acceptance over the last tenth; errors of the final q (medians over seeds)")
    print(f"{'model':10} {'variant':38} {'acceptance':>10} {'mean err':>9} {'|log sd|':>9} {'excess KL':>10}")
    for label, model in MODELS.items():
        if label not in args.models:
            continue
        for variant, (family, options, lr, warm) in VARIANTS.items():
            if variant not in args.variants:
                continue
            rows = []
            for seed in range(args.seeds):
                start = warm_start(model, options, seed, args.iters) if warm else None
                _, result = fit(model, family, options, lr, seed, args.iters, start)
                last = result.history[-1]
                rows.append([last["acceptance_rate"], last["ref_mean_error_max"], last["ref_log_sd_ratio_max"],
                             last.get("excess_inclusive_kl", np.nan)])
            acc, err, sd, kl = np.median(rows, axis=0)
            print(f"{label:10} {variant:38} {acc:10.3f} {err:9.3g} {sd:9.3g} {kl:10.4g}", flush=True)


if __name__ == "__main__":
    main()
