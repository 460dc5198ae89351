"""``family=flow`` (mcsa_bench/autodiff/flow.py): at its starting λ each coupling flow is N(μ, diag σ²) exactly
(log q to rounding, draws a permutation of μ + σε); its scores ∇_λ log q and ∇_z log q and its
reparameterization agree with finite differences away from the start; it passes the family conformance checks
and the twin check (its JAX face gives the numpy face's log q and scores to 1e-10); bad options and a missing
flowjax are one line; it pickles without its built flow; its evaluation logs Monte Carlo estimates with their
standard errors (no closed form); and a short pMCSA run on gaussian_mixture through the CLI finishes on both
backends, logging them."""

import pickle
import sys

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("jax")
pytest.importorskip("flowjax")

from mcsa_bench.api import ConfigurationError
from mcsa_bench.autodiff.flow import FlowFamily
from mcsa_bench.testing import check_component
from mcsa_bench.testing.families import CHECKS
from mcsa_bench.testing.twins import check_twin
from tests.support import cli_in_process

COUPLINGS = ("affine", "spline")
#: a small flow: the checks' batches compile in seconds
SMALL = {"layers": 2, "width": 8}


@pytest.mark.parametrize("coupling", COUPLINGS)
def test_at_its_start_a_flow_is_the_gaussian_of_init_mean_and_init_std(coupling):
    family = FlowFamily(4, coupling=coupling, init_mean=1.5, init_std=0.7, **SMALL)
    params = family.init_params()
    z = np.random.default_rng(0).normal(1.5, 2.0, (64, 4))
    expected = stats.norm.logpdf(z, 1.5, 0.7).sum(axis=1)
    assert np.max(np.abs(family.log_prob(params, z) - expected)) < 1e-12
    eps = np.random.default_rng(1).standard_normal((64, 4))
    draws = family.reparameterize(params, eps)  # the coupling layers' fixed permutations of ε, nothing else
    assert np.allclose(np.sort(draws, axis=1), np.sort(1.5 + 0.7 * eps, axis=1), rtol=0, atol=1e-12)
    assert not np.allclose(draws, 1.5 + 0.7 * eps)


@pytest.mark.parametrize("coupling", COUPLINGS)
@pytest.mark.parametrize("check", ["score_finite_differences", "grad_log_prob", "log_prob_normalization"])
def test_a_flows_scores_and_density_pass_their_exact_checks(coupling, check):
    """At λ = init_params() + 0.2 noise (the checks' point): every conditioner and spline bin in use."""
    result = CHECKS[check](lambda dim: FlowFamily(dim, coupling=coupling, **SMALL))
    assert result.measured <= result.tolerance, result.detail


@pytest.mark.slow
def test_a_spline_flow_passes_the_family_conformance_checks():
    """(The affine flow's: tests/testing/test_conformance.py.) The spline's bins on [−3, 3] with 4 knots: the
    mean-score z tests need each bin's parameters to see enough of the 20,000 draws (a bin the draws visit a
    dozen times, as the outer bins of 8 on [−4, 4] do, gives a mean score far from normal: |z| 4.9 at 20,000
    draws, 1.3 at 100,000)."""
    params = {**SMALL, "coupling": "spline", "knots": 4, "interval": 3.0}
    results = check_component("family", "flow", params)
    assert [r.check for r in results if r.failed] == [], [r.message for r in results if r.failed]
    assert {r.check for r in results if r.status == "passed"} >= {"sampling_moments", "reparameterization"}


def test_the_conformance_checks_compile_a_family_once_per_dimension_and_state(monkeypatch):
    """check_factory's builds of a family written in JAX share the first build's compiled functions when their
    dimension and state are its (a flow's checks build it ten times); a build of other state compiles its own."""
    from mcsa_bench.testing import check_factory

    compiled = []
    original = FlowFamily._compile
    monkeypatch.setattr(FlowFamily, "_compile", lambda self: compiled.append(self.dim) or original(self))
    built = []
    check_factory("family", lambda dim: built.append(dim) or FlowFamily(dim, **SMALL),
                  checks=["sampling_moments", "reparameterization"])
    assert sorted(compiled) == sorted(set(built)) and len(built) > len(compiled)  # one per dimension
    compiled.clear()
    stds = iter(np.linspace(0.5, 1.5, 100))
    check_factory("family", lambda dim: FlowFamily(dim, init_std=next(stds), **SMALL),
                  checks=["sampling_moments", "reparameterization"])
    assert len(compiled) > len(set(compiled))  # every build other state: none shares


@pytest.mark.parametrize("coupling", COUPLINGS)
def test_a_flows_jax_face_is_its_numpy_face(coupling):
    for result in check_twin("family", "flow", {**SMALL, "coupling": coupling}):
        assert not result.failed, result.message


@pytest.mark.parametrize("options, problem", [
    ({"coupling": "maf"}, "family.coupling=maf: must be one of affine, spline"),
    ({"layers": 0}, "family.layers=0: must be an integer >= 1"),
    ({"activation": "gelu"}, "family.activation=gelu: must be one of relu, tanh"),
])
def test_a_flows_bad_options_are_one_line(options, problem):
    with pytest.raises(ConfigurationError, match=problem):
        FlowFamily(3, **options)


def test_without_flowjax_a_flow_is_refused_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "flowjax", None)
    refusal = r"^family FlowFamily needs flowjax: pip install 'mcsa-bench\[flows\]'$"
    with pytest.raises(ConfigurationError, match=refusal):
        FlowFamily(3)


def test_a_flow_pickles_without_its_built_flow_and_rebuilds_it():
    family = FlowFamily(3, coupling="spline", **SMALL)
    params, z = family.init_params() + 0.1, np.zeros((2, 3))
    family.log_prob(params, z)  # compiled now
    assert set(family.__getstate__()).isdisjoint({"_flow_structure", "_compiled_functions"})
    copy = pickle.loads(pickle.dumps(family))
    assert np.array_equal(copy.log_prob(params, z), family.log_prob(params, z))


def test_a_flows_metrics_are_monte_carlo_estimates_with_standard_errors_on_both_backends():
    """Away from its Gaussian start, on the Gaussian target: KL(π‖q), KL(q‖π) and the marginal metrics against
    the target's reference, each with its ``_se`` (the excess KL's fit of a flow to the reference's draws takes a
    minute: left to the CLI runs below); the JAX twin's KLs from its own draws agree with numpy's
    within their standard errors (sd of the difference: the two ses in quadrature, 4 of them)."""
    import jax

    from mcsa_bench.accel.models import twin
    from mcsa_bench.api import Approximation
    from mcsa_bench.autodiff.twins import FamilyTwin
    from mcsa_bench.builtin.models.gaussian import GaussianTarget
    from mcsa_bench.references.accuracy import MARGINAL_METRICS, marginal_metrics

    model = GaussianTarget(dim=2, nu=5.0, seed=1)
    family = FlowFamily(2, coupling="spline", **SMALL)
    params = family.init_params() + 0.1 * np.random.default_rng(2).standard_normal(family.num_params)
    q = Approximation(family, params)
    numpy_kl = model.evaluate(q, np.random.default_rng(0))
    jax_q, evaluate = FamilyTwin(family).bind(params), twin(model).evaluate
    jax_kl = jax.jit(lambda key: evaluate(key, jax_q))(jax.random.key(0))
    assert set(numpy_kl) == set(jax_kl) == {"kl_inclusive", "kl_exclusive", "kl_inclusive_se", "kl_exclusive_se"}
    for name in ("kl_inclusive", "kl_exclusive"):
        se = np.hypot(numpy_kl[f"{name}_se"], float(jax_kl[f"{name}_se"]))
        assert 0 < se and abs(numpy_kl[name] - float(jax_kl[name])) <= 4 * se, name
    marginal = marginal_metrics(q, model.reference(), np.random.default_rng(0))  # ReferenceScore's, less the excess KL
    assert all(marginal[f"{name}_se"] > 0 for name in MARGINAL_METRICS), marginal


@pytest.mark.slow
@pytest.mark.parametrize("coupling", COUPLINGS)
def test_a_short_pmcsa_run_with_a_flow_finishes_on_both_backends(coupling, tmp_path, store_in, monkeypatch):
    from mlflow.tracking import MlflowClient

    from mcsa_bench.references.accuracy import MARGINAL_METRICS

    store_in(tmp_path)
    for backend in ("numpy", "jax"):
        result = cli_in_process("run", f"backend={backend}", "model=gaussian_mixture", "model.num_modes=8",
                                "model.dim=2", "family=flow", f"family.coupling={coupling}", "family.layers=2",
                                "family.width=8", "family.init_std=10", "estimator=pmcsa", "n_iters=30",
                                "eval_every=30", cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0 and "Finished 30 iterations" in result.stdout, (backend, result.stderr)
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    logged = {run.data.params["backend"]: run.data.metrics for run in runs}
    assert set(logged) == {"numpy", "jax"}
    for backend, metrics in logged.items():  # the marginal metrics by Monte Carlo: each with its standard error
        assert all(metrics[f"{name}_se"] > 0 for name in MARGINAL_METRICS), (backend, metrics)
