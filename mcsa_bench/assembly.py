"""Build a complete experiment (model, family, kernel, estimator, optimizer) from registry names.

Shared by the CLI, the benchmark script and notebooks::

    parts = assemble(get_registry(), model=("gaussian", {"dim": 10}), estimator="pmcsa", n_samples=10)
    result = run(*parts.run_args(), Settings(n_iters=1000, seed=0))

The kernel an estimator runs with is decided here alone (:func:`resolve_kernel`): a job resolves it
once and reads the :class:`KernelChoice` from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mcsa_bench.api import (
    Array,
    ConfigurationError,
    Estimator,
    Kernel,
    MetricSpec,
    Model,
    Optimizer,
    VariationalFamily,
    declared_metrics,
)
from mcsa_bench.plugins import Component, Registry
from mcsa_bench.references import CORE, PosteriorReference, find, package_of, shipped
from mcsa_bench.references.samples import target_draws

#: a component given by name alone or by (name, parameters)
Spec = str | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Assembly:
    """The built components and the registry entries they came from.

    ``kernel`` is None (and ``sources`` has no ``"kernel"``) for schemes that use no kernel;
    ``reference`` is the model's reference posterior, None when it has none (mcsa_bench.references).
    """

    model: Model
    family: VariationalFamily
    kernel: Kernel | None
    estimator: Estimator
    optimizer: Optimizer
    sources: dict[str, Component]
    registry: Registry = field(compare=False, repr=False)  # where the components' JAX twins are found
    model_params: Mapping[str, Any] = field(default_factory=dict)  # what the model was built with

    @cached_property
    def reference(self) -> PosteriorReference | None:
        """The model's reference posterior, found on first use (a job's run) rather than at assembly,
        which pre-flight does for every job of a sweep."""
        return find(self.sources["model"].name, self.model, self.model_identity())

    def model_identity(self) -> dict[str, Any]:
        """What a reference a user made for the model is filed under (:func:`identifying_params`)."""
        return identifying_params(self.sources["model"], self.model_params)

    @cached_property
    def target_draws(self) -> Array | None:
        """Draws of π for the sample-based metrics (mcsa_bench.references.samples): the model's exact draws,
        else its reference's, else None."""
        return target_draws(self.model, self.reference)

    def run_args(self) -> tuple[Model, VariationalFamily, Estimator, Optimizer]:
        return self.model, self.family, self.estimator, self.optimizer

    def metric_specs(self) -> dict[str, MetricSpec]:
        """What the metrics the run's model, scheme and kernel produce are (``api.declared_metrics``)."""
        return declared_metrics(self.model, self.estimator, self.kernel)

    def jax_twins(self, n_iters: int) -> tuple:
        """(model, family, scheme, optimizer): the components' JAX twins for a run of ``n_iters``, the
        arguments of ``mcsa_bench.accel.engine.run_cell``, each built from its numpy component (so options,
        data and preprocessing live once); one line without JAX, or naming the covered components of a
        kind when one of them has no twin (plugins.Registry.jax_twin)."""
        kernel = None if self.kernel is None else self.jax_twin("kernel")
        return (self.jax_twin("model"), self.jax_twin("family"), self.jax_twin("estimator", kernel),
                self.jax_twin("optimizer", n_iters))

    def jax_twin(self, kind: str, *args: object) -> object:
        """The JAX twin of the ``kind`` component, from the built component (and ``args``: an estimator's
        kernel twin, an optimizer's T); a component written once in JAX is its own, whatever made it."""
        import mcsa_bench.accel  # noqa: F401  (without JAX: one line saying which extra to install)
        from mcsa_bench.autodiff import twin_factory, written_in_jax

        built = {"model": self.model, "family": self.family, "kernel": self.kernel, "estimator": self.estimator,
                 "optimizer": self.optimizer}[kind]
        factory = (twin_factory(kind) if written_in_jax(type(built))
                   else self.registry.jax_twin(kind, self.sources[kind].name))
        return factory(built, *args)


def identifying_params(component: Component, params: Mapping[str, Any]) -> dict[str, Any]:
    """A component's parameters as they identify it: as given, or as its factory's ``identifying_params``
    says (a model read from files: their contents' digests instead of their paths, mcsa_bench/autodiff/ppl.py)."""
    identify = getattr(component.factory, "identifying_params", None)
    return dict(params) if identify is None else identify(dict(params))


def _split(spec: Spec) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    name, params = spec
    return name, dict(params)


def shipped_references(registry: Registry) -> tuple[PosteriorReference, ...]:
    """Every reference posterior shipped by the core and by the packages that define the registered
    models (``mcsa-bench references``), ordered by name."""
    packages = dict.fromkeys([CORE, *(package_of(c.factory) for c in registry.components("model"))])
    return tuple(sorted((r for package in packages for r in shipped(package=package)), key=lambda r: r.name))


def _kernels_that_fit(registry: Registry, scheme: Callable[..., Estimator]) -> list[str]:
    check = getattr(scheme, "kernel_incompatibility", lambda kernel: None)
    return [c.name for c in registry.components("kernel") if check(c.factory) is None]


@dataclass(frozen=True)
class KernelChoice:
    """The kernel a scheme runs with, as :func:`resolve_kernel` decided it."""

    name: str | None  # None: the scheme uses no kernel
    params: Mapping[str, Any]  # every parameter, the kernel's defaults filled in
    default: str | None  # the scheme's default_kernel (a method is named by its kernel only when it differs)

    @property
    def config(self) -> dict[str, Any] | None:
        """As a run's effective config records it: ``{"name": ..., **params}``, or None."""
        return None if self.name is None else {"name": self.name, **self.params}


def resolve_kernel(registry: Registry, estimator: str, kernel: Spec | None, *,
                   scheme: Callable[..., Estimator] | None = None) -> KernelChoice:
    """The kernel ``estimator`` runs with: ``kernel``, or when None the scheme's ``default_kernel``
    with that kernel's default parameters.

    ``scheme`` is the estimator's factory when it is not registered (a conformance check of a
    factory). Raises :class:`ConfigurationError` for a scheme without a default kernel, a kernel
    given to a scheme that uses none, and a kernel that does not fit (listing those that do).
    """
    scheme = scheme or registry.get("estimator", estimator).factory
    default = getattr(scheme, "default_kernel", None)
    if not getattr(scheme, "uses_kernel", True):
        if kernel is not None:
            raise ConfigurationError(f"estimator {estimator!r} uses no kernel (it draws from q directly); "
                                     f"kernel {_split(kernel)[0]!r} does not fit: leave kernel unset")
        return KernelChoice(None, {}, default)
    if kernel is None:
        if default is None:
            raise ConfigurationError(f"estimator {estimator!r} has no default kernel; choose one with kernel=<name>")
        kernel = default
    name, params = _split(kernel)
    component = registry.get("kernel", name)
    problem = getattr(scheme, "kernel_incompatibility", lambda kernel: None)(component.factory)
    if problem:
        raise ConfigurationError(f"estimator {estimator!r} {problem}; kernel {name!r} does not fit. "
                                 f"Kernels that fit: {', '.join(_kernels_that_fit(registry, scheme))}")
    defaults = {n: p.default for n, p in component.parameters().items() if p.default is not p.empty}
    return KernelChoice(name, {**defaults, **params}, default)


def assemble(
    registry: Registry,
    *,
    model: Spec,
    estimator: Spec,
    n_samples: int,
    family: Spec = "meanfield_gaussian",
    kernel: Spec | KernelChoice | None = None,
    optimizer: Spec = "adam",
) -> Assembly:
    """Build every component; ``kernel=None`` takes the estimator's default kernel, a
    :class:`KernelChoice` is the kernel :func:`resolve_kernel` decided before.

    An estimator/kernel pair that does not fit is a :class:`ConfigurationError` listing the
    kernels that do; so is a kernel given to a scheme that uses none, and a kernel or scheme
    that cannot run on the model with the family (e.g. no gradient of the log joint).
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ConfigurationError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    estimator_name, estimator_params = _split(estimator)
    estimator_component = registry.get("estimator", estimator_name)
    if not isinstance(kernel, KernelChoice):
        kernel = resolve_kernel(registry, estimator_name, kernel)

    model_name, model_params = _split(model)
    family_name, family_params = _split(family)
    optimizer_name, optimizer_params = _split(optimizer)
    built_model = registry.build("model", model_name, **model_params)
    built_family = registry.build("family", family_name, dim=built_model.dim, **family_params)
    built_kernel = None if kernel.name is None else registry.build("kernel", kernel.name, **kernel.params)
    built_estimator = registry.build("estimator", estimator_name, kernel=built_kernel, n_samples=n_samples,
                                     **estimator_params)
    for kind, name, built in (("kernel", kernel.name, built_kernel), ("estimator", estimator_name, built_estimator)):
        check = getattr(built, "model_incompatibility", None)
        problem = check(built_model, built_family) if check else None
        if problem:
            raise ConfigurationError(
                f"{kind} {name!r} {problem}; model {model_name!r} with family {family_name!r} does not fit")
    sources = {
        "model": registry.get("model", model_name),
        "family": registry.get("family", family_name),
        "kernel": None if kernel.name is None else registry.get("kernel", kernel.name),
        "estimator": estimator_component,
        "optimizer": registry.get("optimizer", optimizer_name),
    }
    return Assembly(
        model=built_model,
        family=built_family,
        kernel=built_kernel,
        estimator=built_estimator,
        optimizer=registry.build("optimizer", optimizer_name, **optimizer_params),
        sources={kind: source for kind, source in sources.items() if source is not None},
        registry=registry,
        model_params=model_params,
    )
