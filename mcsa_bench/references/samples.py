"""Accuracy measured from samples, for any family: q's draws and log q against draws of π (docs/references.md,
"Metrics from samples"). The definitions are those of "Beyond ELBOs" (Blessing et al., ICML 2024), with
w = γ/q the importance weight of the model's unnormalized density γ (log w = log p(x, z) − log q(z)):

- ``elbo`` = E_q[log w] and ``eubo`` = E_π[log w] (ELBO ≤ log Z ≤ EUBO: the gaps are KL(q‖π) and KL(π‖q));
- ``log_z_q`` = log mean_q w (importance sampling with q) and ``log_z_pi`` = −log mean_π 1/w (the
  reverse, harmonic-mean estimator over π's draws); with an exact log Z, ``log_z_q_error`` and
  ``log_z_pi_error`` = |estimate − log Z|;
- ``ess_q`` = (Σ w)² / (N Σ w²) over q's draws and ``ess_pi`` = 1 / (mean_π w · mean_π 1/w) over π's, both
  normalized to (0, 1];
- ``mmd``: the maximum mean discrepancy between q's and π's draws with a Gaussian kernel whose bandwidth
  is the median distance between the pooled draws (the unbiased estimate of MMD², its root, 0 below 0);
- ``sinkhorn``: on the first :data:`SINKHORN_DRAWS` draws of each, the Sinkhorn divergence
  S_ε(q, π) = W_ε(q, π) − ½ W_ε(q, q) − ½ W_ε(π, π), W_ε the squared Euclidean cost ⟨P_ε, C⟩ of the
  entropic plan (Genevay, Peyré & Cuturi 2018), ε 0.05 of the mean cost between q's and π's draws
  (OTT's default; at least the largest cost / 500), by POT (the optional extra ``[ot]``; without it the
  metric is left out, said once);
- ``mode_coverage``: the entropy of the shares of q's draws in each of the target's K modes
  (``Model.assign_modes``) over log K: 1 when q puts equal mass on every mode, 0 on one.

π's draws are the model's exact draws (``Model.sample``, seed 0) or a reference's stored draws; N =
:data:`SAMPLE_DRAWS` of each by default.
"""

from __future__ import annotations

import functools
import math
import os
import sys

import numpy as np

from mcsa_bench.api import Array, Model, Reference
from mcsa_bench.metrics import LOG_Z_BLOCK, log_mean_exp

#: N, the draws of q and of π each metric compares ("Beyond ELBOs"' 2,000)
SAMPLE_DRAWS = 2000
#: the Sinkhorn divergence's ε as a fraction of the mean cost between q's and π's draws (OTT's default ε)
SINKHORN_RELATIVE_EPSILON = 0.05
#: the draws of each the Sinkhorn divergence compares: at 2,000 its three problems cost 4-7 s per evaluation
#: here (2 cores, loaded), at 500 a sixteenth of that (docs/references.md, "Metrics from samples")
SINKHORN_DRAWS = 500
SINKHORN_ITERATIONS, SINKHORN_TOLERANCE = 1000, 1e-6
#: the largest cost over ε the Gibbs kernel exp(−C/ε) takes (e^-500 ≈ 1e-217, above double precision's
#: smallest normal number): heavy-tailed draws (a funnel's) raise ε to it rather than underflow to 0/0
SINKHORN_RANGE = 500.0
#: said once per process when POT is missing
SINKHORN_NOTE = "mcsa-bench: the sinkhorn metric is left out: it needs POT (pip install 'mcsa-bench[ot]')"
_noted = False


def target_draws(model: Model, reference: Reference | None, n: int = SAMPLE_DRAWS) -> Array | None:
    """π's draws for the sample-based metrics: n exact draws of the model (seed 0), else the first n of the
    reference's stored draws, else None (the metrics are then left out)."""
    exact = model.sample(np.random.default_rng(0), n)
    if exact is not None:
        return np.asarray(exact, dtype=float)
    if reference is not None and reference.draws is not None:
        return np.asarray(reference.draws[:n], dtype=float)
    return None


def blocked_log_joint(model: Model, z: Array) -> Array:
    """log p(x, z) in blocks of LOG_Z_BLOCK rows (a model's temporaries stay small, as importance_log_z's)."""
    return np.concatenate([model.log_joint(z[start:start + LOG_Z_BLOCK]) for start in range(0, len(z), LOG_Z_BLOCK)])


def _squared_distances(x: Array, y: Array) -> Array:
    return np.maximum(np.sum(x * x, axis=1)[:, None] + np.sum(y * y, axis=1)[None, :] - 2.0 * x @ y.T, 0.0)


def _upper(matrix: Array) -> Array:
    return matrix[np.triu_indices(matrix.shape[0], k=1)]




def log_weight_metrics(log_w_q: Array, log_w_pi: Array, log_z: float | None) -> dict[str, float]:
    """ELBO, EUBO, the two log Z estimates (and their errors when ``log_z`` is known) and the two ESS, from
    the log weights log γ − log q of q's draws and of π's draws."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        log_z_q = float(log_mean_exp(log_w_q))
        log_z_pi = float(-log_mean_exp(-log_w_pi))
        ess_q = float(np.exp(2.0 * log_mean_exp(log_w_q) - log_mean_exp(2.0 * log_w_q)))  # (Σw)²/(N Σw²)
        ess_pi = float(np.exp(log_z_pi - log_mean_exp(log_w_pi)))
        metrics = {"elbo": float(np.mean(log_w_q)), "eubo": float(np.mean(log_w_pi)), "log_z_q": log_z_q,
                   "log_z_pi": log_z_pi, "ess_q": ess_q, "ess_pi": ess_pi}
    if log_z is not None:
        metrics["log_z_q_error"] = abs(log_z_q - log_z)
        metrics["log_z_pi_error"] = abs(log_z_pi - log_z)
    return metrics


def entropic_mode_coverage(modes: Array, num_modes: int) -> float:
    """H(shares of the draws per mode) / log K."""
    shares = np.bincount(modes, minlength=num_modes) / modes.size
    shares = shares[shares > 0]
    return float(-np.sum(shares * np.log(shares)) / math.log(num_modes))


class SampleScore:
    """The sample-based metrics of one run's approximations against fixed draws of π (what depends on π's
    draws alone, their log density and distances, is computed once)."""

    def __init__(self, model: Model, draws: Array):
        self.model = model
        self.draws = np.asarray(draws, dtype=float)
        self.n = len(self.draws)
        self.log_p = blocked_log_joint(model, self.draws)
        self.log_z = model.log_normalizer()
        self._pi_squared_distances = _upper(_squared_distances(self.draws, self.draws))  # i < j

    @functools.cached_property
    def _sinkhorn(self) -> _Sinkhorn | None:
        """Built at the first metrics: POT imports scipy.stats through scikit-learn (a second of start-up)."""
        return _Sinkhorn.for_draws(self.draws)

    def __call__(self, q, rng: np.random.Generator) -> dict[str, float]:
        """The metrics of q (anything with ``sample_with_log_prob`` and ``log_prob``: draws and log q only)."""
        z_q, log_q = q.sample_with_log_prob(rng, self.n)
        with np.errstate(invalid="ignore", over="ignore"):
            log_w_q = blocked_log_joint(self.model, z_q) - log_q
            log_w_pi = self.log_p - q.log_prob(self.draws)
        metrics = log_weight_metrics(log_w_q, log_w_pi, self.log_z)
        metrics["mmd"] = self.mmd(z_q)
        if self._sinkhorn is not None:
            metrics["sinkhorn"] = self._sinkhorn(z_q)
        if self.model.num_modes is not None and self.model.num_modes > 1:
            metrics["mode_coverage"] = entropic_mode_coverage(self.model.assign_modes(z_q), self.model.num_modes)
        return metrics

    def mmd(self, z_q: Array) -> float:
        """MMD with the Gaussian kernel exp(−d²/2h²), h the median of the pooled draws' pairwise distances."""
        d2_qq, d2_qp = _upper(_squared_distances(z_q, z_q)), _squared_distances(z_q, self.draws).ravel()
        pooled = np.concatenate([d2_qq, d2_qp, self._pi_squared_distances])
        h2 = float(np.median(pooled))  # the median distance, squared (up to the mean of two middle values)
        if not h2 > 0:
            return float("nan")

        def mean_kernel(d2: Array) -> float:  # the mean of exp(−d²/2h²) over distinct pairs
            return float(np.mean(np.exp(d2 * (-0.5 / h2))))

        mmd2 = mean_kernel(d2_qq) + mean_kernel(self._pi_squared_distances) - 2.0 * mean_kernel(d2_qp)
        return math.sqrt(max(mmd2, 0.0))


#: POT's array backends, which it imports when it finds them installed: the metric hands it numpy arrays only
_POT_BACKENDS = ("PYTORCH", "JAX", "CUPY", "TENSORFLOW")


def _import_pot():
    """POT (``ot``), or None when it is not installed; imported without its other array backends (JAX's
    import alone costs seconds and sets environment variables) and leaving the environment as it was."""
    saved = dict(os.environ)
    os.environ.update({f"POT_BACKEND_DISABLE_{name}": "1" for name in _POT_BACKENDS})
    try:
        import ot
    except ImportError:
        return None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return ot


class _Sinkhorn:
    """S_ε(q, π) between the first SINKHORN_DRAWS draws of q and of π, by POT's Sinkhorn iterations, with ε =
    SINKHORN_RELATIVE_EPSILON × the mean cost between them (OTT's default ε), the same ε in all three terms."""

    def __init__(self, ot, draws: Array):
        self.ot, self.draws = ot, draws[:SINKHORN_DRAWS]
        self.weights = np.full(len(self.draws), 1.0 / len(self.draws))
        self.pi_cost = _squared_distances(self.draws, self.draws)

    @classmethod
    def for_draws(cls, draws: Array) -> _Sinkhorn | None:
        """The divergence against these draws, or None (said once) when POT is not installed."""
        global _noted
        ot = _import_pot()
        if ot is None:
            if not _noted:
                print(SINKHORN_NOTE, file=sys.stderr)
                _noted = True
            return None
        return cls(ot, draws)

    def _cost(self, cost: Array, epsilon: float) -> float:
        """⟨P_ε, C⟩ of the entropic plan between uniform weights (POT: 0/0 from an underflowed kernel is NaN)."""
        return float(self.ot.sinkhorn2(self.weights, self.weights, cost, epsilon, numItermax=SINKHORN_ITERATIONS,
                                       stopThr=SINKHORN_TOLERANCE, warn=False))

    def __call__(self, z_q: Array) -> float:
        z_q = z_q[:SINKHORN_DRAWS]
        cross = _squared_distances(z_q, self.draws)
        # and no smaller than the largest cost / SINKHORN_RANGE, so that exp(−C/ε) stays representable
        epsilon = max(SINKHORN_RELATIVE_EPSILON * float(cross.mean()), float(cross.max()) / SINKHORN_RANGE)
        if not epsilon > 0:
            return 0.0  # every draw at one point: q and π are the same point mass
        with np.errstate(all="ignore"):
            return (self._cost(cross, epsilon)
                    - 0.5 * (self._cost(_squared_distances(z_q, z_q), epsilon) + self._cost(self.pi_cost, epsilon)))
