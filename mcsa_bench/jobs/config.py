"""Hydra configuration: the run schema, registry components as config nodes, and job composition.

Every registered component becomes a typed node in Hydra's ConfigStore (group = its kind,
provider = its plugin), generated from its factory's signature, so ``kernel=<name>`` selects any
plugin's kernel with no YAML. A YAML file ``conf/<kind>/<name>.yaml`` overrides the generated
defaults by extending ``/_components/<kind>/<name>`` (the same node under a second path).

:func:`compose_jobs` composes the config of every job of a run or sweep exactly as Hydra's
BasicSweeper will, so the CLI can validate all of them before anything runs or is tracked.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import types
import typing
import unicodedata
import warnings
from dataclasses import dataclass, field, make_dataclass, replace
from importlib import resources
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from mcsa_bench.api import ConfigurationError, did_you_mean
from mcsa_bench.assembly import Assembly, KernelChoice, assemble, identifying_params, resolve_kernel
from mcsa_bench.engine import Settings, setting, table
from mcsa_bench.jobs.objective import check_objective
from mcsa_bench.jobs.threads import check_threads
from mcsa_bench.plugins import KINDS, Component, PluginWarning, Registry, get_registry, literal_choices
from mcsa_bench.tracking.record import NON_COMPUTING_KEYS, config_hash  # noqa: F401 (NON_COMPUTING_KEYS: for benchmarks/grid_costs.py)
from mcsa_bench.tracking.store import (
    DEFAULT_EXPERIMENT,
    DEFAULT_OUTAGE_SECONDS,
    DEFAULT_TRACKING_URI,
    MAX_OUTAGE_SECONDS,
)

if typing.TYPE_CHECKING:
    from mcsa_bench.jobs.composition import Compositions

CONFIG_MODULE = "mcsa_bench.conf"
#: set to 1 to let overrides and config directories name Python callables (`_target_`, hydra.callbacks)
ALLOW_TARGETS_ENV_VAR = "MCSA_BENCH_ALLOW_TARGETS"

CONFIG_NAME = "config"
#: the engines a job can run on: the numpy engine (mcsa_bench.engine, the reference) and the compiled,
#: batched one (mcsa_bench.accel, the extra [jax]), which runs a sweep's seeds of one configuration together
BACKENDS = ("numpy", "jax")
SCHEMA_GROUP = "_components"


@dataclass
class PaperReference:
    """What a paper reported for an experiment: shown after a single run, used by docs/results.md.

    ``values`` maps a method (``pmcsa``, ``msc+hmc``, ...) to its metrics, averaged over
    ``replications`` random splits in the paper's ``source`` table, as the paper prints them (quoted in
    the YAML: ``"-0.50"`` keeps the trailing zero a number would lose); ``n_iters``: the paper's T.
    """

    source: str = ""
    replications: int = 0
    n_iters: Optional[int] = None  # the paper's T: a report marks a cell ✓/✗ only when its runs ran this long
    values: dict[str, dict[str, str]] = field(default_factory=dict)


#: MLflow's longest experiment name
EXPERIMENT_NAME_LENGTH = 500


def check_experiment_name(experiment: object) -> None:
    """A :class:`ConfigurationError` for an experiment name MLflow would refuse, or with a control character."""
    if not str(experiment).strip() or len(str(experiment)) > EXPERIMENT_NAME_LENGTH:
        raise ConfigurationError(f"tracking.experiment must be a non-empty name of at most {EXPERIMENT_NAME_LENGTH} "
                                 f"characters (MLflow's limit), got {len(str(experiment))}")
    check_no_control_characters("tracking.experiment", str(experiment))


def check_no_control_characters(what: str, name: str) -> None:
    """Refuse a name that becomes a path, a tag or a run name with a control character in it (a
    newline splits a log line or a listing, an escape sequence rewrites the terminal that shows it)."""
    found = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if found is not None:
        raise ConfigurationError(f"{what} {shown(name)} holds the control character U+{ord(found):04X}; names "
                                 "that become paths, tags or run names take none")


@dataclass(frozen=True, kw_only=True)
class RunSettings(Settings):
    """A job's settings: the engine's rows (:class:`mcsa_bench.engine.Settings`) and the job's own
    below, read from a composed config and checked. Together they are the table of run settings,
    each declared once: the Hydra schema (:data:`RunConfig`), the checks and what the engine receives
    (this value itself) come from these fields; the config hash's rules (the run record's
    NON_COMPUTING_KEYS and LATER_KEY_DEFAULTS) are checked against them (tests/engine/test_settings.py).
    The annotations are the schema's types; values are plain.
    """

    n_samples: int = setting(10, minimum=1, doc="N, the per-iteration budget")
    backend: str = setting(BACKENDS[0], choices=BACKENDS, added_later=True,
                           doc="numpy: the reference engine, job by job; jax: a sweep's seeds of one configuration "
                               "as one compiled, batched program (docs/scaling.md, \"Which backend\")")
    threads: int = setting(1, check=check_threads, computing=False, doc="BLAS/OpenMP threads per job")
    max_rows: Optional[int] = setting(None, doc="data models: a seeded random subset of this many rows (size=tiny: 60)")
    resume: bool = setting(False, computing=False,
                           doc="skip every job whose configuration already has a FINISHED run")
    objective: Any = setting(None, check=check_objective, computing=False,
                             doc="what each trial returns to an optimizing sweeper (hydra/sweeper=optuna): the final "
                                 "value of a metric, NAME or NAME:max|min, or a list of them; default: the model's "
                                 "headline metric (docs/tuning.md)")
    paper: Optional[PaperReference] = setting(None, computing=False,
                                              doc="set by experiment configs: the paper's own numbers")
    tracking_uri: str = setting(DEFAULT_TRACKING_URI, key="tracking.uri", computing=False, doc="the MLflow store")
    experiment: str = setting(
        DEFAULT_EXPERIMENT,
        key="tracking.experiment",
        check=check_experiment_name,
        computing=False,
        doc="the MLflow experiment",
    )
    outage_seconds: float = setting(DEFAULT_OUTAGE_SECONDS, key="tracking.outage_seconds", minimum=0,
                                    maximum=MAX_OUTAGE_SECONDS, computing=False,
                                    doc="a run rides out a store that is away this long (at most a week)")
    # what a job reads from its config besides the settings
    components: dict[str, tuple[str, dict[str, Any]] | None] = field(default_factory=dict)
    resolved: dict[str, Any] = field(default_factory=dict)  # the whole resolved config as plain values
    kernel: KernelChoice | None = None  # the kernel that runs, once resolve() has decided it
    seed_following: tuple[str, ...] = ()  # the model's parameters set to ${seed} (a data split, a target)

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunSettings:
        from omegaconf.errors import OmegaConfBaseException

        try:
            plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as error:
            raise ConfigurationError(describe_composition_error(error)) from error
        _check_top_level_keys(plain)
        _check_values(plain)
        components = {}
        for kind in KINDS:
            node = plain.get(kind)
            if node is None:
                if kind != "kernel":
                    raise ConfigurationError(f"no {kind} selected; choose one with {kind}=<name>")
                components[kind] = None
                continue
            params = dict(node)
            components[kind] = (params.pop("name"), params)
        values = {row.name: functools.reduce(dict.__getitem__, row.key.split("."), plain) for row in table(cls)}
        return cls(**values, components=components, resolved=plain, seed_following=_seed_following(cfg.get("model")))

    def resolve(self, registry: Registry) -> RunSettings:
        """These settings with the kernel that runs decided (:func:`mcsa_bench.assembly.resolve_kernel`)
        and the config hash as the run's identity: what a job works out once and reads from then on."""
        if self.kernel is not None:
            return self
        kernel = resolve_kernel(registry, self.components["estimator"][0], self.components["kernel"])
        identified = {**self.resolved, "model": self.model_identity(registry), "kernel": kernel.config}
        return replace(self, kernel=kernel, identity=config_hash(identified))

    def model_identity(self, registry: Registry) -> dict[str, Any]:
        """The model's config as it identifies the model: as configured, or, for a model read from files
        (``identifying_params``: model=numpyro, model=pymc), their contents' digests instead of their paths."""
        name, params = self.components["model"]
        return {"name": name, **identifying_params(registry.get("model", name), params)}

    def effective_config(self, registry: Registry) -> dict[str, Any]:
        """The resolved config with the kernel the run will use filled in (``kernel: null`` means
        the estimator's default kernel, with that kernel's default parameters), and a model read from files
        with their digests beside their paths (the run's params then say which contents ran)."""
        model = {**self.resolved["model"], **self.model_identity(registry)}
        return {**self.resolved, "model": model, "kernel": self.resolve(registry).kernel.config}

    def config_hash(self, registry: Registry) -> str:
        return self.resolve(registry).identity

    def assemble(self, registry: Registry) -> Assembly:
        c = self.components
        return assemble(registry, model=c["model"], family=c["family"], kernel=self.resolve(registry).kernel,
                        estimator=c["estimator"], optimizer=c["optimizer"], n_samples=self.n_samples)


def _seed_following(node: DictConfig | None) -> tuple[str, ...]:
    """The keys of a component's config node whose value is the interpolation ``${seed}``."""
    if node is None:
        return ()
    return tuple(key for key in node if node._get_node(key)._value() == "${seed}")


def _group_schemas() -> dict[str, type]:
    """The Hydra schema of the top-level keys, generated from the table of run settings: a node per
    group of dotted keys (``diagnostics.every``), then the component groups (filled by the defaults
    list of conf/config.yaml)."""
    hints = typing.get_type_hints(RunSettings)
    top: dict[str, Any] = {}
    for row in table(RunSettings):
        group, _, key = row.key.rpartition(".")
        entry = (key, hints[row.name], field(default=row.default))
        if group:
            top.setdefault(group, []).append(entry)
        else:
            top[key] = entry
    schemas = {}
    for key, node in top.items():
        if isinstance(node, list):
            schemas[key] = make_dataclass(f"{key.capitalize()}Config", node)
            top[key] = (key, schemas[key], field(default_factory=schemas[key]))
    kinds = [(kind, Any, field(default=None)) for kind in KINDS]  # kernel null: the estimator's default kernel
    schemas[""] = make_dataclass("RunConfig", [*top.values(), *kinds])
    for schema in schemas.values():
        schema.__module__ = __name__  # pickled by reference (the module attributes below), like component schemas
    return schemas


_SCHEMAS = _group_schemas()
RunConfig, DiagnosticsConfig, TrackingConfig = _SCHEMAS[""], _SCHEMAS["diagnostics"], _SCHEMAS["tracking"]


_SIMPLE_TYPES = (int, float, str, bool)


def _config_type(annotation: Any) -> Any:
    """The OmegaConf field type for a parameter annotation (Any when OmegaConf cannot check it)."""
    if annotation in _SIMPLE_TYPES:
        return annotation
    choices = literal_choices(annotation)
    if choices and len({type(c) for c in choices}) == 1 and type(choices[0]) in _SIMPLE_TYPES:
        return type(choices[0])  # the component itself checks membership (Registry.build)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1 and members[0] in _SIMPLE_TYPES and len(typing.get_args(annotation)) == 2:
            return Optional[members[0]]
    return Any


#: the component schemas made in this process, by class name. Hydra's launchers hand every job over
#: with the ConfigStore, whose nodes are instances of these classes: made at run time, they were
#: pickled by value, 111 kB and 17 ms of CPU per job (docs/performance.md)
_schemas: dict[str, type] = {}


def component_schema(component: Component) -> type:
    """A dataclass node for a component: ``name`` plus its configurable parameters."""
    parameters = component.parameters()
    if "name" in parameters:
        raise ConfigurationError(
            f"{component.describe()}: the parameter name 'name' is reserved for the component name"
        )
    fields = [("name", str, field(default=component.name))]
    for name, parameter in parameters.items():
        default = MISSING if parameter.default is inspect.Parameter.empty else parameter.default
        checkable = default is MISSING or isinstance(default, (*_SIMPLE_TYPES, type(None)))
        annotation = _config_type(parameter.annotation) if checkable else Any  # e.g. a tuple default
        fields.append((name, annotation, field(default=default)))
    schema = make_dataclass(f"{component.kind}_{component.name}", fields)
    schema.__module__ = __name__  # pickled by reference (module __getattr__), not by value with every job
    _schemas[schema.__name__] = schema
    return schema


def __getattr__(name: str) -> type:
    """A component's schema class by its name (``<kind>_<component>``), made if this process has not
    made it yet: how a worker unpickles a node of the launching process's ConfigStore."""
    if name not in _schemas:
        found = [c for kind in KINDS if name.startswith(f"{kind}_") for c in get_registry().components(kind)
                 if f"{kind}_{c.name}" == name]
        if not found:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        component_schema(found[0])
    return _schemas[name]


def shipped_yaml(kind: str) -> set[str]:
    """Names of the YAML overrides shipped in conf/<kind>/."""
    folder = resources.files(CONFIG_MODULE).joinpath(kind)
    if not folder.is_dir():
        return set()
    return {entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".yaml")}


def shipped_defaults(kind: str, name: str) -> dict[str, Any]:
    """Parameter defaults that conf/<kind>/<name>.yaml sets (unresolved, e.g. ``${seed}``)."""
    if name not in shipped_yaml(kind):
        return {}
    text = resources.files(CONFIG_MODULE).joinpath(kind, f"{name}.yaml").read_text()
    node = OmegaConf.create(text)
    return {k: node._get_node(k)._value() for k in node if k != "defaults"}


def default_choices() -> dict[str, str | None]:
    """The option conf/config.yaml selects for each config group (None: nothing selected)."""
    primary = OmegaConf.create(resources.files(CONFIG_MODULE).joinpath(f"{CONFIG_NAME}.yaml").read_text())
    # unresolved: an entry may be an interpolation of other choices (optional grid_size: ${experiment}_${size})
    return {group: option for entry in OmegaConf.to_container(primary.defaults) if isinstance(entry, dict)
            for group, option in entry.items()}


def register_configs(registry: Registry) -> None:
    """Write the run schema and every registered component into Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="_run_schema", node=RunConfig, provider="mcsa_bench")
    for kind in KINDS:
        overridden = shipped_yaml(kind)
        for component in registry.components(kind):
            try:
                node = component_schema(component)
            except ConfigurationError as error:  # one plugin's mistake must not take the CLI down
                warnings.warn(f"not configurable from the command line: {error}", PluginWarning, stacklevel=2)
                continue
            store.store(group=f"{SCHEMA_GROUP}/{kind}", name=component.name, node=node, provider=component.plugin.name)
            if component.name not in overridden:
                store.store(group=kind, name=component.name, node=node, provider=component.plugin.name)


#: The run identity's rules live in the run record (mcsa_bench.tracking.record: NON_COMPUTING_KEYS,
#: LATER_KEY_DEFAULTS, config_hash); tests/engine/test_settings.py checks that the table of run settings agrees.


def _check_top_level_keys(plain: dict[str, Any]) -> None:
    """Refuse keys the run schema does not know, e.g. added with `+foo=1`."""
    allowed = [f.name for f in dataclasses.fields(RunConfig)]
    for key in plain:
        if key not in allowed:
            raise ConfigurationError(f"unknown key {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}")


#: the largest integer a config may hold: numpy's int64, which the components compute with
LARGEST_INTEGER = 2**63 - 1
#: MLflow's longest param value: every config value is one
VALUE_LENGTH = 6000


def _check_values(node: Any, path: str = "") -> None:
    """Every float in the config is finite (NaN or inf is a mistake, never a setting), every
    integer fits in 64 bits, and every value fits in an MLflow param."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_values(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_values(value, f"{path}[{index}]")
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigurationError(f"{path} must be a finite number, got {node}")
    elif isinstance(node, int) and abs(node) > LARGEST_INTEGER:
        raise ConfigurationError(f"{path} has {len(str(abs(node)))} digits; integers lie within "
                                 f"±{LARGEST_INTEGER} (64 bits)")
    elif isinstance(node, str) and len(node) > VALUE_LENGTH:
        raise ConfigurationError(f"{path} is {len(node)} characters long; values are at most {VALUE_LENGTH} "
                                 f"(MLflow's limit for a param)")


def _targets_allowed() -> bool:
    return os.environ.get(ALLOW_TARGETS_ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


#: config keys whose value Hydra or Python's logging imports and calls: a class, a factory, a target
CODE_KEYS = ("_target_", "class", "()")
#: the only environment variables ``hydra.job.env_set`` may set (an allow-list: anything else could
#: load code into a job (LD_PRELOAD, PYTHONPATH), or send its traffic and credentials elsewhere
#: (HTTPS_PROXY, REQUESTS_CA_BUNDLE, MLFLOW_TRACKING_URI/_TOKEN)): threads, devices, locale and time zone
ENV_SET_ALLOWED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS",
                   "TZ", "LANG", "LC_ALL")
#: what a logging configuration (hydra.job_logging, hydra.hydra_logging) may name: these classes, the
#: standard streams, and as files only the logs of Hydra's own options (the job's, in its directory;
#: hydra_logging=hydra_debug's, in the working directory)
LOG_CLASSES_ALLOWED = ("logging.StreamHandler", "logging.FileHandler", "logging.NullHandler", "logging.Formatter")
LOG_STREAMS_ALLOWED = ("ext://sys.stdout", "ext://sys.stderr")
LOG_FILES_ALLOWED = ("${hydra.runtime.output_dir}/${hydra.job.name}.log", "hydra-${hydra.job.name}.log")
#: MLflow's longest param name: every config key is one
KEY_LENGTH = 250


def _check_no_spaces_in_lists(overrides: list[str]) -> None:
    """``estimator=msc, pmcsa``: the shell split a list of values at its space into two arguments."""
    for before, after in zip(["", *overrides], [*overrides, ""]):
        if "=" in before and after and (before.endswith(",") or after.startswith(",")):
            raise ConfigurationError(f"{before!r} and {after!r} are one list of values split at a space: write "
                                     f"{before}{after} without spaces, or quote the whole: '{before} {after}'")


def check_overrides(overrides: list[str]) -> None:
    """Refuse malformed overrides and those that would make Hydra import and call arbitrary code.

    Hydra instantiates every ``_target_`` under ``hydra.callbacks`` (and launchers, sweepers) by
    import path, Python's logging every handler's ``class`` or ``()``, and ``hydra.job.env_set``
    puts variables such as ``LD_PRELOAD`` into the job's environment; mcsa-bench builds components
    from its registry only. Set ``MCSA_BENCH_ALLOW_TARGETS=1`` to allow such overrides anyway.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    _check_no_spaces_in_lists(overrides)
    parser = OverridesParser.create()
    for line in overrides:
        try:
            override = parser.parse_override(line)
        except ValueError as error:  # Python reads integers of at most 4,300 digits
            raise ConfigurationError(f"the override {shown(line)} holds an integer too long to read "
                                     f"({' '.join(str(error).split()[:8])}); integers lie within "
                                     f"±{LARGEST_INTEGER} (64 bits)") from None
        except HydraException as error:
            raise ConfigurationError(f"cannot read the override {shown(line)}: write key=value or group=option "
                                     f"({shown(' '.join(str(error).split()), 300)})") from None
        check_no_control_characters("the override", line)  # its text becomes tags and the run's name
        key = override.key_or_group
        if not key:
            raise ConfigurationError(f"the override {line!r} has no key; write key=value, e.g. seed=3")
        if len(key) > KEY_LENGTH:
            raise ConfigurationError(f"the override {shown(line)} has a key of {len(key)} characters; "
                                     f"keys are at most {KEY_LENGTH} (MLflow's limit for a param name)")
        if not _targets_allowed():
            for path in _paths_set(key.replace("/", ".").split("."), override.value()):
                _check_path_is_safe(path, line)


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted, shortened to about ``limit`` characters for a one-line message."""
    return repr(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


def _paths_set(prefix: list[str], value: Any) -> list[list[str]]:
    """Every config key path an override's value sets: the key itself and, for a dictionary (or
    a sweep over dictionaries), each key within it."""
    from hydra.core.override_parser.types import ChoiceSweep

    if isinstance(value, ChoiceSweep):
        return [path for choice in value.list for path in _paths_set(prefix, choice)]
    if isinstance(value, dict):
        return [prefix] + [path for k, v in value.items() for path in _paths_set([*prefix, str(k)], v)]
    if isinstance(value, list):
        return [prefix] + [path for v in value for path in _paths_set(prefix, v)]
    return [prefix]


def _check_path_is_safe(path: list[str], line: str) -> None:
    """Refuse a key path whose value would be imported and called, would load code into a job, or
    would name a file for a log handler to open (``mode: w`` truncates it)."""
    unless = f"mcsa-bench refuses it unless {ALLOW_TARGETS_ENV_VAR}=1 is set"
    named = next((part for part in path if part in CODE_KEYS), None)
    if named is not None or path[:2] == ["hydra", "callbacks"]:
        what = f"'{named}' names a class or callable" if named else "hydra.callbacks are classes"
        raise ConfigurationError(f"the override {shown(line)} would make Hydra import and call arbitrary code "
                                 f"({what}); {unless}")
    if path[:3] == ["hydra", "job", "env_set"] and len(path) > 3 and path[3] not in ENV_SET_ALLOWED:
        raise ConfigurationError(f"the override {shown(line)} sets {path[3]}: {_ENV_SET_RULE}; {unless}")
    if path[:2] in (["hydra", "job_logging"], ["hydra", "hydra_logging"]) and path[-1] == "filename":
        raise ConfigurationError(f"the override {shown(line)} names a file for a log handler to open; a job logs "
                                 f"to its own directory (choose it with hydra.run.dir or hydra.sweep.dir); {unless}")


_ENV_SET_RULE = f"hydra.job.env_set may set only {', '.join(ENV_SET_ALLOWED)}"


def check_composed_hydra(master: DictConfig) -> None:
    """A composed config (a config directory's files, not only the overrides) calls only mcsa-bench's
    callbacks and Hydra's own plugins, sets only allowed variables in the job's environment, and
    logs only to the standard streams and the job's own log file."""
    if _targets_allowed():
        return
    for name, node in (OmegaConf.to_container(master.hydra.callbacks, resolve=False) or {}).items():
        target = node.get("_target_") if isinstance(node, dict) else None
        raise ConfigurationError(f"hydra.callbacks.{name} (_target_: {target}) would make Hydra import and call "
                                 f"arbitrary code; refused unless {ALLOW_TARGETS_ENV_VAR}=1 is set")
    for name in master.hydra.job.get("env_set") or {}:
        if name not in ENV_SET_ALLOWED:
            raise ConfigurationError(f"hydra.job.env_set.{name}: {_ENV_SET_RULE}; "
                                     f"refused unless {ALLOW_TARGETS_ENV_VAR}=1 is set")
    for group in ("job_logging", "hydra_logging"):
        _check_logging(f"hydra.{group}", OmegaConf.to_container(master.hydra[group], resolve=False))
    for group in ("launcher", "sweeper"):
        target = str(master.hydra[group].get("_target_", ""))
        if not target.startswith(("hydra_plugins.", "hydra._internal.")):
            raise ConfigurationError(f"hydra.{group}._target_ {target!r} is not a Hydra plugin; "
                                     f"refused unless {ALLOW_TARGETS_ENV_VAR}=1 is set")


def _check_logging(path: str, node: Any) -> None:
    """A composed logging configuration opens no file but the job's own log and calls nothing but
    logging's own handlers and formatters (Python's logging imports any ``class``, ``()`` or ``ext://``)."""
    refused = f"refused unless {ALLOW_TARGETS_ENV_VAR}=1 is set"
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}"
            if key == "()" or (key == "class" and value not in LOG_CLASSES_ALLOWED):
                raise ConfigurationError(f"{where}: {value!r} would make logging import and call it; a log "
                                         f"configuration may name only {', '.join(LOG_CLASSES_ALLOWED)}; {refused}")
            if key == "filename" and value not in LOG_FILES_ALLOWED:
                raise ConfigurationError(f"{where}: {shown(str(value))} names a file for a log handler to open; "
                                         f"allowed: {', '.join(LOG_FILES_ALLOWED)}; {refused}")
            _check_logging(where, value)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_logging(f"{path}[{index}]", value)
    elif isinstance(node, str) and node.startswith("ext://") and node not in LOG_STREAMS_ALLOWED:
        raise ConfigurationError(f"{path}: {node!r} would make logging import it; a log configuration may name "
                                 f"only the streams {', '.join(LOG_STREAMS_ALLOWED)}; {refused}")


def describe_composition_error(error: Exception) -> str:
    """One line for a Hydra/OmegaConf composition error (unknown option, bad type, bad override)."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(error, MissingConfigException) and error.missing_cfg_file and "/" in error.missing_cfg_file:
        group, option = error.missing_cfg_file.rsplit("/", 1)
        options = sorted(o for o in (error.options or []) if not o.startswith("_"))
        return f"unknown {group} {option!r}{did_you_mean(option, options)}; available: {', '.join(options)}"
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else error
    parent = getattr(cause, "parent_node", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and isinstance(parent, DictConfig):
        keys = [str(k) for k in parent.keys()]
        allowed = [k for k in keys if k != "name"]
        if "name" in keys and cause.full_key.count(".") == 1:  # a component's node
            kind = cause.full_key.split(".")[0]
            return (f"{cause.full_key}: {kind} {parent._get_node('name')._value()!r} has no parameter {cause.key!r}"
                    f"{did_you_mean(cause.key, allowed)}; allowed: {', '.join(allowed) or '(none)'}")
        return (f"{cause.full_key}: unknown key {cause.key!r}{did_you_mean(cause.key, allowed)}"
                f"; allowed: {', '.join(allowed)}")
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        first_line = str(cause).strip().splitlines()[0]
        return f"{cause.full_key}: {first_line}"
    if isinstance(error, (TypeError, KeyError, AttributeError, AssertionError)):  # from inside OmegaConf's merge
        return f"the overrides cannot be applied ({type(error).__name__}: {' '.join(str(error).split())})"
    return " ".join(str(error).split())


@dataclass(frozen=True)
class Composition:
    """Every job's (overrides, composed config) in launch order, and the resolved Hydra settings."""

    jobs: list[tuple[list[str], DictConfig]]
    output_dirs: list[str]  # where each job writes: hydra.run.dir, or hydra.sweep.dir/hydra.sweep.subdir
    log_name: str  # the file each job logs to in its directory
    sweep_dir: str  # resolved hydra.sweep.dir
    launcher: str  # hydra.launcher._target_
    launcher_settings: dict  # the hydra.launcher node, resolved, of the joblib launcher (else empty)
    ray_address: str | None  # hydra.launcher.ray.init.address: the cluster Hydra's Ray launcher joins
    grid: dict[str, int] = field(default_factory=dict)  # a run without -m of a grid: its swept keys' value counts
    parallel: int = 1  # how many jobs the launcher runs at once (parallel_jobs)
    #: a search (a sweep whose sweeper chooses its jobs as it goes, jobs/objective.py): the sweeper as chosen
    #: (hydra/sweeper=optuna), its node resolved (hydra.sweeper), and the keys it searches; else None, {} and []
    search: str | None = None
    sweeper_settings: dict = field(default_factory=dict)
    searched: list[str] = field(default_factory=list)


def compose_jobs(
    overrides: list[str], *, multirun: bool, config_dir: str | None = None
) -> list[tuple[list[str], DictConfig]]:
    """(overrides, composed config) of every job the run (or sweep) will launch, in launch order."""
    return compose(overrides, multirun=multirun, config_dir=config_dir).jobs


def check_command_line(overrides: list[str], config_dir: str | None) -> None:
    """The overrides are safe and readable, and a ``--config-dir`` is a directory (ConfigurationError)."""
    from mcsa_bench.jobs.composition import check_config_dir

    check_overrides(overrides)
    check_config_dir(config_dir)


def compose(overrides: list[str], *, multirun: bool, config_dir: str | None = None,
            compositions: Compositions | None = None) -> Composition:
    """Compose every job of a run or sweep exactly as Hydra will, without running anything.

    Expands sweeps the way Hydra's BasicSweeper does (sweeper params from the config, then the
    command line). Other sweepers choose jobs as they go, so only their master config is returned.
    Raises :class:`ConfigurationError` with one line for any composition error, naming the job.
    ``compositions`` keeps the compositions for Hydra's own launch of the same command
    (:func:`mcsa_bench.jobs.composition.cached_sweep_composition`).
    """
    from mcsa_bench.jobs.composition import faster_composition

    check_command_line(overrides, config_dir)
    with faster_composition():
        return _compose(overrides, multirun, config_dir, compositions)


def _sweep_job_dir(cfg: DictConfig, number: int, sweep_dir: str) -> str:
    """The output directory of a sweep's job ``number``, as Hydra's launchers resolve it (under
    ``sweep_dir``, the master config's, which the launch is given)."""
    from omegaconf import open_dict, read_write

    if OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["subdir"] == "${hydra.job.num}":  # the default: fast
        return os.path.join(sweep_dir, str(number))
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.job.num = number
    return os.path.join(sweep_dir, str(cfg.hydra.sweep.subdir))  # the launch gets the master's sweep_dir


#: Hydra's basic launcher, by the class path a composed config names in hydra.launcher._target_
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def parallel_jobs(master: DictConfig, launcher: str) -> int:
    """How many jobs ``launcher`` runs at once: one for the basic launcher, joblib's workers, submitit's
    ``array_parallelism``, else (Ray) this machine's cores."""
    from mcsa_bench.jobs.workers import JOBLIB_LAUNCHER

    if launcher == BASIC_LAUNCHER:
        return 1
    if launcher == JOBLIB_LAUNCHER:
        from joblib import effective_n_jobs

        return effective_n_jobs(OmegaConf.select(master, "hydra.launcher.n_jobs"))
    return int(OmegaConf.select(master, "hydra.launcher.array_parallelism", default=None) or os.cpu_count() or 1)


#: what composing overrides can raise besides Hydra's and OmegaConf's own errors: OmegaConf raises
#: AttributeError or AssertionError when merging into an unset node (``paper={source:x}``)
PYTHON_COMPOSITION_ERRORS = (ValueError, TypeError, KeyError, AttributeError, AssertionError, OSError)


def _grid(hydra, master: DictConfig) -> dict[str, int]:
    """A grid's swept keys (its ``hydra.sweeper.params`` after the command line) with their numbers of values,
    when -m would launch more than one job; else empty."""
    from mcsa_bench.jobs.composition import split_sweep

    jobs = split_sweep(hydra, master) if master.hydra.sweeper.get("params") else []
    counts: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = override.partition("=")
            counts.setdefault(key, set()).add(value)
    return {key: len(values) for key, values in counts.items() if len(values) > 1}


def _search(hydra, master: DictConfig) -> dict[str, Any]:
    """A search's fields of its :class:`Composition`: the sweeper, its settings and the keys it searches."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from mcsa_bench.jobs.composition import searched_keys

    try:
        settings = OmegaConf.to_container(master.hydra.sweeper, resolve=True, enum_to_str=True)
        chosen = OmegaConf.select(master, "hydra.runtime.choices", default={}).get("hydra/sweeper")
        return {"search": str(chosen or settings["_target_"]), "sweeper_settings": settings,
                "searched": searched_keys(hydra, master)}
    except (HydraException, OmegaConfBaseException, *PYTHON_COMPOSITION_ERRORS) as error:
        raise ConfigurationError(f"hydra.sweeper: {describe_composition_error(error)}") from error


def _compose(overrides: list[str], multirun: bool, config_dir: str | None,
             compositions: Compositions | None) -> Composition:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from mcsa_bench.jobs.composition import BASIC_SWEEPER, CachingConfigLoader, create_hydra, split_sweep
    from mcsa_bench.jobs.workers import JOBLIB_LAUNCHER

    hydra = create_hydra(f"pkg://{CONFIG_MODULE}", config_dir)
    try:
        mode = RunMode.MULTIRUN if multirun else RunMode.RUN
        try:
            master = hydra.compose_config(CONFIG_NAME, overrides, run_mode=mode, with_log_configuration=False)
            sweep_dir, log_name = str(master.hydra.sweep.dir), f"{master.hydra.job.name}.log"
            launcher = str(master.hydra.launcher._target_)
            launcher_settings = (OmegaConf.to_container(master.hydra.launcher, resolve=True)
                                 if launcher == JOBLIB_LAUNCHER else {})
            ray_address = OmegaConf.select(master, "hydra.launcher.ray.init.address")
            output_dir = sweep_dir if multirun else str(master.hydra.run.dir)  # another sweeper's jobs: below it
            parallel = parallel_jobs(master, launcher)
        except (HydraException, OmegaConfBaseException, *PYTHON_COMPOSITION_ERRORS) as error:
            raise ConfigurationError(describe_composition_error(error)) from error
        check_composed_hydra(master)
        if not multirun or master.hydra.sweeper._target_ != BASIC_SWEEPER:
            grid = {} if multirun else _grid(hydra, master)  # before the sanitized config drops master's hydra node
            search = _search(hydra, master) if multirun else {}
            return Composition([(list(overrides), hydra.get_sanitized_cfg(master, "job"))], [output_dir], log_name,
                               sweep_dir, launcher, launcher_settings, ray_address, grid, parallel, **search)
        splits = split_sweep(hydra, master)
        # the cost of the distinct group choices; each is checked (+env=a,b of a --config-dir: not the master's)
        loader = CachingConfigLoader(hydra.config_loader, compositions, check_composed_hydra)
        jobs, output_dirs = [], []
        for number, job in enumerate(splits):
            try:
                cfg = loader.load_sweep_config(master, list(job))
                output_dirs.append(_sweep_job_dir(cfg, number, sweep_dir))
                jobs.append((list(job), hydra.get_sanitized_cfg(cfg, "job")))
            except (HydraException, OmegaConfBaseException, *PYTHON_COMPOSITION_ERRORS) as error:
                raise ConfigurationError(
                    f"job #{number} ({' '.join(job)}): {describe_composition_error(error)}"
                ) from error
        return Composition(jobs, output_dirs, log_name, sweep_dir, launcher, launcher_settings, ray_address,
                           parallel=parallel)
    finally:
        GlobalHydra.instance().clear()

