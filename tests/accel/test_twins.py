"""Each twin in the registry against its numpy component (mcsa_bench.testing.twins): log densities and
scores to 1e-10, kernels π-invariant, optimizers the same iterates, the cost each kernel and scheme
declares; and planted bugs the checks catch."""

import json
from pathlib import Path

import pytest

pytest.importorskip("jax")

from mcsa_bench import get_registry
from mcsa_bench.accel import kernels
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.testing.cli import check_command
from mcsa_bench.testing.twins import check_twin, kernel_invariance

#: every component the registry says runs on the JAX backend, with its defaults: a new component with a twin
#: (or written in JAX) is checked here without being added to a list
REGISTERED = [(kind, name, {}) for kind in ("model", "family", "kernel", "optimizer")
              for name in get_registry().covered(kind)
              if all(p.default is not p.empty for p in get_registry().get(kind, name).parameters().values())]
PPL_DATA = Path(__file__).resolve().parents[1] / "data" / "ppl"
#: and the options that change a twin's code path
VARIANTS = [
    ("model", "logistic", {"prior": "gaussian"}),
    ("family", "meanfield_gaussian", {"scale": "exp"}),
    ("family", "fullrank_gaussian", {"offdiagonal": "relative"}),
    ("family", "fullrank_gaussian", {"offdiagonal": "absolute", "scale": "exp"}),
    ("family", "meanfield_student_t", {"learn_df": True, "df": 3.0}),
    ("kernel", "hmc", {"mass": "identity", "adapt_steps": 0, "step_size": 0.3}),
    ("kernel", "ex2mcmc", {}), ("kernel", "ex2mcmc", {"mala_steps": 1, "step_size": 0.5}),
    ("model", "gaussian_mixture", {}), ("model", "student_t_mixture", {}), ("model", "many_well", {}),
    ("optimizer", "sgd", {"schedule": "inverse"}), ("optimizer", "momentum", {"schedule": "inverse_sqrt"}),
    ("optimizer", "nesterov", {"schedule": "step", "decay_every": 7}),
    ("optimizer", "adam", {"schedule": "cosine", "average_from": 0.5}),
    ("optimizer", "rmsprop", {"average_from": 0.5}),
    # the models a user's file defines: no defaults, so the registry's list leaves them to these
    ("model", "numpyro", {"source": str(PPL_DATA / "eight_schools_numpyro.py"),
                          "data": str(PPL_DATA / "eight_schools.json")}),
]


@pytest.mark.parametrize("kind, name, params", REGISTERED + VARIANTS, ids=lambda c: c if isinstance(c, str) else "")
def test_twin_agrees_with_its_numpy_component(kind, name, params):
    """A kernel's twin also declares the cost the numpy engine counts with every scheme it fits."""
    results = check_twin(kind, name, params)
    assert [r.check for r in results] == (["jax twin π-invariance", "jax twin cost"] if kind == "kernel"
                                          else ["jax twin"])
    for result in results:
        assert not result.failed, result.message


def test_the_registered_twins_include_the_built_ins_and_the_plugins():
    assert {("kernel", "rwmh"), ("optimizer", "rmsprop"), ("model", "eight_schools_jax"), ("family", "sinh_arcsinh"),
            ("model", "radon"), ("family", "meanfield_student_t")} <= {(kind, name) for kind, name, _ in REGISTERED}


@pytest.mark.parametrize("estimator", get_registry().covered("estimator"))
def test_a_schemes_twin_declares_the_cost_the_numpy_engine_counts(estimator):
    [result] = check_twin("estimator", estimator)
    assert (result.check, result.failed) == ("jax twin cost", False), result.message


def test_the_check_command_fails_a_plugin_twin_that_declares_a_wrong_cost(monkeypatch, capsys):
    """The planted bug: the extras' rwmh twin declares one log density too many per chain and step."""
    from mcsa_bench.testing import twins as twin_checks
    from mcsa_bench.testing.results import Measurement
    from mcsa_bench_extras.jax_twins import RandomWalkMetropolis

    monkeypatch.setattr(RandomWalkMetropolis, "step_cost", lambda self, num_chains, n_proposals=1: (2 * num_chains, 0))
    monkeypatch.setattr(twin_checks, "kernel_invariance", lambda twin: Measurement(0.0, 1.0, "not the subject"))
    assert check_command(["kernel", "rwmh", "--jax"]) == 1
    lines = capsys.readouterr().out.splitlines()
    [failed] = [line for line in lines if line.startswith("FAILED")]
    assert "jax twin cost: problems 3 > 0 (msc + rwmh N=4" in failed  # each scheme it fits: msc, jsa, pmcsa
    assert ("msc + rwmh N=4: through iteration 1 the twin declares 3 log densities and 0 gradients, the numpy "
            "engine counted 2 log densities and 0 gradients") in failed


def test_the_invariance_check_catches_a_wrong_sign_in_the_weights(monkeypatch):
    """The planted bug: log w = log p + log q instead of log p - log q for the current states."""
    monkeypatch.setattr(kernels, "_current_log_weights", lambda chains, q: chains.log_p + q.log_prob(chains.z))
    measurement = kernel_invariance(kernels.IMH(IMH()))
    assert not measurement.passed, measurement.detail


def test_the_check_command_checks_a_twin_with_jax(capsys):
    assert check_command(["optimizer", "adam", "lr=0.05", "--jax", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert (result["check"], result["status"], result["measured"] <= 1e-10) == ("jax twin", "passed", True)
    with pytest.raises(ConfigurationError, match=r"kernel 'mala' has no JAX twin \(backend=jax\); covered kernels: "):
        check_command(["kernel", "mala", "--jax"])
