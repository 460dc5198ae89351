"""Run the conformance checks of one component: by registry name or straight from its factory."""

from __future__ import annotations

import functools
import pickle
import time
from collections.abc import Callable, Mapping
from typing import Any

from mcsa_bench.api import ConfigurationError, Estimator, Kernel, Model, Optimizer, VariationalFamily
from mcsa_bench.assembly import resolve_kernel
from mcsa_bench.plugins import PluginInfo, Registry, _check_kind, _check_parameters, get_registry
from mcsa_bench.testing import checkpoints, estimators, families, kernels, models, optimizers
from mcsa_bench.testing.results import FAILED, NOT_APPLICABLE, PASSED, CheckResult, Measurement, NotApplicable

#: kind -> {check name: check function}; each takes the built model, or a function building a
#: fresh component of the other kinds (see _maker)
CHECKS: dict[str, dict[str, Callable[[Any], Measurement]]] = {
    "model": models.CHECKS,
    "family": families.CHECKS,
    "kernel": {**kernels.CHECKS, "checkpoint_state": checkpoints.check_kernel_state},
    "estimator": {**estimators.CHECKS, "checkpoint_state": checkpoints.check_estimator_state},
    "optimizer": {**optimizers.CHECKS, "checkpoint_state": checkpoints.check_optimizer_state},
}
CONTRACTS = {"model": Model, "family": VariationalFamily, "kernel": Kernel, "estimator": Estimator,
             "optimizer": Optimizer}


def check_component(kind: str, name: str, params: Mapping[str, Any] | None = None, *,
                    registry: Registry | None = None, kernel: str | None = None,
                    checks: list[str] | None = None) -> list[CheckResult]:
    """Every check of the registered component ``name`` of ``kind`` built with ``params``.

    ``kernel`` (estimators only) names the kernel to run the scheme with (default: its
    ``default_kernel``). Unknown names or parameters raise :class:`ConfigurationError`.
    """
    registry = registry or get_registry()
    component = registry.get(kind, name)
    _check_parameters(component, dict(params or {}))
    return check_factory(kind, component.factory, params, name=name, plugin=component.plugin, registry=registry,
                         kernel=kernel, checks=checks)


def check_factory(kind: str, factory: Callable[..., Any], params: Mapping[str, Any] | None = None, *,
                  name: str | None = None, plugin: PluginInfo | None = None, registry: Registry | None = None,
                  kernel: str | None = None, checks: list[str] | None = None) -> list[CheckResult]:
    """Every check (or those named in ``checks``) of a component built by ``factory(**params)``.

    Needs no installation: a plugin's tests can check a class before it is registered. A
    component that does not build, or builds something that is not a ``mcsa_bench.api.<Kind>``,
    fails the check ``builds`` and nothing else runs. A check that raises fails, naming the
    error; a check that does not apply is reported "not applicable".
    """
    _check_kind(kind)
    selected = list(CHECKS[kind]) if checks is None else checks
    unknown = sorted(set(selected) - set(CHECKS[kind]))
    if unknown:
        raise ConfigurationError(f"unknown {kind} check {', '.join(map(repr, unknown))}; "
                                 f"checks: {', '.join(CHECKS[kind])}")
    label = functools.partial(CheckResult, kind, name or getattr(factory, "__name__", repr(factory)),
                              plugin.name if plugin else None, plugin.distribution if plugin else None,
                              plugin.version if plugin else None)
    make = _maker(kind, factory, dict(params or {}), registry, kernel, name)
    try:
        built = make(families.DIM) if kind == "family" else make()
    except ConfigurationError:
        raise  # bad parameters or pairing: the caller's mistake, not the component's
    except Exception as error:
        return [label("builds", FAILED, detail=f"building raised {type(error).__name__}: {error}")]
    contract = CONTRACTS[kind]
    if not isinstance(built, contract):
        return [label("builds", FAILED, detail=f"the factory returned a {type(built).__name__}, "
                                               f"not a mcsa_bench.api.{contract.__name__}")]
    subject = built if kind == "model" else make  # a model is built once (data sets load on construction)
    results = [label("builds", PASSED, detail=f"a {type(built).__name__}")]
    results += [_run(label, check, CHECKS[kind][check], subject) for check in selected]
    return results


def assert_conforms(kind: str, component: str | Callable[..., Any], params: Mapping[str, Any] | None = None,
                    **options: Any) -> list[CheckResult]:
    """Run every check of a component (a registered name or a factory) and raise
    :class:`AssertionError` listing each failure, with its measured value and tolerance."""
    run = check_component if isinstance(component, str) else check_factory
    results = run(kind, component, params, **options)
    failures = [r.message for r in results if r.failed]
    if failures:
        raise AssertionError("\n".join(failures))
    return results


def _sharing_compiled(build: Callable[[int], Any]) -> Callable[[int], Any]:
    """``build`` whose families written in JAX (mcsa_bench.autodiff) share the compiled functions of the first
    one built of their dimension, when their state (pickled) is that one's: the family's checks build it ten
    times, and each build would trace and compile the same programs again (a spline flow's conformance: 30.7 s
    without sharing, 15.7 s with it). Each check still gets a fresh object."""
    from mcsa_bench.autodiff import _Compiled

    first: dict[int, tuple[Any, bytes]] = {}

    def make(dim: int) -> Any:
        family = build(dim)
        if isinstance(family, _Compiled):
            state = pickle.dumps(family.__getstate__())
            earlier, earlier_state = first.setdefault(dim, (family, state))
            if earlier is not family and earlier_state == state:
                family.__dict__["_compiled_functions"] = earlier._compiled()
        return family

    return make


def _maker(kind: str, factory: Callable[..., Any], params: dict[str, Any], registry: Registry | None,
           kernel: str | None, name: str | None) -> Callable[..., Any]:
    """A function building a fresh component: of ``dim`` for families, of nothing for the others."""
    if kernel is not None and kind != "estimator":
        raise ConfigurationError(f"kernel= applies to estimator checks only, not to a {kind}")
    if kind == "family":
        return _sharing_compiled(lambda dim: factory(dim=dim, **params))
    if kind != "estimator":
        return lambda: factory(**params)
    registry = registry or get_registry()
    choice = resolve_kernel(registry, name or getattr(factory, "__name__", repr(factory)), kernel, scheme=factory)
    n_samples = max(estimators.N_SAMPLES, getattr(factory, "min_samples", 1))

    def make_estimator() -> Estimator:
        built_kernel = None if choice.name is None else registry.build("kernel", choice.name, **choice.params)
        return factory(kernel=built_kernel, n_samples=n_samples, **params)

    return make_estimator


def _run(label: Callable[..., CheckResult], check: str, function: Callable[[Any], Measurement],
         subject: Any) -> CheckResult:
    start = time.perf_counter()
    try:
        measurement = function(subject)
    except NotApplicable as reason:
        return label(check, NOT_APPLICABLE, detail=str(reason))
    except Exception as error:
        return label(check, FAILED, detail=f"raised {type(error).__name__}: {error}")
    seconds = time.perf_counter() - start
    status = PASSED if measurement.passed else FAILED
    return label(check, status, float(measurement.measured), float(measurement.tolerance),
                 f"{measurement.detail}; {seconds:.2f} s", measurement.quantity)

