"""Build a complete experiment (model, family, kernel, estimator, optimizer) from registry names.

Shared by the CLI, the benchmark script and notebooks::

    parts = assemble(get_registry(), model=("gaussian", {"dim": 10}), estimator="pmcsa", n_samples=10)
    result = run(*parts.run_args(), n_iters=1000, seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Union

from mcsa_bench.api import ConfigurationError, Estimator, Kernel, Model, Optimizer, VariationalFamily
from mcsa_bench.plugins import Component, Registry

#: a component given by name alone or by (name, parameters)
Spec = Union[str, tuple[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Assembly:
    """The built components and the registry entries they came from."""

    model: Model
    family: VariationalFamily
    kernel: Kernel
    estimator: Estimator
    optimizer: Optimizer
    sources: dict[str, Component]

    def run_args(self) -> tuple[Model, VariationalFamily, Estimator, Optimizer]:
        return self.model, self.family, self.estimator, self.optimizer


def _split(spec: Spec) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    name, params = spec
    return name, dict(params)


def compatible_kernels(registry: Registry, estimator: str) -> list[str]:
    """Names of the registered kernels the estimator can use."""
    scheme = registry.get("estimator", estimator).factory
    check = getattr(scheme, "kernel_incompatibility", lambda kernel: None)
    return [c.name for c in registry.components("kernel") if check(c.factory) is None]


def assemble(
    registry: Registry,
    *,
    model: Spec,
    estimator: Spec,
    n_samples: int,
    family: Spec = "meanfield_gaussian",
    kernel: Spec | None = None,
    optimizer: Spec = "adam",
) -> Assembly:
    """Build every component; ``kernel=None`` takes the estimator's default kernel.

    An estimator/kernel pair that does not fit is a :class:`ConfigurationError` listing the
    kernels that do.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ConfigurationError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    estimator_name, estimator_params = _split(estimator)
    estimator_component = registry.get("estimator", estimator_name)
    if kernel is None:
        kernel = getattr(estimator_component.factory, "default_kernel", None)
        if kernel is None:
            raise ConfigurationError(f"estimator {estimator_name!r} has no default kernel; choose one with kernel=<name>")
    kernel_name, kernel_params = _split(kernel)
    kernel_component = registry.get("kernel", kernel_name)
    check = getattr(estimator_component.factory, "kernel_incompatibility", lambda kernel: None)
    problem = check(kernel_component.factory)
    if problem:
        raise ConfigurationError(
            f"estimator {estimator_name!r} {problem}; kernel {kernel_name!r} does not fit. "
            f"Kernels that fit: {', '.join(compatible_kernels(registry, estimator_name))}"
        )

    model_name, model_params = _split(model)
    family_name, family_params = _split(family)
    optimizer_name, optimizer_params = _split(optimizer)
    built_model = registry.build("model", model_name, **model_params)
    built_kernel = registry.build("kernel", kernel_name, **kernel_params)
    if built_kernel.needs_gradient and not built_model.has_gradient:
        raise ConfigurationError(f"kernel {kernel_name!r} needs the gradient of the log joint; model {model_name!r} has none")
    return Assembly(
        model=built_model,
        family=registry.build("family", family_name, dim=built_model.dim, **family_params),
        kernel=built_kernel,
        estimator=registry.build("estimator", estimator_name, kernel=built_kernel, n_samples=n_samples, **estimator_params),
        optimizer=registry.build("optimizer", optimizer_name, **optimizer_params),
        sources={
            "model": registry.get("model", model_name),
            "family": registry.get("family", family_name),
            "kernel": kernel_component,
            "estimator": estimator_component,
            "optimizer": registry.get("optimizer", optimizer_name),
        },
    )
