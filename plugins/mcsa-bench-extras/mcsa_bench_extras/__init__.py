"""mcsa-bench-extras: components registered through mcsa-bench's plugin hooks.

- kernels ``rwmh`` (random-walk Metropolis, with a JAX twin: mcsa_bench_extras/jax_twins.py), ``mala``
  (Metropolis-adjusted Langevin) and ``barker_imh`` (independent Metropolis-Hastings with Barker's
  acceptance);
- families ``meanfield_laplace`` and ``sinh_arcsinh`` (written once in JAX);
- models ``eight_schools`` (``centered=false|true``), ``funnel`` (Neal's funnel, exact inclusive KL for
  Gaussian q) and ``eight_schools_jax`` (eight schools written once in JAX);
- optimizer ``rmsprop`` (with a JAX twin).
"""

from mcsa_bench import hookimpl
from mcsa_bench_extras.families import MeanFieldLaplace
from mcsa_bench_extras.kernels import MALA, BarkerIMH, RandomWalkMetropolis
from mcsa_bench_extras.models import EightSchools, Funnel
from mcsa_bench_extras.optimizers import RMSprop
from mcsa_bench_extras.written_in_jax import EightSchoolsJax, SinhArcsinh


@hookimpl
def register_kernels(register):
    # the JAX twin's module imports JAX: named, not imported, so the numpy engine never loads it
    register("rwmh", RandomWalkMetropolis, jax="mcsa_bench_extras.jax_twins:RandomWalkMetropolis")
    register("mala", MALA)
    register("barker_imh", BarkerIMH)


@hookimpl
def register_variational_families(register):
    register("meanfield_laplace", MeanFieldLaplace)
    register("sinh_arcsinh", SinhArcsinh)  # written in JAX: its own twin


@hookimpl
def register_models(register):
    register("eight_schools", EightSchools)
    register("funnel", Funnel)
    register("eight_schools_jax", EightSchoolsJax)  # written in JAX: its own twin


@hookimpl
def register_optimizers(register):
    register("rmsprop", RMSprop, jax="mcsa_bench_extras.jax_twins:RMSpropTwin")
