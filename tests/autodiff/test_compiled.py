"""The numpy engine's face of components written once in JAX (mcsa_bench/autodiff/compiled.py): the extras'
eight schools written in JAX gives the hand-written model's log joint and gradient to 1e-10; a mean-field
Gaussian written in JAX gives the built-in family's log q, score, draws, reparameterization and ∇_z log q to
1e-10; both pass the conformance checks, and a planted wrong sign in a JAX-written density is caught by
`check`; the components pickle and copy without their compiled functions."""

import copy
import pickle

import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

from mcsa_bench import get_registry
from mcsa_bench.autodiff import AutodiffFamily
from mcsa_bench.builtin.families import MeanFieldGaussian
from mcsa_bench.testing import check_component
from mcsa_bench_extras import written_in_jax
from mcsa_bench_extras.models import EightSchools
from mcsa_bench_extras.written_in_jax import EightSchoolsJax

RTOL = 1e-10


def relative_error(got, expected) -> float:
    return float(np.max(np.abs(np.asarray(got) - expected) / np.maximum(1.0, np.abs(expected))))


class JaxMeanFieldGaussian(AutodiffFamily):
    """The built-in meanfield_gaussian (softplus scale, λ = (μ, ψ)) in ten lines of JAX."""

    @property
    def num_params(self) -> int:
        return 2 * self.dim

    def init_params(self):
        return MeanFieldGaussian(self.dim).init_params()

    def transform(self, params, eps):
        return params[: self.dim] + jax.nn.softplus(params[self.dim:]) * eps

    def log_density(self, params, z):
        return jnp.sum(jax.scipy.stats.norm.logpdf(z, params[: self.dim], jax.nn.softplus(params[self.dim:])))


@pytest.mark.parametrize("centered", [False, True])
def test_eight_schools_written_in_jax_is_the_hand_written_model_to_1e_10(centered):
    z = 1.5 * np.random.default_rng(0).standard_normal((64, 10))
    hand, written = EightSchools(centered), EightSchoolsJax(centered)
    log_p, grad = hand.log_joint_and_grad(z)
    written_log_p, written_grad = written.log_joint_and_grad(z)
    assert relative_error(written.log_joint(z), log_p) < RTOL and relative_error(written_log_p, log_p) < RTOL
    assert relative_error(written_grad, grad) < RTOL and written.has_gradient
    assert written.latent_names() == hand.latent_names() and written.reference().describes(hand)


def test_a_mean_field_gaussian_written_in_jax_is_the_built_in_family_to_1e_10():
    dim = 6
    built_in, written = MeanFieldGaussian(dim), JaxMeanFieldGaussian(dim)
    rng = np.random.default_rng(1)
    params = built_in.init_params() + 0.4 * rng.standard_normal(2 * dim)
    z, eps, cotangent = (rng.standard_normal((32, dim)) for _ in range(3))
    pairs = {
        "log q": (written.log_prob(params, z), built_in.log_prob(params, z)),
        "score": (written.score(params, z), built_in.score(params, z)),
        "draws": (written.sample(params, np.random.default_rng(2), 32),
                  built_in.sample(params, np.random.default_rng(2), 32)),
        "draws with log q": (np.column_stack(written.sample_with_log_prob(params, np.random.default_rng(3), 8)),
                             np.column_stack(built_in.sample_with_log_prob(params, np.random.default_rng(3), 8))),
        "reparameterize": (written.reparameterize(params, eps), built_in.reparameterize(params, eps)),
        "reparameterize_vjp": (written.reparameterize_vjp(params, eps, cotangent),
                               built_in.reparameterize_vjp(params, eps, cotangent)),
        "grad_log_prob": (written.grad_log_prob(params, z), built_in.grad_log_prob(params, z)),
        # one reverse pass over the batch's mean (a fit to draws) against the built-in's mean of its B scores
        "mean log q and score": (np.append(*written.mean_log_prob_and_score(params, z)),
                                 np.append(*built_in.mean_log_prob_and_score(params, z))),
    }
    errors = {name: relative_error(*pair) for name, pair in pairs.items()}
    assert max(errors.values()) < RTOL, errors


@pytest.mark.parametrize("kind, name", [("model", "eight_schools_jax"), ("family", "sinh_arcsinh")])
def test_the_extras_components_written_in_jax_pass_their_conformance_checks(kind, name):
    for result in check_component(kind, name):
        assert not result.failed, result.message


def test_a_planted_wrong_sign_in_a_written_density_is_caught_by_check(monkeypatch):
    """The likelihood with the wrong sign: autodiff differentiates the wrong density faithfully, so the
    finite-difference check passes; the model's reference (check points of the true posterior) does not."""
    correct = written_in_jax._normal_log_pdf
    monkeypatch.setattr(written_in_jax, "_normal_log_pdf",
                        lambda x, mean, sd: correct(x, mean, sd) + ((x - mean) / sd) ** 2)  # −½u² becomes +½u²
    results = {result.check: result for result in check_component("model", "eight_schools_jax")}
    assert not results["gradient_finite_differences"].failed
    reference = results["reference"]
    assert reference.failed and "differs from the reference's check densities" in reference.message


def test_a_component_written_in_jax_pickles_and_copies_without_its_compiled_functions():
    model = get_registry().build("model", "eight_schools_jax")
    z = np.zeros((2, model.dim))
    model.log_joint(z)  # compiled now
    for other in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert "_compiled_functions" not in vars(other) and np.array_equal(other.log_joint(z), model.log_joint(z))
