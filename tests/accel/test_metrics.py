"""log-mean-exp, PSIS k̂, log Z and the posterior-accuracy metrics in JAX against mcsa_bench/metrics.py and
mcsa_bench/references/accuracy.py (the same algorithms: equal to 1e-10)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp

from mcsa_bench import get_registry
from mcsa_bench.accel.metrics import log_mean_exp, log_z_metrics, pareto_khat, reference_metrics
from mcsa_bench.api import Approximation
from mcsa_bench.metrics import LOG_Z_DRAWS
from mcsa_bench.metrics import log_mean_exp as numpy_log_mean_exp
from mcsa_bench.metrics import pareto_khat as numpy_pareto_khat
from mcsa_bench.references import shipped
from mcsa_bench.references.accuracy import ReferenceScore

TOLERANCE = 1e-10
khat = jax.jit(pareto_khat)


def log_weights(kind: str, n: int, seed: int) -> np.ndarray:
    """Light tails (normal log weights: k̂ < 0.5 for small spread), heavy ones (|t₀.₇|: k̂ near 1/0.7),
    a few non-finite weights among them, and ties (repeated blocks, as the log Z of a replayed q)."""
    rng = np.random.default_rng(seed)
    if kind == "light":
        return 0.5 * rng.standard_normal(n)
    if kind == "heavy":
        return np.log(np.abs(rng.standard_t(0.7, n)))
    if kind == "non-finite":
        values = 3.0 * rng.standard_normal(n)
        values[rng.choice(n, 5, replace=False)] = [-np.inf, -np.inf, np.nan, np.inf, np.nan]
        return values
    return np.tile(rng.standard_normal(n // 16), 16)  # "ties"


@pytest.mark.parametrize("kind", ["light", "heavy", "non-finite", "ties"])
@pytest.mark.parametrize("n", [LOG_Z_DRAWS, 1000, 100, 30])
def test_pareto_khat_equals_numpys(kind, n):
    for seed in range(3):
        values = log_weights(kind, n, seed)
        expected = numpy_pareto_khat(values)
        found = float(khat(jnp.asarray(values)))
        if np.isnan(expected):
            assert np.isnan(found)
        else:
            assert found == pytest.approx(expected, rel=TOLERANCE, abs=TOLERANCE)


def test_pareto_khat_separates_light_from_heavy_tails():
    """Not a constant: light tails are below 0.5, |t₀.₇| weights near their shape 1/0.7 ≈ 1.43."""
    assert float(khat(jnp.asarray(log_weights("light", LOG_Z_DRAWS, 0)))) < 0.5
    assert float(khat(jnp.asarray(log_weights("heavy", LOG_Z_DRAWS, 0)))) == pytest.approx(1 / 0.7, abs=0.3)


def test_pareto_khat_is_nan_with_too_few_distinct_weights():
    """As numpy: fewer than 5 weights above the threshold (all equal, or too few finite ones)."""
    assert np.isnan(numpy_pareto_khat(np.zeros(100))) and np.isnan(float(khat(jnp.zeros(100))))
    few = np.full(100, -np.inf)
    few[:20] = np.arange(20.0)  # 20 finite: a tail of 4
    assert np.isnan(numpy_pareto_khat(few)) and np.isnan(float(khat(jnp.asarray(few))))
    assert np.isnan(float(khat(jnp.zeros(20))))  # a tail of 4 at most


def test_pareto_khat_and_log_z_vmap_over_replicates():
    values = np.stack([log_weights(kind, 512, 1) for kind in ("light", "heavy", "non-finite")])
    batched = jax.jit(jax.vmap(log_z_metrics))(jnp.asarray(values))
    for r, row in enumerate(values):
        assert float(batched["log_z_khat"][r]) == pytest.approx(numpy_pareto_khat(row), rel=TOLERANCE, nan_ok=True)
        assert float(batched["log_z"][r]) == pytest.approx(float(numpy_log_mean_exp(row)), rel=TOLERANCE, nan_ok=True)


def test_log_mean_exp_equals_numpys():
    rng = np.random.default_rng(4)
    values = 300.0 * rng.standard_normal((50, 7))  # beyond exp's range: the shift matters
    values[:, 3] = -np.inf  # an all-zero column: −inf
    for axis in (0, 1):
        np.testing.assert_allclose(np.asarray(log_mean_exp(jnp.asarray(values), axis=axis)),
                                   numpy_log_mean_exp(values, axis=axis), rtol=TOLERANCE)
    kept = rng.uniform(size=values.shape) < 0.5
    masked = log_mean_exp(jnp.asarray(values), axis=0, where=jnp.asarray(kept))
    expected = [numpy_log_mean_exp(column[keep]) for column, keep in zip(values.T, kept.T)]
    np.testing.assert_allclose(np.asarray(masked), expected, rtol=TOLERANCE)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class MeanFieldQ:
    """A mean-field Gaussian JaxQ stand-in: what the posterior-accuracy metrics ask of q."""

    mean: jax.Array
    sd: jax.Array

    def log_prob(self, z):
        return (-0.5 * jnp.sum(((z - self.mean) / self.sd) ** 2, axis=1) - jnp.sum(jnp.log(self.sd))
                - 0.5 * self.mean.size * np.log(2 * np.pi))

    def marginal_moments(self):
        return self.mean, self.sd


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "monte-carlo"])
def test_the_posterior_accuracy_metrics_equal_the_numpy_reference_score(exact):
    """Against the shipped pima reference: exact excess KL from its covariance, or (without it) the
    Monte Carlo average over its held-out draws, with its standard error."""
    reference = next(ref for ref in shipped("logistic") if ref.name == "logistic--pima-raw")
    if not exact:
        reference = replace(reference, cov=None)
    family = get_registry().build("family", "meanfield_gaussian", dim=reference.mean.size)
    params = family.moment_matched(reference.mean, np.diag(reference.sd**2 * 1.3)) + 0.05
    expected = ReferenceScore(reference, family)(Approximation(family, params), np.random.default_rng(0))
    moments = family.moments(params)
    mean, sd = moments.mean, moments.sd
    metrics = jax.jit(reference_metrics(ReferenceScore(reference, family)))
    found = metrics(MeanFieldQ(jnp.asarray(mean), jnp.asarray(sd)))
    assert set(found) == set(expected) and ("excess_inclusive_kl_se" in found) is not exact
    for name, value in expected.items():
        assert float(found[name]) == pytest.approx(value, rel=TOLERANCE), name
    assert expected["excess_inclusive_kl"] > 0.0 and expected["ref_mean_error_max"] > 0.0
