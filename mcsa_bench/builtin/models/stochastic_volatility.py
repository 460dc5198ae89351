"""Stochastic volatility model of daily log returns (docs/methods.md §6; ICLR draft App. E.2).

Stan's non-centred parameterization (Stan User's Guide, "Stochastic volatility models"):

    μ ~ Cauchy(0, 10),  φ ~ U(−1, 1),  σ ~ Cauchy⁺(0, 5),  h_std ~ N(0, I_T)
    h_1 = μ + σ h_std,1 / sqrt(1 − φ²),  h_t = μ + φ (h_{t−1} − μ) + σ h_std,t  (t ≥ 2)
    y_t ~ N(0, exp(h_t / 2)²)

Latent layout (D = T + 3): ``mu``, ``atanh_phi`` (φ = tanh), ``log_sigma`` (σ = exp), then
``h_std[0]`` … ``h_std[T-1]``; the log-Jacobians of tanh and exp are part of the log joint.

Data: a CSV with columns ``date`` (ISO ``yyyy-mm-dd``, strictly increasing) and ``close`` (positive).
The closes dated within [start, end] (both ends inclusive) give T = n_closes − 1 log returns
y_t = log close_{t+1} − log close_t, which are then demeaned. No close outside the window is used.
"""

from __future__ import annotations

import numpy as np

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model
from mcsa_bench.datasets import check_max_rows, load_columns
from mcsa_bench.metrics import LOG_Z_METRICS, importance_log_z

_LOG_2PI = float(np.log(2.0 * np.pi))
_MU_SCALE = 10.0  # μ ~ Cauchy(0, 10)
_SIGMA_SCALE = 5.0  # σ ~ Cauchy⁺(0, 5)
MIN_RETURNS = 2


def ar1_filter(phi: Array, b: Array) -> Array:
    """x with x_0 = b_0 and x_t = φ x_{t−1} + b_t along the last axis; φ (B,), b (B, T).

    Hillis–Steele scan: with the pairs (a, b) ∘ (a', b') = (a a', a' b + b') every position
    combines with the one 2^j steps back, log2(T) vectorized passes. For a constant coefficient φ
    the a-part of a position combined at stride k is exactly φ^k, so only b needs updating.
    """
    x = np.array(b, dtype=float)
    shifted = np.empty_like(x)  # one buffer for φ^k x_{t−k}: fresh temporaries would page-fault every pass
    power = np.array(phi, dtype=float)[..., None]  # φ^k for the current stride k
    k, length = 1, x.shape[-1]
    while k < length:
        np.multiply(power, x[..., :-k], out=shifted[..., k:])
        x[..., k:] += shifted[..., k:]
        power = power * power
        k *= 2
    return x


def _log_returns(dataset: str, start: str, end: str) -> tuple[Array, Array]:
    """(demeaned log returns (T,), the date of each return's later close (T,)), validated."""
    columns = load_columns(dataset)
    missing = {"date", "close"} - set(columns)
    if missing:
        raise ConfigurationError(f"stochastic_volatility: dataset {dataset!r} needs columns 'date' and 'close'; "
                                 f"missing {', '.join(sorted(missing))}")
    close = columns["close"]
    if close.dtype.kind != "f":
        raise ConfigurationError(f"stochastic_volatility: column 'close' of {dataset!r} must be numeric")
    dates = _parse_dates(columns["date"], "column 'date'")
    first, last = _parse_dates(np.array([start, end]), "start and end")
    if not np.all(dates[1:] > dates[:-1]):
        raise ConfigurationError(f"stochastic_volatility: dates of {dataset!r} must be strictly increasing")
    if first > last:
        raise ConfigurationError(f"stochastic_volatility: start {start} is after end {end}")
    window = (dates >= first) & (dates <= last)
    if window.sum() < MIN_RETURNS + 1:
        raise ConfigurationError(
            f"stochastic_volatility: {start} … {end} holds {window.sum()} closes of {dataset!r}, need at least "
            f"{MIN_RETURNS + 1} ({MIN_RETURNS} returns); the data cover {dates[0]} … {dates[-1]}")
    if not np.all(close[window] > 0):
        raise ConfigurationError(f"stochastic_volatility: closes of {dataset!r} in {start} … {end} must be positive")
    returns = np.diff(np.log(close[window]))
    return returns - returns.mean(), dates[window][1:]


def _parse_dates(values: Array, what: str) -> Array:
    try:
        return np.array(values, dtype=str).astype("datetime64[D]")
    except ValueError as error:
        raise ConfigurationError(f"stochastic_volatility: {what} must be ISO dates yyyy-mm-dd ({error})") from None


class StochasticVolatility(Model):
    """Stochastic volatility of ``dataset`` (``sp500`` or a CSV path) between ``start`` and ``end``.

    ``returns`` (T,) holds the demeaned log returns, ``dates`` (T,) the date of each one's later
    close; the default window gives T = 2518 (D = 2521). ``max_rows`` keeps only the window's first
    ``max_rows`` returns (a smoke test). Metric: ``log_z`` and ``log_z_khat`` (importance sampling with
    q, docs/methods.md §7).
    """

    def __init__(self, dataset: str = "sp500", start: str = "2007-05-03", end: str = "2017-05-03",
                 max_rows: int | None = None):
        returns, dates = _log_returns(dataset, start, end)
        keep = check_max_rows(max_rows, minimum=MIN_RETURNS)
        self.returns, self.dates = returns[:keep], dates[:keep]
        self.num_returns = self.returns.size  # T
        self.dim = self.num_returns + 3
        with np.errstate(divide="ignore"):
            self._log_y2 = np.log(self.returns**2)  # y² e^{−h} as exp(log y² − h): no overflow
        # constants: the T-variate N(0, I) of h_std and of y given h, Cauchy(0, 10), U(−1, 1), Cauchy⁺(0, 5)
        self._log_norm = (-self.num_returns * _LOG_2PI - np.log(np.pi * _MU_SCALE) - np.log(2.0)
                          + np.log(2.0 / (np.pi * _SIGMA_SCALE)))

    def latent_names(self) -> list[str]:
        return ["mu", "atanh_phi", "log_sigma"] + [f"h_std[{t}]" for t in range(self.num_returns)]

    def _forward(self, z: Array) -> tuple[Array, ...]:
        mu, u, log_sigma, h_std = z[:, 0], z[:, 1], z[:, 2], z[:, 3:]
        phi, sigma = np.tanh(u), np.exp(log_sigma)
        # innovations b_t = σ h_std,t, with the stationary scale 1/sqrt(1 − φ²) = cosh(u) at t = 1
        b = sigma[:, None] * h_std
        b[:, 0] *= np.cosh(u)
        h = ar1_filter(phi, b)
        h += mu[:, None]
        scaled_y2 = np.subtract(self._log_y2, h)
        np.exp(scaled_y2, out=scaled_y2)  # y_t² / exp(h_t)
        # log|dφ/du| = log(1 − tanh² u) = 2 (log 2 − |u| − log(1 + e^{−2|u|})), stable for large |u|
        log_jac_phi = 2.0 * (np.log(2.0) - np.abs(u) - np.log1p(np.exp(-2.0 * np.abs(u))))
        # log Cauchy⁺(σ; 5) + log σ, with log(1 + (σ/5)²) = softplus(2 (log σ − log 5))
        log_prior_sigma = log_sigma - np.logaddexp(0.0, 2.0 * (log_sigma - np.log(_SIGMA_SCALE)))
        log_p = (self._log_norm - np.log1p((mu / _MU_SCALE) ** 2) + log_jac_phi + log_prior_sigma
                 - 0.5 * np.einsum("bt,bt->b", h_std, h_std) - 0.5 * (h.sum(axis=1) + scaled_y2.sum(axis=1)))
        # NaN only from inf − inf / 0 · inf once exp overflows (|z| ≳ 700): zero density there
        log_p = np.where(np.isnan(log_p), -np.inf, log_p)
        return log_p, phi, b, h, scaled_y2

    def log_joint(self, z: Array) -> Array:
        with np.errstate(over="ignore", invalid="ignore"):
            return self._forward(z)[0]

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        with np.errstate(over="ignore", invalid="ignore"):
            log_p, phi, b, h, scaled_y2 = self._forward(z)
            mu, u, log_sigma, h_std = z[:, 0], z[:, 1], z[:, 2], z[:, 3:]
            x = h - mu[:, None]
            g = 0.5 * (scaled_y2 - 1.0)  # ∂ log p(y | h) / ∂h_t
            # adjoint r_t = ∂ log p(y | h) / ∂b_t = g_t + φ r_{t+1}: the same scan, run backwards
            r = ar1_filter(phi, g[:, ::-1])[:, ::-1]
            grad = np.empty_like(z)
            grad[:, 0] = g.sum(axis=1) - 2.0 * mu / (_MU_SCALE**2 + mu**2)
            # φ enters through x_t = φ x_{t−1} + b_t (t ≥ 2) and through b_1 = σ cosh(u) h_std,1
            grad[:, 1] = (np.cosh(u) ** -2 * np.einsum("bt,bt->b", r[:, 1:], x[:, :-1])
                          + phi * r[:, 0] * b[:, 0] - 2.0 * phi)
            grad[:, 2] = np.einsum("bt,bt->b", r, b) - np.tanh(log_sigma - np.log(_SIGMA_SCALE))
            grad[:, 3:] = np.exp(log_sigma)[:, None] * r  # ∂b_t/∂h_std,t = σ (t ≥ 2), σ cosh(u) (t = 1)
            grad[:, 3] *= np.cosh(u)
            grad[:, 3:] -= h_std
        return log_p, grad

    def metric_specs(self) -> dict[str, MetricSpec]:
        return dict(LOG_Z_METRICS)

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        return importance_log_z(self, q, rng)

    def artifacts(self) -> dict[str, dict[str, Array]]:
        return {"data": {"returns": self.returns, "dates": self.dates.astype(str)}}
