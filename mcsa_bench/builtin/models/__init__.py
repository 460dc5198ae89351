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


@hookimpl
def register_models(register):
    register("gaussian", GaussianTarget)
    register("logistic", HierarchicalLogistic)
    register("gp_classification", GPClassification)
    register("gp_regression", GPRegression)
    register("bnn", BayesianNeuralNetwork)
    register("radon", Radon)
    register("stochastic_volatility", StochasticVolatility)
    register("gaussian_mixture", GaussianMixture)
    register("student_t_mixture", StudentTMixture)
    register("many_well", ManyWell)
