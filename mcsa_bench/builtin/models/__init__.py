"""Built-in models (docs/methods.md §6; docs/models.md)."""

from mcsa_bench.builtin.models.bnn import BayesianNeuralNetwork
from mcsa_bench.builtin.models.gaussian import GaussianTarget
from mcsa_bench.builtin.models.gp import GPClassification, GPRegression
from mcsa_bench.builtin.models.logistic import HierarchicalLogistic
from mcsa_bench.builtin.models.many_well import ManyWell
from mcsa_bench.builtin.models.mixtures import GaussianMixture, StudentTMixture
from mcsa_bench.builtin.models.radon import Radon
from mcsa_bench.builtin.models.stochastic_volatility import StochasticVolatility
from mcsa_bench.hookspecs import hookimpl

#: every built-in model's JAX twin: built from the numpy model's arrays (docs/models.md, "The JAX twins")
TWIN = "mcsa_bench.accel.models:twin"


@hookimpl
def register_models(register):
    register("gaussian", GaussianTarget, jax=TWIN)
    register("logistic", HierarchicalLogistic, jax=TWIN)
    register("gp_classification", GPClassification, jax=TWIN)
    register("gp_regression", GPRegression, jax=TWIN)
    register("bnn", BayesianNeuralNetwork, jax=TWIN)
    register("radon", Radon, jax=TWIN)
    register("stochastic_volatility", StochasticVolatility, jax=TWIN)
    register("gaussian_mixture", GaussianMixture, jax=TWIN)
    register("student_t_mixture", StudentTMixture, jax=TWIN)
    register("many_well", ManyWell, jax=TWIN)
