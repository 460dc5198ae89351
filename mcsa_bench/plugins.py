"""The plugin manager and the registry of components.

Built-in components live in the modules of :data:`DEFAULT_PLUGINS` and are registered on the
same pluggy manager, through the same hooks, as third-party plugins found under the entry-point
group ``mcsa_bench``. Entry points are loaded one at a time: a broken plugin (import error,
exception in a hook, duplicate name, invalid factory) produces a :class:`PluginWarning` naming
its distribution and the error, is kept in :attr:`Registry.failures`, and the others still load
(set ``MCSA_BENCH_STRICT_PLUGINS=1`` to make that fatal). ``MCSA_BENCH_PLUGINS=a,b`` loads only
the third-party plugins it names (by entry-point or distribution name).

A component and its JAX twin (its face on the accelerated backend, ``backend=jax``) are registered
together: ``register(name, factory, jax=twin)``, the twin a factory or, so that a plugin's numpy code never
imports JAX, the ``"module:attribute"`` it is imported from when the JAX backend first asks
(:meth:`Registry.jax_twin`). A component written once in JAX (:mod:`mcsa_bench.autodiff`) needs none: its
twin is itself. The entry-point group ``mcsa_bench.jax_twins`` of the previous release still works, with
a deprecation warning.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import re
import types
import typing
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import pluggy

from mcsa_bench import hookspecs
from mcsa_bench.api import ConfigurationError, MCSAError, did_you_mean
from mcsa_bench.version import __version__

ENTRY_POINT_GROUP = "mcsa_bench"
#: the previous release's separate group of JAX twins (``register_jax_twins(register)``); deprecated
DEPRECATED_TWIN_GROUP = "mcsa_bench.jax_twins"
STRICT_ENV_VAR = "MCSA_BENCH_STRICT_PLUGINS"
ALLOW_ENV_VAR = "MCSA_BENCH_PLUGINS"

DEFAULT_PLUGINS = (
    "mcsa_bench.builtin.families",
    "mcsa_bench.builtin.kernels",
    "mcsa_bench.builtin.hmc",
    "mcsa_bench.builtin.estimators",
    "mcsa_bench.builtin.baselines",
    "mcsa_bench.builtin.optimizers",
    "mcsa_bench.builtin.models",
    "mcsa_bench.autodiff.ppl",
)

#: component kind -> the hook that registers it
HOOKS = {
    "model": "register_models",
    "family": "register_variational_families",
    "kernel": "register_kernels",
    "estimator": "register_estimators",
    "optimizer": "register_optimizers",
}
KINDS = tuple(HOOKS)

#: factory arguments the framework supplies itself; they are not configuration
INJECTED_PARAMETERS = {
    "model": (),
    "family": ("dim",),
    "kernel": (),
    "estimator": ("kernel", "n_samples"),
    "optimizer": (),
}

#: parameter names a factory may not use (``name`` holds the component's name in the config)
RESERVED_PARAMETERS = ("name",)

#: component names: usable as a command-line choice (``kernel=<name>``) and in glob sweeps
COMPONENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


class PluginWarning(UserWarning):
    """A plugin failed to load or to register its components and was skipped."""


class PluginDeprecationWarning(FutureWarning):
    """A plugin uses a way of registering that goes in the next release (shown to users by default)."""


class PluginLoadError(MCSAError):
    """A plugin failed while strict plugin loading is on."""


class DuplicateComponentError(MCSAError):
    """Two plugins registered a component of the same kind under the same name."""


class InvalidComponentError(MCSAError):
    """A plugin registered something that cannot be a component: a bad name or factory."""


class UnknownComponentError(ConfigurationError):
    """No component of that kind has that name."""


class ComponentBuildError(MCSAError):
    """A component's factory raised an unexpected exception."""


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin comes from."""

    name: str
    distribution: str | None
    version: str | None


@dataclass(frozen=True)
class PluginFailure:
    """A plugin, or one of its hooks, that was skipped, and why.

    ``stage`` is ``load`` (importing or registering the plugin module) or the hook that failed
    (e.g. ``register_kernels``); ``reason`` is the error, e.g. ``ImportError: no module named x``.
    """

    plugin: PluginInfo
    stage: str
    reason: str

    @property
    def kind(self) -> str | None:
        """The component kind whose hook failed (None for a load failure)."""
        return next((kind for kind, hook in HOOKS.items() if hook == self.stage), None)

    @property
    def message(self) -> str:
        origin = (f"from distribution {self.plugin.distribution!r}" if self.plugin.distribution
                  else "(not from an installed distribution)")
        where = "to load" if self.stage == "load" else f"in {self.stage}"
        return f"mcsa-bench plugin {self.plugin.name!r} {origin} failed {where}: {self.reason}"


@dataclass(frozen=True)
class Component:
    """A registered factory, the plugin that provided it, and its JAX twin (a factory of the twin, the
    ``"module:attribute"`` where it is, or None)."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: PluginInfo
    jax: Callable[..., Any] | str | None = None

    @property
    def written_in_jax(self) -> bool:
        """Whether the factory is a component class written once in JAX (mcsa_bench.autodiff)."""
        from mcsa_bench.autodiff import written_in_jax

        return written_in_jax(self.factory)

    @property
    def backends(self) -> tuple[str, ...]:
        """The engines it runs on: numpy always; jax with a twin or written in JAX."""
        return ("numpy", "jax") if self.jax is not None or self.written_in_jax else ("numpy",)

    @property
    def description(self) -> str:
        doc = inspect.getdoc(self.factory) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    def parameters(self) -> dict[str, inspect.Parameter]:
        """The configurable keyword parameters of the factory (injected ones excluded)."""
        return {
            name: p
            for name, p in _signature(self.factory).parameters.items()
            if name not in INJECTED_PARAMETERS[self.kind]
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }

    def accepts_any_keyword(self) -> bool:
        return any(p.kind is p.VAR_KEYWORD for p in _signature(self.factory).parameters.values())

    def describe(self) -> str:
        return f"{self.kind} {self.name!r} (plugin {self.plugin.name})"


def _signature(factory: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(factory, eval_str=True)
    except (NameError, TypeError):
        return inspect.signature(factory)


#: where a JAX twin is imported from: ``package.module:attribute``
TWIN_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def twin_problem(kind: str, name: str, twin: object) -> str | None:
    """Why ``twin`` cannot be the JAX twin of the ``kind`` component ``name``, or None if it can."""
    if twin is None or callable(twin) or isinstance(twin, str) and TWIN_REFERENCE.fullmatch(twin):
        return None
    return f"{kind} {name!r}: jax= takes the twin's factory or 'module:attribute', got {twin!r}"


def component_problem(kind: str, name: object, factory: object) -> str | None:
    """Why ``factory`` registered as ``name`` cannot be a component of ``kind``, or None if it can.

    The registry builds components by calling ``factory(**params)`` with the configured and
    injected keyword parameters, and reads the configuration from the factory's signature.
    """
    if not isinstance(name, str) or not COMPONENT_NAME.fullmatch(name):
        return (f"{kind} name {name!r} is not usable on the command line; use letters, digits, '_' and '-', "
                "starting with a letter")
    label = getattr(factory, "__qualname__", None) or repr(factory)
    if not callable(factory):
        return f"{kind} {name!r}: the factory {factory!r} is not callable"
    if isinstance(factory, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return f"{kind} {name!r}: the factory {label!r} is a builtin function, not a component class or function"
    try:
        parameters = _signature(factory).parameters
    except (TypeError, ValueError) as error:
        return f"{kind} {name!r}: the factory {label!r} has no inspectable signature ({error})"
    reserved = [p for p in RESERVED_PARAMETERS if p in parameters]
    if reserved:
        return f"{kind} {name!r}: the parameter name {reserved[0]!r} is reserved for the component name"
    positional = [n for n, p in parameters.items() if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional:
        return f"{kind} {name!r}: parameter {positional[0]!r} is positional-only; components are built with keywords"
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        missing = [p for p in INJECTED_PARAMETERS[kind] if p not in parameters]
        if missing:
            return (f"{kind} {name!r}: the factory must accept {', '.join(map(repr, missing))}, "
                    f"which the framework passes to every {kind}")
    return None


class Registry:
    """Components by kind and name; builds them from a name plus keyword parameters.

    ``failures`` lists the plugins (or hooks) that were skipped and why; ``disabled`` the
    installed plugins left out by the ``MCSA_BENCH_PLUGINS`` allow-list.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self._components: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        self.failures: list[PluginFailure] = []
        self.disabled: list[PluginInfo] = []
        self.strict = strict  # a twin that fails to load is then an error too
        self._twins: dict[tuple[str, str], Callable[..., Any]] = {}  # the twins imported so far
        self._deprecated_twins_loaded = False

    def add(self, component: Component) -> None:
        existing = self._components[component.kind].get(component.name)
        if existing is not None:
            raise DuplicateComponentError(
                f"{component.kind} {component.name!r} is registered twice: by plugin "
                f"{existing.plugin.name!r} and by plugin {component.plugin.name!r}"
            )
        self._components[component.kind][component.name] = component

    def check_new(self, components: list[Component]) -> None:
        """Raise :class:`DuplicateComponentError` if any of ``components`` clashes with a held name."""
        probe = Registry()
        probe._components = {kind: dict(held) for kind, held in self._components.items()}
        for component in components:
            probe.add(component)

    def names(self, kind: str) -> list[str]:
        return sorted(self._components[_check_kind(kind)])

    def components(self, kind: str | None = None) -> list[Component]:
        kinds = KINDS if kind is None else (_check_kind(kind),)
        return [self._components[k][n] for k in kinds for n in sorted(self._components[k])]

    def get(self, kind: str, name: str) -> Component:
        try:
            return self._components[_check_kind(kind)][name]
        except KeyError:
            available = ", ".join(self.names(kind)) or "(none)"
            raise UnknownComponentError(
                f"unknown {kind} {name!r}{did_you_mean(name, self.names(kind))}; available: {available}"
            ) from None

    def build(self, kind: str, name: str, /, **params: Any) -> Any:
        """Instantiate component ``name`` of ``kind`` with keyword ``params``.

        Unknown or missing parameters are a :class:`ConfigurationError` that lists the allowed
        ones; any other failure inside the factory is re-raised naming the plugin.
        """
        component = self.get(kind, name)
        _check_parameters(component, params)
        try:
            return component.factory(**params)
        except (ValueError, TypeError) as error:  # ConfigurationError included
            raise ConfigurationError(f"{component.kind} {component.name!r}: {error}") from error
        except MCSAError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # sys.exit in a factory too
            raise ComponentBuildError(f"{component.describe()} failed: {type(error).__name__}: {error}") from error

    def covered(self, kind: str) -> list[str]:
        """The names of the ``kind`` components that run on the JAX backend."""
        self.load_deprecated_twins()
        return [component.name for component in self.components(kind) if "jax" in component.backends]

    def jax_twin(self, kind: str, name: str) -> Callable[..., Any]:
        """The factory of the JAX twin of the ``kind`` component ``name`` (docs/plugins.md, "A JAX twin"),
        imported on first use. A component written once in JAX is its own twin. None registered, or one
        that fails to import (a :class:`PluginWarning` naming the plugin, an error in strict mode): a
        ConfigurationError naming the covered components."""
        self.load_deprecated_twins()
        component = self.get(kind, name)
        if (kind, name) not in self._twins:
            twin = self._import_twin(component)
            if twin is None:
                raise ConfigurationError(f"{kind} {name!r} has no JAX twin (backend=jax); covered {kind}s: "
                                         f"{', '.join(self.covered(kind))}")
            self._twins[kind, name] = twin
        return self._twins[kind, name]

    def _import_twin(self, component: Component) -> Callable[..., Any] | None:
        if component.written_in_jax:
            from mcsa_bench.autodiff import twin_factory

            return twin_factory(component.kind)
        if component.jax is None or callable(component.jax):
            return component.jax
        module, _, attributes = component.jax.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for attribute in attributes.split("."):
                found = getattr(found, attribute)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a broken twin must not break the component's numpy face
            self._failed(PluginFailure(component.plugin, f"the JAX twin of {component.kind} {component.name!r}",
                                       f"{type(error).__name__}: {error} ({component.jax})"), error)
            return None
        return found

    def _failed(self, failure: PluginFailure, error: BaseException | None = None) -> None:
        if self.strict:
            raise PluginLoadError(failure.message) from error
        self.failures.append(failure)
        warnings.warn(failure.message, PluginWarning, stacklevel=4)

    def load_deprecated_twins(self) -> None:
        """Once: the twins of the previous release's entry-point group, each given to its component if it
        has none of its own, under the allow-list and strict mode like every plugin, and a deprecation
        warning for each plugin still using it."""
        if self._deprecated_twins_loaded:
            return
        self._deprecated_twins_loaded = True
        allowed = allowed_plugins()
        for entry_point in entry_points(group=DEPRECATED_TWIN_GROUP):
            info = _plugin_info(entry_point)
            if allowed is not None and not _names(info) & allowed:
                continue
            warnings.warn(f"plugin {info.name!r} registers JAX twins through the entry-point group "
                          f"{DEPRECATED_TWIN_GROUP}, which is deprecated and goes in the next release: pass jax= to "
                          "register (docs/plugins.md, \"A JAX twin\")", PluginDeprecationWarning, stacklevel=3)
            staged: dict[tuple[str, str], Callable[..., Any]] = {}
            try:
                entry_point.load()(lambda kind, name, factory: staged.__setitem__((kind, name), factory))
                for kind, name in staged:
                    self.get(kind, name)  # a twin of no registered component is the plugin's mistake
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                self._failed(PluginFailure(info, f"{DEPRECATED_TWIN_GROUP} ({entry_point.value})",
                                           f"{type(error).__name__}: {error}"), error)
                continue
            for (kind, name), factory in staged.items():
                component = self._components[kind][name]
                if component.jax is None and not component.written_in_jax:
                    self._components[kind][name] = dataclasses.replace(component, jax=factory)


def _check_kind(kind: str) -> str:
    if kind not in HOOKS:
        raise ConfigurationError(
            f"unknown component kind {kind!r}{did_you_mean(kind, KINDS)}; kinds: {', '.join(KINDS)}"
        )
    return kind


def literal_choices(annotation: Any) -> tuple | None:
    """The allowed values of a parameter annotated ``typing.Literal[...]``, else None."""
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else None


def _check_parameters(component: Component, params: dict[str, Any]) -> None:
    allowed = component.parameters()
    injected = INJECTED_PARAMETERS[component.kind]
    if not component.accepts_any_keyword():
        unknown = sorted(set(params) - set(allowed) - set(injected))
        if unknown:
            raise ConfigurationError(
                f"unknown parameter {', '.join(map(repr, unknown))} for {component.describe()}; "
                f"allowed: {', '.join(allowed) or '(none)'}"
            )
    missing = [n for n, p in allowed.items() if p.default is p.empty and n not in params]
    if missing:
        raise ConfigurationError(f"{component.describe()} needs parameter {', '.join(map(repr, missing))}")
    for name, value in params.items():  # parameters annotated Literal[...] take one of their values
        choices = literal_choices(allowed[name].annotation) if name in allowed else None
        if choices and value not in choices:
            raise ConfigurationError(f"{component.describe()}: {name} must be one of "
                                     f"{', '.join(map(str, choices))}; got {value!r}")


def _strict(strict: bool | None) -> bool:
    if strict is not None:
        return strict
    return os.environ.get(STRICT_ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


def allowed_plugins() -> set[str] | None:
    """The names in ``MCSA_BENCH_PLUGINS`` (None when it is unset: every plugin loads)."""
    value = os.environ.get(ALLOW_ENV_VAR)
    if value is None:
        return None
    return {_normalize(name) for name in value.split(",") if name.strip()}


def _normalize(name: str) -> str:
    """Entry-point and distribution names compared the way packaging does (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


@dataclass
class _Outcome:
    """What loading the plugins found wrong, reported as it happens."""

    strict: bool
    failures: list[PluginFailure] = field(default_factory=list)
    disabled: list[PluginInfo] = field(default_factory=list)

    def failed(self, failure: PluginFailure, error: BaseException | None = None) -> None:
        if self.strict:
            raise PluginLoadError(failure.message) from error
        self.failures.append(failure)
        warnings.warn(failure.message, PluginWarning, stacklevel=4)


def _unknown_hooks(manager: pluggy.PluginManager, plugin: object) -> list[str]:
    """Names of functions marked ``@hookimpl`` in ``plugin`` that are not mcsa-bench hooks (typos)."""
    return sorted(name for name in dir(plugin)
                  if name not in HOOKS.values() and manager.parse_hookimpl_opts(plugin, name) is not None)


def _plugin_info(entry_point) -> PluginInfo:
    dist = entry_point.dist
    return PluginInfo(entry_point.name, dist.name if dist else None, dist.version if dist else None)


def _names(info: PluginInfo) -> set[str]:
    """The names the allow-list may give a plugin by: its entry point's and its distribution's."""
    return {_normalize(info.name)} | ({_normalize(info.distribution)} if info.distribution else set())


def _load_entry_points(manager: pluggy.PluginManager, infos: dict[str, PluginInfo], outcome: _Outcome) -> None:
    allowed = allowed_plugins()
    matched: set[str] = set()
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        info = _plugin_info(entry_point)
        if manager.has_plugin(info.name) or info in outcome.disabled:
            continue  # the same distribution visible twice on sys.path
        if allowed is not None:
            names = _names(info)
            if not names & allowed:
                outcome.disabled.append(info)
                continue
            matched |= names & allowed
        try:
            plugin = entry_point.load()
            unknown = _unknown_hooks(manager, plugin)
            if unknown:
                raise pluggy.PluginValidationError(
                    plugin, f"unknown hook {', '.join(map(repr, unknown))}; hooks: {', '.join(HOOKS.values())}")
            manager.register(plugin, name=info.name)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # sys.exit in a plugin's module too: its failure, not the tool's
            outcome.failed(PluginFailure(info, "load", f"{type(error).__name__}: {error} ({entry_point.value})"), error)
            continue
        infos[info.name] = info
    for name in sorted((allowed or set()) - matched):
        warnings.warn(f"{ALLOW_ENV_VAR} names {name!r}, which matches no installed mcsa-bench plugin",
                      PluginWarning, stacklevel=3)


def create_plugin_manager(
    extra_plugins: Iterable[object] = (), *, strict: bool | None = None
) -> tuple[pluggy.PluginManager, dict[str, PluginInfo], _Outcome]:
    """A plugin manager with the built-ins, every loadable (and allowed) entry point, then
    ``extra_plugins``; returns it with each plugin's origin and what went wrong."""
    outcome = _Outcome(_strict(strict))
    manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
    manager.add_hookspecs(hookspecs)
    infos: dict[str, PluginInfo] = {}

    for module_name in DEFAULT_PLUGINS:
        manager.register(importlib.import_module(module_name), name=module_name)
        infos[module_name] = PluginInfo(module_name, "mcsa-bench", __version__)

    _load_entry_points(manager, infos, outcome)

    for plugin in extra_plugins:
        if manager.is_registered(plugin):  # already found through its entry point
            continue
        name = getattr(plugin, "__name__", None) or repr(plugin)
        manager.register(plugin, name=name)
        infos[name] = PluginInfo(name, None, None)
    return manager, infos, outcome


def load_registry(extra_plugins: Iterable[object] = (), *, strict: bool | None = None) -> Registry:
    """A fresh registry filled by every plugin's hooks, attributing each component to its plugin.

    A plugin hook that raises, registers an invalid name or factory (see
    :func:`component_problem`), or registers a name another plugin already holds, is refused with
    all its registrations (nothing half-registered) and a :class:`PluginWarning` naming the plugin
    (and the holder of the name), or an error in strict mode. Built-ins register first, so they
    cannot be shadowed. What was refused is kept in :attr:`Registry.failures`.
    """
    manager, infos, outcome = create_plugin_manager(extra_plugins, strict=strict)
    registry = Registry(strict=outcome.strict)
    for kind, hook_name in HOOKS.items():
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            info = infos[impl.plugin_name]
            staged: list[Component] = []

            def register(name: str, factory: Callable[..., Any], *, jax: Callable[..., Any] | str | None = None,
                         _kind=kind, _info=info, _staged=staged) -> None:
                problem = component_problem(_kind, name, factory) or twin_problem(_kind, name, jax)
                if problem:
                    raise InvalidComponentError(problem)
                _staged.append(Component(_kind, name, factory, _info, jax))

            try:
                impl.function(register=register)
                registry.check_new(staged)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # sys.exit in a hook too
                outcome.failed(PluginFailure(info, hook_name, f"{type(error).__name__}: {error}"), error)
                continue
            for component in staged:
                registry.add(component)
    registry.failures, registry.disabled = outcome.failures, outcome.disabled
    return registry


@functools.cache
def get_registry() -> Registry:
    """The process-wide registry (plugins are loaded on first use)."""
    return load_registry()
