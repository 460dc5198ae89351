"""The JAX engine against the numpy engine: for each scheme, the distribution of the final metric
over 40 seeds matches (difference of means within 3 standard errors and a Mann-Whitney test not
rejected at 1 %), on the Gaussian target (exact KL(π‖q)) and on logistic regression (test LPD);
and a planted bug (a wrong sign in one score) that this comparison catches.

The two engines use different generators, so their samples are independent: the standard error is
that of a difference of two independent means.
"""

import functools

import numpy as np
import pytest

pytest.importorskip("jax")

from scipy.stats import mannwhitneyu

from mcsa_bench import get_registry
from mcsa_bench.accel import schemes
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.assembly import assemble
from mcsa_bench.engine import run

SEEDS = range(40)
N_ITERS = 200
GAUSSIAN = ("gaussian", {"dim": 5}), "kl_inclusive"
LOGISTIC = ("logistic", {"dataset": "pima", "max_rows": 120}), "test_lpd"
#: (estimator, kernel, n_samples): every scheme and baseline the paper grids use
METHODS = [("msc", "cis", 10), ("msc_rb", "cis", 10), ("jsa", "imh", 10), ("pmcsa", "imh", 10),
           ("jsa", "cis", 10), ("pmcsa", "cis", 10), ("snis", None, 10), ("elbo", None, 10), ("elbo", None, 1)]
#: in the fast suite (each compiles a cell, seconds of CPU): one scheme per kind of gradient
FAST_METHODS = [("pmcsa", "imh", 10), ("msc_rb", "cis", 10), ("elbo", None, 10)]
HMC_METHODS = [("msc", "hmc", 10), ("rws", "hmc", 10), ("pmcsa", "hmc", 4)]


#: the numpy engine's rows by configuration, shared by the tests in one process that compare the same one
#: (pMCSA-IMH on the Gaussian target: the fast test, the planted bug's and three of the registry's); jax's are
#: taken uncached, as a planted bug patches the JAX schemes
NUMPY_ROWS: dict[str, list[dict[str, float]]] = {}


def final_rows(model, estimator, kernel, n_samples, backend, family="meanfield_gaussian",
               optimizer="adam") -> list[dict[str, float]]:
    """Each seed's last evaluation."""
    parts = assemble(get_registry(), model=model, estimator=estimator, kernel=kernel, n_samples=n_samples,
                     family=family, optimizer=optimizer)
    if backend == "numpy":
        key = repr((model, estimator, kernel, n_samples, family, optimizer))
        if key not in NUMPY_ROWS:
            NUMPY_ROWS[key] = [run(*parts.run_args(), n_iters=N_ITERS, seed=seed, eval_every=N_ITERS).history[-1]
                               for seed in SEEDS]
        return NUMPY_ROWS[key]
    cell = run_cell(*parts.jax_twins(N_ITERS), CellSettings(n_iters=N_ITERS, eval_every=N_ITERS), SEEDS)
    assert all(r.failure is None for r in cell.replicates)
    return [r.history[-1] for r in cell.replicates]


def same_distribution(a, b) -> tuple[bool, str]:
    standard_error = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    difference = a.mean() - b.mean()
    p_value = mannwhitneyu(a, b).pvalue
    return (abs(difference) <= 3 * standard_error and p_value > 0.01,
            f"means {a.mean():.4g} (jax) vs {b.mean():.4g} (numpy): difference {difference:.3g}, "
            f"3 SE {3 * standard_error:.3g}; Mann-Whitney p = {p_value:.3g}")


def check_agreement(case, method, family="meanfield_gaussian"):
    """(whether the final metric's distributions agree, the numbers); the rows must have the same names."""
    (model, metric) = case
    jax_rows, numpy_rows = (final_rows(model, *method, backend=backend, family=family) for backend in ("jax", "numpy"))
    assert sorted(jax_rows[0]) == sorted(numpy_rows[0])
    return same_distribution(*(np.array([row[metric] for row in rows]) for rows in (jax_rows, numpy_rows)))


def method_id(method) -> str:
    return f"{method[0]}-{method[1]}-N{method[2]}"


@pytest.mark.parametrize("method", [m if m in FAST_METHODS else pytest.param(m, marks=pytest.mark.slow)
                                    for m in METHODS], ids=method_id)
def test_final_kl_distribution_matches_numpy_on_the_gaussian_target(method):
    agree, detail = check_agreement(GAUSSIAN, method)
    assert agree, detail


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS, ids=method_id)
def test_final_test_lpd_distribution_matches_numpy_on_logistic_regression(method):
    agree, detail = check_agreement(LOGISTIC, method)
    assert agree, detail


@pytest.mark.slow
@pytest.mark.parametrize("method", HMC_METHODS, ids=method_id)
@pytest.mark.parametrize("case", [GAUSSIAN, LOGISTIC], ids=["gaussian", "logistic"])
def test_hmc_schemes_final_metric_distribution_matches_numpy(case, method):
    agree, detail = check_agreement(case, method)
    assert agree, detail


@pytest.mark.slow
@pytest.mark.parametrize("method", [("pmcsa", "imh", 10), ("elbo", None, 10)], ids=method_id)
def test_student_t_family_matches_numpy_on_the_gaussian_target(method):
    """Monte Carlo KLs (q is not Gaussian) and, for elbo, reparameterization through t variates."""
    agree, detail = check_agreement(GAUSSIAN, method, family=("meanfield_student_t", {"df": 5.0}))
    assert agree, detail


def registered(kind: str) -> list[str]:
    """The ``kind`` components with a JAX twin that fit pMCSA on the Gaussian target (the registry's)."""
    registry = get_registry()
    names = registry.covered(kind)
    if kind == "kernel":  # a kernel pMCSA refuses is compared with its own schemes elsewhere
        fits = registry.get("estimator", "pmcsa").factory.kernel_incompatibility
        names = [name for name in names if fits(registry.get("kernel", name).factory) is None]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", [(kind, name) for kind in ("kernel", "family", "optimizer")
                                        for name in registered(kind)])
def test_every_registered_twin_gives_numpys_final_metric_distribution(kind, name):
    """Drawn from the registry: each kernel, family and optimizer with a JAX twin (a plugin's, or one
    written in JAX, included) in a pMCSA cell on the Gaussian target (exact or Monte Carlo KL(π‖q))."""
    spec = ("pmcsa", name, 10) if kind == "kernel" else ("pmcsa", "imh", 10)
    family = name if kind == "family" else "meanfield_gaussian"
    (model, metric) = GAUSSIAN
    rows = {backend: final_rows(model, *spec, backend=backend, family=family,
                                optimizer=name if kind == "optimizer" else "adam") for backend in ("jax", "numpy")}
    agree, detail = same_distribution(*(np.array([row[metric] for row in rows[b]]) for b in ("jax", "numpy")))
    assert agree, detail


def test_a_wrong_sign_in_one_score_is_caught(monkeypatch):
    """The planted bug: the scale part of the score with the wrong sign (ψ's gradient reversed)."""
    correct = schemes.weighted_score_descent

    def wrong_scale_sign(family, params, z, weights=None):
        grad = correct(family, params, z, weights)
        return grad.at[family.dim:].multiply(-1.0)

    monkeypatch.setattr(schemes, "weighted_score_descent", wrong_scale_sign)
    agree, detail = check_agreement(GAUSSIAN, ("pmcsa", "imh", 10))
    assert not agree, detail


# --- the gradient-variance diagnostic ------------------------------------------------------------

#: pMCSA on the 5-D Gaussian target (exact gradient known: grad_bias too), 20 diagnostic points of 32 copies
DIAGNOSTIC_ITERS, DIAGNOSTIC = 100, {"diagnostics_every": 5, "diagnostics_replicas": 32}
DIAGNOSTIC_SEEDS = range(24)


@functools.cache  # the numpy rows are shared by the two tests in one process (jax's taken uncached)
def diagnostic_rows(backend) -> list[dict[str, float]]:
    """Each seed's last evaluation, with the diagnostic's window means."""
    parts = assemble(get_registry(), model=GAUSSIAN[0], estimator="pmcsa", kernel="imh", n_samples=10)
    if backend == "numpy":
        return [run(*parts.run_args(), n_iters=DIAGNOSTIC_ITERS, seed=seed, eval_every=DIAGNOSTIC_ITERS,
                    **DIAGNOSTIC).history[-1] for seed in DIAGNOSTIC_SEEDS]
    settings = CellSettings(n_iters=DIAGNOSTIC_ITERS, eval_every=DIAGNOSTIC_ITERS, **DIAGNOSTIC)
    cell = run_cell(*parts.jax_twins(DIAGNOSTIC_ITERS), settings, DIAGNOSTIC_SEEDS)
    return [r.history[-1] for r in cell.replicates]


def check_diagnostic_agreement() -> list[tuple[bool, str]]:
    jax_rows, numpy_rows = diagnostic_rows.__wrapped__("jax"), diagnostic_rows("numpy")
    assert sorted(jax_rows[0]) == sorted(numpy_rows[0])
    return [same_distribution(*(np.array([row[metric] for row in rows]) for rows in (jax_rows, numpy_rows)))
            for metric in ("grad_variance", "grad_bias")]


@pytest.mark.slow
def test_the_gradient_variance_diagnostic_matches_numpy_on_the_gaussian_target():
    """grad_variance and grad_bias (against the exact gradient) over 24 seeds, both within 3 SE."""
    for agree, detail in check_diagnostic_agreement():
        assert agree, detail


@pytest.mark.slow
def test_a_wrong_scale_in_the_diagnostic_is_caught(monkeypatch):
    """The planted bug: the copies' gradients 1.25× too large (variance 1.56×, bias off) in the JAX engine."""
    from mcsa_bench.accel import engine

    correct = engine._Cell._diagnose

    def wrong_scale(self, replicate, seed, data, t):
        replicas, metrics, ok = correct(self, replicate, seed, data, t)
        return replicas, {"grad_variance": 1.25**2 * metrics["grad_variance"],
                          "grad_bias": 1.25 * metrics["grad_bias"]}, ok

    monkeypatch.setattr(engine._Cell, "_diagnose", wrong_scale)
    agreements = check_diagnostic_agreement()
    assert not all(agree for agree, _ in agreements), agreements
