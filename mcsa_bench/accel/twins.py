"""Which component has a JAX twin, and how one is made (docs/plugins.md, "A JAX twin").

A twin factory takes the built numpy component and returns its JAX counterpart, so a twin shares
its component's options, data and preprocessing:

| kind        | factory(numpy component, ...)            | returns                                  |
|-------------|------------------------------------------|------------------------------------------|
| model       | (model)                                  | accel.models.JaxModel                    |
| family      | (family)                                 | accel.families.Family                    |
| kernel      | (kernel)                                 | accel.kernels.Kernel                     |
| estimator   | (estimator, kernel twin or None)         | accel.schemes.Scheme                     |
| optimizer   | (optimizer, n_iters)                     | accel.optimizers.Optimizer               |

Built-ins are registered here. A plugin registers its twins through the entry-point group
``mcsa_bench.jax_twins``: the entry point names a callable ``register_jax_twins(register)`` that
calls ``register(kind, name, factory)`` with the registry name of its numpy component. The group
is loaded only when a twin is asked for, so a plugin's JAX code is never imported by the numpy
backend; a plugin whose twins fail to load is a warning naming it, as for components.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from importlib.metadata import entry_points

from mcsa_bench.accel import families, kernels, models, optimizers, schemes
from mcsa_bench.api import ConfigurationError

ENTRY_POINT_GROUP = "mcsa_bench.jax_twins"
KINDS = ("model", "family", "kernel", "estimator", "optimizer")
BUILTIN_MODELS = ("gaussian", "logistic", "gp_classification", "gp_regression", "bnn", "radon",
                  "stochastic_volatility", "gaussian_mixture", "student_t_mixture", "many_well")

_twins: dict[tuple[str, str], Callable] = {}
_loaded = False


def register(kind: str, name: str, factory: Callable) -> None:
    """Register ``factory`` as the JAX twin of the ``kind`` component registered as ``name``."""
    if kind not in KINDS:
        raise ConfigurationError(f"unknown component kind {kind!r} for a JAX twin; allowed: {', '.join(KINDS)}")
    if not callable(factory):
        raise ConfigurationError(f"the JAX twin of {kind} {name!r} must be callable, got {factory!r}")
    if (kind, name) in _twins:
        raise ConfigurationError(f"{kind} {name!r} already has a JAX twin")
    _twins[kind, name] = factory


def _register_builtins() -> None:
    for name in BUILTIN_MODELS:
        register("model", name, models.twin)
    register("family", "meanfield_gaussian", families.MeanFieldGaussian)
    register("family", "fullrank_gaussian", families.FullRankGaussian)
    register("family", "meanfield_student_t", families.MeanFieldStudentT)
    register("kernel", "imh", kernels.IMH)
    register("kernel", "cis", kernels.CIS)
    register("kernel", "hmc", kernels.HMC)
    register("kernel", "ex2mcmc", kernels.Ex2MCMC)
    for name, scheme in (("msc", schemes.MSC), ("msc_rb", schemes.MSCRB), ("jsa", schemes.JSA),
                         ("pmcsa", schemes.PMCSA), ("snis", schemes.SNIS), ("rws", schemes.RWS),
                         ("elbo", schemes.ELBO)):
        register("estimator", name, scheme)
    for name in ("sgd", "momentum", "nesterov", "adam"):
        register("optimizer", name, optimizers.Optimizer)


def _load() -> None:
    """The built-ins, then every plugin's ``register_jax_twins`` (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    _register_builtins()
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        staged = dict(_twins)
        try:
            entry.load()(register)
        except Exception as error:  # a broken plugin must not break the others
            _twins.clear()
            _twins.update(staged)
            warnings.warn(f"JAX twins of plugin {entry.name!r} ({entry.value}) failed to load: "
                          f"{type(error).__name__}: {error}", stacklevel=2)


def covered(kind: str) -> list[str]:
    """The names of the ``kind`` components that have a JAX twin."""
    _load()
    return sorted(name for k, name in _twins if k == kind)


def twin_of(kind: str, name: str) -> Callable:
    """The twin factory of the ``kind`` component ``name``; a ConfigurationError naming what is covered."""
    _load()
    factory = _twins.get((kind, name))
    if factory is None:
        raise ConfigurationError(f"{kind} {name!r} has no JAX twin (backend=jax); covered {kind}s: "
                                 f"{', '.join(covered(kind))}")
    return factory


def cell_components(assembly, n_iters: int):
    """(model, family, scheme, optimizer) twins of an ``mcsa_bench.assembly.Assembly``'s components,
    each refused with one line if it has none: run_cell's arguments."""
    name = {kind: source.name for kind, source in assembly.sources.items()}
    model = twin_of("model", name["model"])(assembly.model)
    family = twin_of("family", name["family"])(assembly.family)
    kernel = None if assembly.kernel is None else twin_of("kernel", name["kernel"])(assembly.kernel)
    scheme = twin_of("estimator", name["estimator"])(assembly.estimator, kernel)
    optimizer = twin_of("optimizer", name["optimizer"])(assembly.optimizer, n_iters)
    return model, family, scheme, optimizer
