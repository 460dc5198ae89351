"""Stochastic volatility (reference.md §6): the AR(1) scan against a loop, log joint against
scipy.stats, gradient against finite differences, the data window, arguments, every scheme."""

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.stochastic_volatility import StochasticVolatility, ar1_filter
from mcsa_bench.datasets import load_columns
from tests.support import EPS, assert_every_scheme_runs, assert_gradient_matches, assert_within

SMALL_WINDOW = {"start": "2008-09-02", "end": "2008-10-31"}  # 42 returns of autumn 2008


@pytest.fixture(scope="module")
def sp500():
    return StochasticVolatility()


@pytest.fixture(scope="module")
def small():
    return StochasticVolatility(**SMALL_WINDOW)


def random_points(model, n, seed):
    """Points near the posterior's scale: μ ≈ log Var(y), φ near 1, σ ≈ 0.2."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, model.dim))
    z[:, 0] = -9.0 + rng.normal(size=n)
    z[:, 1] = 2.0 + rng.normal(scale=0.5, size=n)
    z[:, 2] = -1.5 + rng.normal(scale=0.5, size=n)
    return z


@pytest.mark.parametrize("length", [1, 2, 3, 8, 37, 2518])
def test_scan_matches_loop(length):
    rng = np.random.default_rng(length)
    phi = np.array([-0.999, -0.3, 0.0, 0.7, 0.9999])
    b = rng.normal(size=(phi.size, length))
    expected = b.copy()
    for t in range(1, length):
        expected[:, t] = phi * expected[:, t - 1] + b[:, t]
    # Both sum the same T terms φ^k b_{t−k} in other orders: each is off by at most T·eps·max|partial
    # sum| (Higham 2002, §4.2; the scan's log2 T passes round no more often), so twice that, absolute:
    # a relative tolerance fails where x_t crosses 0 (at φ = 0.9999 and T = 2,518, 1e-11 was below it)
    assert_within(ar1_filter(phi, b), expected, 2 * length * EPS * np.abs(expected).max(axis=1, keepdims=True))


def reference_log_joint(model, z):
    """log p(y, z) of one unconstrained z with scipy.stats densities and a loop over time."""
    mu, u, log_sigma, h_std = z[0], z[1], z[2], z[3:]
    phi, sigma = np.tanh(u), np.exp(log_sigma)
    total = (st.cauchy(0, 10).logpdf(mu)
             + st.uniform(-1, 2).logpdf(phi) + np.log(1 - phi**2)  # φ = tanh(u)
             + st.halfcauchy(0, 5).logpdf(sigma) + log_sigma  # σ = exp(log σ)
             + st.norm.logpdf(h_std).sum())
    h = mu + sigma * h_std[0] / np.sqrt(1 - phi**2)
    for t, y in enumerate(model.returns):
        if t > 0:
            h = mu + phi * (h - mu) + sigma * h_std[t]
        total += st.norm(0, np.exp(h / 2)).logpdf(y)
    return total


def test_log_joint_matches_scipy(small):
    z = random_points(small, 4, seed=1)
    np.testing.assert_allclose(small.log_joint(z), [reference_log_joint(small, row) for row in z], rtol=1e-10)


def test_batch_equals_rows(sp500):
    z = random_points(sp500, 5, seed=2)
    rows = np.concatenate([sp500.log_joint(row[None]) for row in z])
    np.testing.assert_allclose(sp500.log_joint(z), rows, rtol=1e-12)
    np.testing.assert_allclose(sp500.log_joint_and_grad(z)[0], rows, rtol=1e-12)


def test_gradient_every_coordinate(small):
    assert_gradient_matches(small.log_joint_and_grad, random_points(small, 4, seed=3), rtol=1e-5, atol=1e-5)


def test_gradient_directional(sp500):
    assert_gradient_matches(sp500.log_joint_and_grad, random_points(sp500, 4, seed=4), n_directions=10)


def test_window_returns_and_dimension(sp500, small):
    columns = load_columns("sp500")
    for model, start, end in [(sp500, "2007-05-03", "2017-05-03"), (small, SMALL_WINDOW["start"], SMALL_WINDOW["end"])]:
        window = (columns["date"] >= start) & (columns["date"] <= end)  # ISO strings sort as dates
        returns = np.diff(np.log(columns["close"][window]))
        np.testing.assert_allclose(model.returns, returns - returns.mean(), rtol=1e-12, atol=1e-15)
        assert model.dim == model.num_returns + 3 == len(model.latent_names())
    assert sp500.num_returns == 2518  # 2519 closes dated 2007-05-03 … 2017-05-03, both inclusive
    assert (str(sp500.dates[0]), str(sp500.dates[-1])) == ("2007-05-04", "2017-05-03")
    assert sp500.latent_names()[:4] == ["mu", "atanh_phi", "log_sigma", "h_std[0]"]
    assert sp500.latent_names()[-1] == "h_std[2517]"


def test_no_nan_at_extreme_points(small):
    z = random_points(small, 6, seed=5)
    z[0, 1], z[2, 2], z[3, 2], z[4, 0], z[5, 1:4] = 800.0, 800.0, -800.0, 1e200, (800.0, 800.0, 0.0)
    z[1, 1], z[1, 3] = -40.0, 0.0  # φ = tanh(−40) rounds to −1; h_std[0] = 0 keeps h_1 = μ finite
    log_p, grad = small.log_joint_and_grad(z)
    assert not np.isnan(small.log_joint(z)).any() and not np.isnan(log_p).any()
    assert np.isfinite(log_p[1]) and np.all(np.isfinite(grad[1]))


def test_user_csv(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text("date,close,volume\n2020-01-02,100,1\n2020-01-03,101,1\n2020-01-06,99,1\n2020-01-07,102,1\n")
    model = StochasticVolatility(str(path), start="2020-01-03", end="2020-01-31")
    returns = np.diff(np.log([101.0, 99.0, 102.0]))
    np.testing.assert_allclose(model.returns, returns - returns.mean())
    assert model.dim == 5


@pytest.mark.parametrize("kwargs, message", [
    ({"start": "2017-05-03", "end": "2007-05-03"}, "after end"),
    ({"start": "May 3 2007"}, "yyyy-mm-dd"),
    ({"start": "2019-01-01", "end": "2019-06-01"}, "at least 3.*1950-01-03 … 2018-12-07"),
    ({"dataset": "no_such_data"}, "available"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        StochasticVolatility(**kwargs)


@pytest.mark.parametrize("text, message", [
    ("date,price\n2020-01-02,1\n2020-01-03,2\n2020-01-06,3\n", "missing close"),
    ("date,close\n2020-01-03,1\n2020-01-02,2\n2020-01-06,3\n", "strictly increasing"),
    ("date,close\n2020-01-02,1\n2020-01-03,0\n2020-01-06,3\n", "positive"),
])
def test_bad_csv(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        StochasticVolatility(str(path), start="2020-01-01", end="2020-12-31")


def test_every_scheme_runs():
    model = StochasticVolatility(max_rows=250)  # the window's first 250 returns: a smoke test
    assert model.dim == 253
    results = assert_every_scheme_runs(model)
    assert all({"log_z", "log_z_khat"} <= set(r.history[-1]) for r in results.values())
