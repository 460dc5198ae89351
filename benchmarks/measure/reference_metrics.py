"""What the posterior-accuracy metrics cost next to an evaluation and to the iterations between two
(docs/references.md).

Per model with a shipped reference and per family: the CPU time of one scoring of q against the
reference (mcsa_bench.references.accuracy.ReferenceScore; the first call also finds the family's
optimum: moment matching for Gaussian families, a likelihood fit to the reference's draws for the
Student-t), of the model's own evaluation at the papers' setting (with its train/test split: test
LPD, or log Z), and of a run of eval_every iterations of pMCSA at that setting (with its evaluations at
the start and the end). One BLAS thread.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/reference_metrics.py
"""

from __future__ import annotations

import os
import time

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.api import Approximation
from mcsa_bench.assembly import assemble
from mcsa_bench.references.accuracy import ReferenceScore

#: (label, the all-rows model the reference describes, the papers' split setting, eval_every)
PAIRS = (
    ("logistic pima raw", ("logistic", {"dataset": "pima", "standardize": False, "test_fraction": 0.0}),
     ("logistic", {"dataset": "pima", "standardize": False}), 100),
    ("radon", ("radon", {}), ("radon", {}), 200),
)
FAMILIES = ("meanfield_gaussian", "fullrank_gaussian", "meanfield_student_t")
REPEATS = 20


def cpu(call) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def main() -> None:
    registry = get_registry()
    print(f"load {os.getloadavg()[0]:.1f}; CPU seconds per call (median of {REPEATS})")
    print(f"{'model':18} {'family':20} {'first score':>11} {'score':>9} {'evaluate':>9} {'run':>10} "
          f"{'score/evaluate':>14} {'score/run':>17}")
    for label, model_spec, split_spec, eval_every in PAIRS:
        for family in FAMILIES:
            parts = assemble(registry, model=model_spec, family=family, estimator="pmcsa", n_samples=10)
            split = assemble(registry, model=split_spec, family=family, estimator="pmcsa", n_samples=10)
            assert parts.reference is not None, label
            result = run(*parts.run_args(), n_iters=200, seed=0, eval_every=200)
            q = Approximation(parts.family, result.params)
            score = ReferenceScore(parts.reference, parts.family)
            rng = np.random.default_rng(0)
            first = cpu(lambda: score(q, rng))
            scoring = np.median([cpu(lambda: score(q, rng)) for _ in range(REPEATS)])
            evaluate = np.median([cpu(lambda: split.model.evaluate(q, rng)) for _ in range(5)])
            iterations = cpu(lambda: run(*split.run_args(), n_iters=eval_every, seed=1, eval_every=eval_every))
            print(f"{label:18} {family:20} {first:11.4f} {scoring:9.5f} {evaluate:9.4f} {iterations:10.4f} "
                  f"{scoring / evaluate:14.3f} {scoring / (evaluate + iterations):17.3f}")


if __name__ == "__main__":
    main()
