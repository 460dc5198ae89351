"""Built-in models (reference.md §6)."""

from mcsa_bench.builtin.models.gaussian import GaussianTarget
from mcsa_bench.hookspecs import hookimpl


@hookimpl
def register_models(register):
    register("gaussian", GaussianTarget)
