"""Hierarchical logistic regression (docs/methods.md §6; the parallel-state paper §4.2, App. C.1).

    σ_β, σ_α ~ N⁺(0, 1),   β ~ N(0, σ_β² I_d),   α ~ N(0, σ_α²),   y_i ~ BernoulliLogit(x_iᵀβ + α)

Unconstrained latents z = (β_1..β_d, α, log σ_β, log σ_α), D = d + 3; the log-Jacobian of
σ = exp(log σ) is part of the log joint.

``prior="gaussian"`` replaces the hierarchy by fixed unit scales, (β, α) ~ N(0, I_{d+1}), D = d + 1:
the Gaussian-prior logistic regression of Inference Gym's ``GermanCreditNumericLogisticRegression``,
whose published moments check this project's reference posterior (docs/references.md).
"""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.builtin.models.work import WorkArrays
from mcsa_bench.datasets import load_supervised
from mcsa_bench.metrics import TEST_ACCURACY, TEST_LPD, log_mean_exp

_HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
_LOG_2 = float(np.log(2.0))
#: draws of q for the test predictive density and accuracy (docs/methods.md §7: S >= 1000)
PREDICTIVE_DRAWS = 1000


#: factors per product in :func:`_sum_log_sigmoid`: each is at most 2, so a block's product stays below 2^1000
_PRODUCT_BLOCK = 1000
#: the priors of the coefficients (β, α): a hierarchy with half-normal scales, or N(0, 1) each
PRIORS = ("hierarchical", "gaussian")


def _signed_design(x: Array, y: Array) -> Array:
    """A = [s∘X, s]ᵀ (d + 1, n) for labels s = 2y − 1: the signed logits t = s (Xβ + α) of B draws are
    one matmul z[:, :d+1] @ A, and log p(y | η) = log σ(t)."""
    sign = 2.0 * y - 1.0
    return np.ascontiguousarray(np.hstack([x, np.ones((len(sign), 1))]).T * sign)


def _mean_sigmoid(t: Array, decay: Array, probability: Array) -> tuple[Array, Array]:
    """mean_s σ(t_s) and its log per column of t (S, n), σ(t_s) the probability of the observed label,
    given two work arrays of t's shape (overwritten).

    The mean of the probabilities themselves, σ(t) = 1/(1 + d) for t ≥ 0 and d/(1 + d) otherwise with
    d = e^{−|t|}: one exponential per element, and the same value as log_mean_exp(log σ(t)) to rounding.
    A column whose every probability is below the smallest normal double (t < −708 for every draw)
    is taken in log space, log σ(t) = min(t, 0) − log1p(d).
    """
    np.abs(t, out=decay)
    np.negative(decay, out=decay)
    np.exp(decay, out=decay)
    probability.fill(1.0)
    np.copyto(probability, decay, where=t < 0.0)
    decay += 1.0
    probability /= decay
    mean = probability.mean(axis=0)
    tiny = mean < np.finfo(float).tiny
    with np.errstate(divide="ignore"):
        log_mean = np.log(mean)
    if tiny.any():
        far = t[:, tiny]
        log_mean[tiny] = log_mean_exp(np.minimum(far, 0.0) - np.log1p(np.exp(-np.abs(far))), axis=0)
    return mean, log_mean


def _sum_log_sigmoid(t: Array, decay: Array, block_starts: Array, scratch: Array) -> Array:
    """Σ_i log σ(t_i) over each row of t (B, n), given decay = e^{−|t|}, ``arange(0, n, _PRODUCT_BLOCK)``
    and a work array of t's shape (overwritten).

    Σ_i log1p(e^{−|t_i|}) is taken as the log of a product, one log per block of factors
    1 + e^{−|t_i|} ∈ (1, 2] instead of one log1p per element (the transcendental functions are
    most of the model's cost). The product's rounding error, at most n/2 ulp, is ~1e-13 absolute
    in a sum of n terms.
    """
    factors = np.add(decay, 1.0, out=scratch)
    log_norm = np.log(np.multiply.reduceat(factors, block_starts, axis=1)).sum(axis=1)
    return np.minimum(t, 0.0, out=scratch).sum(axis=1) - log_norm


class HierarchicalLogistic(Model):
    """Hierarchical logistic regression on a classification data set.

    ``dataset``: a shipped classification data set (the papers use ``pima``, ``heart`` and
    ``german_numeric``) or a CSV path with a 0/1 target (mcsa_bench.datasets conventions).
    ``test_fraction`` of the rows (in [0, 1)) is held out by a split seeded with ``split_seed``;
    features are standardized with the training rows' statistics unless ``standardize=False``
    (the papers' setting: raw features, docs/models.md); ``max_rows`` keeps a seeded random subset
    of the rows (mcsa_bench.datasets.load_supervised). Metrics: ``test_lpd`` and
    ``test_accuracy`` over :data:`PREDICTIVE_DRAWS` draws of q (none when there is no test set).
    The log joint reuses its work arrays between calls (:class:`~mcsa_bench.builtin.models.work.WorkArrays`).
    """

    def __init__(self, dataset: str = "pima", test_fraction: float = 0.1, split_seed: int = 0, standardize: bool = True,
                 max_rows: int | None = None, prior: str = "hierarchical"):
        if prior not in PRIORS:
            raise ConfigurationError(f"prior must be one of {', '.join(PRIORS)}, got {prior!r}")
        if not isinstance(dataset, str):
            raise ConfigurationError(
                f"dataset must be a data set name (e.g. 'pima', 'heart', 'german') or a CSV path, got {dataset!r}"
            )
        self.data = load_supervised(dataset, task="classification", test_fraction=float(test_fraction),
                                    split_seed=split_seed, standardize_features=standardize, max_rows=max_rows)
        self.num_features = self.data.num_features
        self.hierarchical = prior == "hierarchical"
        self.dim = self.num_features + (3 if self.hierarchical else 1)
        self._signed_design = _signed_design(self.data.x_train, self.data.y_train)
        self._signed_test_design = _signed_design(self.data.x_test, self.data.y_test)
        self._product_starts = np.arange(0, self._signed_design.shape[1], _PRODUCT_BLOCK)
        self._work = WorkArrays()  # (B, n) arrays of the log joint, reused between calls
        # log p(β, α, σ_β, σ_α) + log-Jacobians, its z-independent part: N(β; 0, σ_β²), N(α; 0, σ_α²),
        # and the half-normal N⁺(σ; 0, 1) = 2 N(σ; 0, 1) of both scales (only the normals' without them).
        self._log_prior_const = -(self.num_features + 1) * _HALF_LOG_2PI
        if self.hierarchical:
            self._log_prior_const += 2.0 * (_LOG_2 - _HALF_LOG_2PI)
        self._scale_groups = np.array([0, self.num_features])  # z[:, :d+1] = (β, α): the coefficients of σ_β, σ_α

    def _terms(self, z: Array) -> tuple[Array, ...]:
        """The log joint (B,) and the intermediate quantities its gradient reuses."""
        d = self.num_features
        shape = (len(z), self._signed_design.shape[1])
        signed_logits = np.matmul(
            z[:, : d + 1], self._signed_design, out=self._work.get("logits", shape)
        )  # the one matmul
        decay = np.abs(signed_logits, out=self._work.get("decay", shape))
        np.negative(decay, out=decay)
        np.exp(decay, out=decay)
        log_lik = _sum_log_sigmoid(signed_logits, decay, self._product_starts, self._work.get("scratch", shape))
        if not self.hierarchical:
            return log_lik + self._log_prior_const - 0.5 * np.einsum("bi,bi->b", z, z), signed_logits, decay, None, None
        # Priors, per scale k ∈ {β, α} with m_k coefficients (d and 1) and squared norm q_k:
        # −m_k log σ_k − q_k / (2σ_k²) (normal), −σ_k²/2 (half-normal) and + log σ_k (Jacobian).
        log_scales = z[:, d + 1 :]  # (B, 2): log σ_β, log σ_α
        variances = np.exp(2.0 * log_scales)
        scaled_sq_norms = np.add.reduceat(np.square(z[:, : d + 1]), self._scale_groups, axis=1)  # |β|², α²
        scaled_sq_norms /= variances
        log_prior = self._log_prior_const - (d - 1) * log_scales[:, 0] - 0.5 * (scaled_sq_norms + variances).sum(axis=1)
        return log_lik + log_prior, signed_logits, decay, variances, scaled_sq_norms

    def log_joint(self, z: Array) -> Array:
        return self._terms(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        value, signed_logits, decay, variances, scaled_sq_norms = self._terms(z)
        d = self.num_features
        # ∂ log σ(t)/∂t = σ(−t) = e^{−|t|}/(1 + e^{−|t|}) for t ≥ 0, 1/(1 + e^{−|t|}) otherwise;
        # ∂t/∂(β, α) = s [x, 1], which the signed design carries.
        sigma_minus = self._work.get("scratch", decay.shape)
        sigma_minus.fill(1.0)
        np.copyto(sigma_minus, decay, where=signed_logits >= 0.0)
        sigma_minus /= decay + 1.0
        grad = np.empty_like(z)
        grad[:, : d + 1] = sigma_minus @ self._signed_design.T
        if not self.hierarchical:
            grad -= z
            return value, grad
        grad[:, : d + 1] -= z[:, : d + 1] / np.repeat(variances, [d, 1], axis=1)
        # ∂/∂ log σ_k: −m_k + q_k/σ_k² (normal prior) − σ_k² + 1 (half-normal and Jacobian).
        grad[:, d + 1 :] = scaled_sq_norms - variances + np.array([1.0 - d, 0.0])
        return value, grad

    def latent_names(self) -> list[str]:
        scales = ["log_sigma_beta", "log_sigma_alpha"] if self.hierarchical else []
        return [f"beta[{j}]" for j in range(self.num_features)] + ["alpha"] + scales

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"test_lpd": TEST_LPD, "test_accuracy": TEST_ACCURACY}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """``test_lpd`` (mean log posterior predictive density) and ``test_accuracy`` on the test rows."""
        if not self.data.has_test:
            return {}
        z = q.sample(rng, PREDICTIVE_DRAWS)
        shape = (PREDICTIVE_DRAWS, self._signed_test_design.shape[1])  # work arrays of their own: see _terms
        signed_logits = np.matmul(z[:, : self.num_features + 1], self._signed_test_design,
                                  out=self._work.get("test_logits", shape))
        observed, log_predictive = _mean_sigmoid(signed_logits, self._work.get("test_decay", shape),
                                                 self._work.get("test_probability", shape))
        # the label predicted by the mean probability is right iff that of the observed label is ≥ 1/2
        # (> 1/2 for y = 0, where the mean probability of y = 1 must fall below 1/2)
        right = np.where(self.data.y_test == 1.0, observed >= 0.5, observed > 0.5)
        return {"test_lpd": float(np.mean(log_predictive)), "test_accuracy": float(np.mean(right))}

    def artifacts(self) -> dict[str, dict[str, Array]]:
        return {"split": {"train_index": self.data.train_index, "test_index": self.data.test_index}}
