"""Each built-in twin against its numpy component (mcsa_bench.testing.twins): log densities and
scores to 1e-10, kernels π-invariant, optimizers the same iterates; and a planted kernel bug the
invariance check catches."""

import json

import pytest

pytest.importorskip("jax")

from mcsa_bench.accel import kernels
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.testing.cli import check_command
from mcsa_bench.testing.twins import check_twin, kernel_invariance

CASES = [
    ("model", "gaussian", {}), ("model", "logistic", {}), ("model", "logistic", {"prior": "gaussian"}),
    ("family", "meanfield_gaussian", {}), ("family", "meanfield_gaussian", {"scale": "exp"}),
    ("family", "fullrank_gaussian", {}), ("family", "fullrank_gaussian", {"offdiagonal": "relative"}),
    ("family", "fullrank_gaussian", {"offdiagonal": "absolute", "scale": "exp"}),
    ("family", "meanfield_student_t", {}), ("family", "meanfield_student_t", {"learn_df": True, "df": 3.0}),
    ("kernel", "imh", {}), ("kernel", "cis", {}), ("kernel", "hmc", {}),
    ("kernel", "hmc", {"mass": "identity", "adapt_steps": 0, "step_size": 0.3}),
    ("optimizer", "sgd", {"schedule": "inverse"}), ("optimizer", "momentum", {"schedule": "inverse_sqrt"}),
    ("optimizer", "nesterov", {"schedule": "step", "decay_every": 7}),
    ("optimizer", "adam", {"schedule": "cosine", "average_from": 0.5}),
]


@pytest.mark.parametrize("kind, name, params", CASES, ids=lambda c: c if isinstance(c, str) else "")
def test_twin_agrees_with_its_numpy_component(kind, name, params):
    [result] = check_twin(kind, name, params)
    assert not result.failed, result.message


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
