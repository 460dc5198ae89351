"""Run health: did a finished run's fit fail? (docs/estimators.md, "Run health")

A run can end FINISHED with a useless q: the papers' schemes with a full-rank Gaussian on raw-feature
logistic regression end 15–330 posterior sd off, their IMH acceptance near 0 from the first hundred
iterations on. Three criteria, each measured on the shipped settings (benchmarks in the doc):

- **acceptance collapse**: the kernel's mean acceptance over the evaluations of the run's second half
  is below :data:`ACCEPTANCE_FLOOR` in a run of at least :data:`MIN_ITERATIONS` (diverged full-rank
  fits: ≤ 0.003; converged fits of the shipped settings: ≥ 0.04, JSA on heart and radon the lowest);
- **scales without bound**: some coordinate of q's scale grew more than :data:`SCALE_GROWTH`-fold
  from its initial value;
- **a non-finite metric** at the last evaluation (Pareto k̂, NaN by definition for degenerate
  weights, excepted).

A run that meets any of them is tagged ``mcsa_bench.health=diverged`` with the reason in
``mcsa_bench.health_reason`` and logs ``diverged`` = 1; otherwise ``mcsa_bench.health=ok`` and 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mcsa_bench.api import Array, VariationalFamily

ACCEPTANCE_FLOOR = 0.01
#: the acceptance criterion judges runs of at least this many iterations: a smoke test's 20 iterations
#: from q's initial N(0, I) accept almost nothing yet
MIN_ITERATIONS = 1000
SCALE_GROWTH = 1e3
HEALTH_TAG, REASON_TAG, DIVERGED_METRIC = "mcsa_bench.health", "mcsa_bench.health_reason", "diverged"


@dataclass(frozen=True)
class Health:
    reason: str  # empty when the run is healthy

    @property
    def diverged(self) -> bool:
        return bool(self.reason)

    def tags(self) -> dict[str, str]:
        return {HEALTH_TAG: "diverged" if self.diverged else "ok", REASON_TAG: self.reason}


def _acceptance_collapse(history: list[dict], n_iters: int) -> str:
    if n_iters < MIN_ITERATIONS:
        return ""
    late = [row["acceptance_rate"] for row in history
            if "acceptance_rate" in row and row["iteration"] > n_iters / 2 and math.isfinite(row["acceptance_rate"])]
    if late and np.mean(late) < ACCEPTANCE_FLOOR:
        return (f"mean acceptance {np.mean(late):.2g} over the second half of the run (below {ACCEPTANCE_FLOOR}): "
                "the chains hardly move")
    return ""


def _scale_growth(family: VariationalFamily, initial: Array, final: Array) -> str:
    start, end = family.moments(initial), family.moments(final)
    if start is None or end is None:
        return ""
    growth = end.scale / start.scale
    worst = int(np.argmax(growth))
    if not growth[worst] <= SCALE_GROWTH:
        return f"q's scale of coordinate {worst} grew {growth[worst]:.3g}-fold (limit {SCALE_GROWTH:g})"
    return ""


def _non_finite(history: list[dict]) -> str:
    last = history[-1] if history else {}
    bad = sorted(k for k, v in last.items() if not k.endswith("_khat") and not math.isfinite(v))
    return f"non-finite {', '.join(bad)} at iteration {last['iteration']}" if bad else ""


def assess(history: list[dict], n_iters: int, family: VariationalFamily, initial: Array, final: Array) -> Health:
    """The health of a run from its evaluations and its initial and final λ."""
    reasons = [_acceptance_collapse(history, n_iters), _scale_growth(family, initial, final), _non_finite(history)]
    return Health("; ".join(r for r in reasons if r))
