"""Why the full-rank Gaussian family fails where mean-field converges (docs/estimators.md, "The
full-rank Gaussian family"): pMCSA (N = 10, Adam, T = 10^4) on logistic regression on all rows of
raw-feature pima and heart, and radon, scored against the shipped reference posteriors. Each line
changes one thing from the papers' setting and reports, over seeds, the final IMH acceptance, the
largest posterior-sd-scaled mean error, the largest |log sd ratio| and the excess inclusive KL.

    OMP_NUM_THREADS=1 python benchmarks/fullrank.py [--seeds 2] [--iters 10000]
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
    """The full-rank λ (of the family with ``options``) of the mean-field fit: its means, and its sds on L's diagonal."""
    parts, result = fit(model, "meanfield_gaussian", {}, 0.01, seed, n_iters)
    mean, sd = parts.family.marginal_moments(result.q.params)
    full_rank = get_registry().build("family", "fullrank_gaussian", dim=parts.model.dim, **options)
    return full_rank.moment_matched(mean, np.diag(sd**2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
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
