"""Radon hierarchical regression (mcsa_bench.builtin.models.radon)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy import stats

from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.models.radon import Radon
from mcsa_bench.datasets import dataset_path
from tests.support import assert_every_scheme_runs, assert_gradient_matches, run_scheme


def scipy_log_joint(path, z: np.ndarray, num_counties: int) -> float:
    """log p(x, z) of one unconstrained z, term by term with scipy.stats, reading the CSV itself."""
    k = num_counties
    a1, a2 = z[:k], z[k : 2 * k]
    mu_a1, mu_a2 = z[2 * k], z[2 * k + 1]
    sigma_a1, sigma_a2, sigma_y = np.exp(z[2 * k + 2 :])
    total = 0.0
    for sigma in (sigma_a1, sigma_a2, sigma_y):  # Gamma(1, rate 0.02) plus the log-Jacobian of exp
        total += stats.gamma.logpdf(sigma, a=1.0, scale=1 / 0.02) + np.log(sigma)
    total += stats.norm.logpdf(mu_a1) + stats.norm.logpdf(mu_a2)
    for c in range(k):
        total += stats.norm.logpdf(a1[c], mu_a1, sigma_a1) + stats.norm.logpdf(a2[c], mu_a2, sigma_a2)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            c = int(row["county"]) - 1
            floor = 1.0 - float(row["basement"])
            total += stats.norm.logpdf(float(row["log_radon"]), a1[c] + a2[c] * floor, sigma_y)
    return total


@pytest.fixture(scope="module")
def model():
    return Radon()


def test_dimension_and_latent_layout(model):
    names = model.latent_names()
    assert model.dim == 175 == len(names)
    assert names[:2] == ["a1[0]", "a1[1]"] and names[85] == "a2[0]"
    assert names[-5:] == ["mu_a1", "mu_a2", "log_sigma_a1", "log_sigma_a2", "log_sigma_y"]


def test_log_joint_matches_scipy_and_rows(model):
    rng = np.random.default_rng(11)
    z = np.concatenate([rng.normal(1.0, 0.5, (2, 170)), rng.normal(0.0, 0.5, (2, 5))], axis=1)
    value = model.log_joint(z)
    expected = [scipy_log_joint(dataset_path("radon"), row, 85) for row in z]
    np.testing.assert_allclose(value, expected, rtol=1e-10)
    rows = np.concatenate([model.log_joint(row[None]) for row in z])
    np.testing.assert_allclose(value, rows, rtol=1e-12)


def test_gradient_matches_finite_differences(model):
    z = np.random.default_rng(12).normal(0.0, 0.7, size=(3, model.dim))
    assert_gradient_matches(model.log_joint_and_grad, z, rtol=1e-5, atol=1e-4)


def test_user_csv_with_an_empty_county(tmp_path):
    path = tmp_path / "houses.csv"
    path.write_text("county,log_radon,basement,extra\n1,0.5,1,x\n1,1.5,0,y\n3,-0.2,1,z\n")
    model = Radon(str(path))
    assert model.num_counties == 3 and model.dim == 11  # county 2 has no rows: prior only
    z = np.random.default_rng(13).normal(0.0, 0.8, size=(2, model.dim))
    np.testing.assert_allclose(model.log_joint(z), [scipy_log_joint(path, row, 3) for row in z], rtol=1e-10)
    assert_gradient_matches(model.log_joint_and_grad, z)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "log_radon, basement, county"),  # pima: none of the columns
        ("log_radon,basement,county\n1.0,2,1\n", "0/1"),
        ("log_radon,basement,county\n1.0,1,1.5\n", "integer labels"),
        ("log_radon,basement,county\n1.0,1,0\n", "integer labels"),
    ],
)
def test_bad_data_raise_configuration_errors(tmp_path, content, message):
    dataset = "pima"
    if content is not None:
        dataset = str(tmp_path / "bad.csv")
        (tmp_path / "bad.csv").write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        Radon(dataset)


def test_every_scheme_runs(model):
    assert_every_scheme_runs(model)


def test_pmcsa_log_z_is_finite(model):
    # Measured: log Z ≈ -1126..-1130 (k̂ ≈ 2.5-2.9) at T = 3000 over run seeds 0-2; the papers'
    # thermodynamic-integration reference lies around -1100..-1000. Only finiteness is asserted.
    final = run_scheme(model, "pmcsa", n_iters=3000, seed=0).history[-1]
    assert math.isfinite(final["log_z"]) and set(final) >= {"log_z", "log_z_khat"}
