"""Bayesian neural network regression (docs/methods.md §6 "bnn"; NeurIPS paper App. C.1).

One hidden ReLU layer, as in Hernández-Lobato & Adams (2015) and the authors' code:

    λ, γ ~ Gamma(shape 6, rate 6)                  (weight and noise precisions)
    W1 ∈ R^{H×(d+1)}, W2 ∈ R^{H+1} ~ N(0, 1/λ)     (last column of W1, last entry of W2: biases)
    hidden = ReLU(W1 [x; 1] / sqrt(d+1)),  ŷ = W2 [hidden; 1] / sqrt(H+1),  y ~ N(ŷ, 1/γ)

Latent layout (D = H(d+1) + (H+1) + 2): ``W1[j,k]`` row-major (j hidden unit, k input, k = d the
bias), then ``W2[j]`` (j = H the bias), then ``log_lambda``, ``log_gamma``; the precisions live on
the log scale and their log-Jacobians are part of the log joint. Features and target are
z-standardized with the training rows' statistics; test metrics are on the original target scale.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.datasets import available_datasets, load_supervised
from mcsa_bench.metrics import TEST_LPD, TEST_RMSE, log_mean_exp

_LOG_2PI = float(np.log(2.0 * np.pi))
_GAMMA_SHAPE = _GAMMA_RATE = 6.0
#: log Gamma(e^u; a, b) + u = a log b - lgamma(a) + a u - b e^u; this is its constant part
_GAMMA_LOG_NORM = float(_GAMMA_SHAPE * np.log(_GAMMA_RATE) - gammaln(_GAMMA_SHAPE))
#: draws of q for the Monte Carlo predictive density (docs/methods.md §7: S >= 1000)
PREDICTIVE_DRAWS = 1024
DATASETS = ("boston", "concrete")


def _log_gamma_prior(u: Array) -> tuple[Array, Array]:
    """log Gamma(e^u; 6, 6) + u (with the log-Jacobian of e^u) and its derivative in u."""
    rate_term = _GAMMA_RATE * np.exp(u)
    return _GAMMA_LOG_NORM + _GAMMA_SHAPE * u - rate_term, _GAMMA_SHAPE - rate_term


class BayesianNeuralNetwork(Model):
    """BNN regression with a ``hidden``-unit ReLU layer on ``dataset`` (boston, concrete or a CSV path).

    The split is ``load_supervised(dataset, task="regression", test_fraction, split_seed, max_rows)``.
    Metrics: ``test_lpd`` (mean over test points of the log predictive density, Monte Carlo over
    1024 draws of q, original scale) and ``test_rmse`` (of the posterior predictive mean).
    """

    def __init__(self, dataset: str = "boston", test_fraction: float = 0.1, split_seed: int = 0, hidden: int = 50,
                 max_rows: int | None = None):
        if dataset in available_datasets() and dataset not in DATASETS:
            raise ConfigurationError(
                f"bnn: dataset must be one of {', '.join(DATASETS)} or a path to a regression CSV, got {dataset!r}")
        if not isinstance(hidden, (int, np.integer)) or hidden < 1:
            raise ConfigurationError(f"bnn: hidden must be a positive integer, got {hidden}")
        self.data = load_supervised(dataset, task="regression", test_fraction=test_fraction, split_seed=split_seed,
                                    max_rows=max_rows)
        self.hidden = int(hidden)
        self.num_inputs = self.data.num_features + 1  # d + 1, with the bias input
        self.num_weights = self.hidden * self.num_inputs + self.hidden + 1  # W1 and W2
        self.dim = self.num_weights + 2
        # inputs [x; 1] / sqrt(d+1), transposed to (d+1, n): pre-activations are then W1 @ x̃ᵀ
        self._xt_train = self._inputs(self.data.x_train)
        self._xt_test = self._inputs(self.data.x_test)

    def _inputs(self, x: Array) -> Array:
        return np.hstack([x, np.ones((x.shape[0], 1))]).T / np.sqrt(self.num_inputs)

    def latent_names(self) -> list[str]:
        w1 = [f"W1[{j},{k}]" for j in range(self.hidden) for k in range(self.num_inputs)]
        w2 = [f"W2[{j}]" for j in range(self.hidden + 1)]
        return w1 + w2 + ["log_lambda", "log_gamma"]

    def _unpack(self, z: Array) -> tuple[Array, Array, Array, Array]:
        """(W1 (B, H, d+1), W2 (B, H+1), log λ (B,), log γ (B,)) as views of z."""
        n_w1 = self.hidden * self.num_inputs
        w1 = z[:, :n_w1].reshape(-1, self.hidden, self.num_inputs)
        return w1, z[:, n_w1 : self.num_weights], z[:, self.num_weights], z[:, self.num_weights + 1]

    def _forward(self, xt: Array, w1: Array, w2: Array) -> tuple[Array, Array]:
        """Hidden activations (B, H, n) and predictions ŷ (B, n) for scaled inputs xt (d+1, n).

        The pre-activations of all B networks are one 2-d matmul (B·H, d+1) @ (d+1, n), faster than
        B stacked ones. The ReLU is applied in place: at B = 10 a second fresh (B, H, n) array
        costs more (page faults) than all the arithmetic.
        """
        hidden = (w1.reshape(-1, w1.shape[-1]) @ xt).reshape(len(w1), self.hidden, -1)
        np.maximum(hidden, 0.0, out=hidden)
        pred = ((w2[:, None, :-1] @ hidden)[:, 0] + w2[:, -1:]) / np.sqrt(self.hidden + 1)
        return hidden, pred

    def _log_joint_parts(self, z: Array) -> tuple[Array, ...]:
        w1, w2, log_lam, log_gam = self._unpack(z)
        hidden, pred = self._forward(self._xt_train, w1, w2)
        lam, gam = np.exp(log_lam), np.exp(log_gam)
        resid = self.data.y_train - pred  # (B, n)
        sq_resid = np.einsum("bn,bn->b", resid, resid)
        sq_weights = np.einsum("bp,bp->b", z[:, : self.num_weights], z[:, : self.num_weights])
        # y ~ N(ŷ, 1/γ) over the training rows; weights ~ N(0, 1/λ); λ, γ ~ Gamma(6, 6) on the log scale
        log_lik = 0.5 * resid.shape[1] * (log_gam - _LOG_2PI) - 0.5 * gam * sq_resid
        log_prior_w = 0.5 * self.num_weights * (log_lam - _LOG_2PI) - 0.5 * lam * sq_weights
        log_p = log_lik + log_prior_w + _log_gamma_prior(log_lam)[0] + _log_gamma_prior(log_gam)[0]
        # NaN only from 0 * inf (an exactly zero sum of squares times an overflowed precision)
        log_p = np.where(np.isnan(log_p), -np.inf, log_p)
        return log_p, hidden, resid, lam, gam, sq_resid, sq_weights

    def log_joint(self, z: Array) -> Array:
        return self._log_joint_parts(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        log_p, hidden, resid, lam, gam, sq_resid, sq_weights = self._log_joint_parts(z)
        w1, w2, log_lam, log_gam = self._unpack(z)
        n_w1, n_w = w1.shape[1] * w1.shape[2], self.num_weights
        delta = gam[:, None] * resid / np.sqrt(self.hidden + 1)  # ∂ log lik / ∂(W2 [hidden; 1]), (B, n)
        grad = np.empty_like(z)
        grad[:, n_w1 : n_w - 1] = (hidden @ delta[:, :, None])[..., 0]
        grad[:, n_w - 1] = delta.sum(axis=1)
        # ∂/∂W1[h, k] = W2[h] Σ_n 1[pre_hn > 0] δ_n x̃_kn (the ReLU's a.e. derivative; mask built in place)
        mask = np.greater(hidden, 0.0, out=hidden)
        grad[:, :n_w1] = (w2[:, :-1, None] * (mask @ (delta[:, :, None] * self._xt_train.T))).reshape(-1, n_w1)
        grad[:, :n_w] -= lam[:, None] * z[:, :n_w]  # Gaussian prior of the weights
        grad[:, n_w] = 0.5 * n_w - 0.5 * lam * sq_weights + _log_gamma_prior(log_lam)[1]
        grad[:, n_w + 1] = 0.5 * resid.shape[1] - 0.5 * gam * sq_resid + _log_gamma_prior(log_gam)[1]
        return log_p, grad

    def metric_specs(self) -> dict[str, MetricSpec]:
        return {"test_lpd": TEST_LPD, "test_rmse": TEST_RMSE}

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """``test_lpd`` and ``test_rmse`` on the original target scale (docs/methods.md §7)."""
        if not self.data.has_test:
            return {}
        w1, w2, _, log_gam = self._unpack(q.sample(rng, PREDICTIVE_DRAWS))
        _, pred = self._forward(self._xt_test, w1, w2)  # (S, n_test), standardized scale
        resid = self.data.y_test - pred
        log_lik = 0.5 * (log_gam[:, None] - _LOG_2PI) - 0.5 * np.exp(log_gam)[:, None] * resid**2
        y_std = float(self.data.y_scale.std)
        lpd = np.mean(log_mean_exp(log_lik, axis=0)) - np.log(y_std)
        rmse = y_std * np.sqrt(np.mean((pred.mean(axis=0) - self.data.y_test) ** 2))
        return {"test_lpd": float(lpd), "test_rmse": float(rmse)}

    def artifacts(self) -> dict[str, dict[str, Array]]:
        return {"split": {"train_index": self.data.train_index, "test_index": self.data.test_index}}
