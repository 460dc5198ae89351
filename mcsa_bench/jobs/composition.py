"""Composing a sweep's jobs at the cost of its distinct config-group choices.

Hydra composes every job of a sweep from scratch (defaults list, YAML files, schema), about 0.1 s
each on a quiet machine, and does it twice in the launching process: its basic sweeper validates
every job, then the launcher composes it again; pre-flight composes each job once before that. For
a table of 1,200 jobs that is six minutes before the first job runs. The overrides of a job (the
master config's ``hydra`` overrides, then the job's own) are of two kinds, as Hydra sorts them
(``hydra._internal.defaults_list.Overrides``): those of a config group (``estimator=msc``,
``experiment=logistic_pima``, ``hydra/launcher=joblib``, with or without ``+``/``++``/``~``) change
the defaults list; all others set values (``seed=3``, ``optimizer.lr=0.1``,
``++hydra.job.env_set.X=1``, ``hydra.sweep.dir=...``). Hydra applies the second kind to the composed
config with ``ConfigLoaderImpl._apply_overrides_to_config``. :class:`CachingConfigLoader` does the
same, composing each distinct set of group overrides once and copying it; the result equals Hydra's
own composition, the ``hydra`` node included (tests/jobs/test_config.py).

One command shares one cache: pre-flight (``config.compose``) fills it, and
:func:`cached_sweep_composition` makes Hydra's basic launcher read it while ``mcsa-bench run``
launches, although the launch adds ``hydra`` value overrides of its own (the jobs' environment, the
sweep directory); the basic sweeper's own check of the jobs is skipped, since pre-flight composed
them all. The joblib and ray launchers compose each job in a worker
process that serves many jobs: there the first job turns a cache per sweep on
(:func:`cache_sweep_composition_in_this_worker`), or, for the joblib launcher, the warm-up that
pre-flight sends each worker, with pre-flight's compositions; a submitit job is a process of its own.

Each composition from scratch loads some twenty config files and schema nodes, and a sweep's
distinct group choices load mostly the same ones: within a process (:func:`faster_composition`),
each is parsed once, again only when it changes, and handed out as a copy, and Hydra skips work
whose result it would not use.

This module is the project's only door to Hydra's private modules (``hydra._internal``): the
above, Hydra's main object (:func:`create_hydra`), its basic sweeper's expansion of a sweep
(:func:`split_sweep`) and its command-line parser (:func:`hydra_args_parser`). They were written for
the Hydra releases in :data:`HYDRA_RELEASES`; importing this module under another one fails with
one line naming the mismatch (:func:`check_hydra_version`).
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import hydra
import yaml

from mcsa_bench.api import ConfigurationError

#: the Hydra releases this module's use of hydra._internal was written and tested for: [first, before)
HYDRA_RELEASES = ((1, 3, 2), (1, 4))


def check_hydra_version(found: str) -> None:
    """A :class:`ConfigurationError` naming the mismatch unless ``found`` is in :data:`HYDRA_RELEASES`."""
    numbers = tuple(int(part) for part in re.findall(r"\d+", found)[:3])
    first, before = HYDRA_RELEASES
    if not first <= numbers < before:
        raise ConfigurationError(
            f"hydra-core {found} is installed, but mcsa-bench uses Hydra's internals as of releases "
            f"{'.'.join(map(str, first))} to before {'.'.join(map(str, before))}: "
            f"pip install 'hydra-core>={'.'.join(map(str, first))},<{'.'.join(map(str, before))}'")


check_hydra_version(hydra.__version__)  # before the private modules: they may have moved in another release

from hydra._internal import defaults_list  # noqa: E402
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname  # noqa: E402
from hydra._internal.config_repository import ConfigRepository  # noqa: E402
from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402
from hydra.plugins.sweeper import Sweeper  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

#: Hydra's basic sweeper, by the class path a composed config names in hydra.sweeper._target_
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: composed configs by (config name, config sources, group overrides)
Compositions = dict[tuple, DictConfig]
#: values that shape the composition itself: where configs are found, which variables are copied
_STRUCTURAL_VALUES = ("hydra.searchpath", "hydra.job.env_copy")


#: parsed configs by (config sources, config path): (where it came from, Hydra's ConfigResult)
_PARSED: dict[tuple, tuple[tuple, object]] = {}


def _origin(repository: ConfigRepository, config_path: str) -> tuple | None:
    """What Hydra would load ``config_path`` from: the first source that has it, with that file's bytes
    (a ConfigStore node: the node object itself; another kind of source: a token equal to nothing)."""
    for index, source in enumerate(repository.sources):
        if source.is_config(config_path):
            name, kind = source._normalize_file_name(config_path), type(source).__name__
            # by name: Hydra's plugin scan executes its core plugins' modules again (new classes)
            if kind == "FileConfigSource":
                return index, Path(source.path, name).read_bytes()
            if kind == "ImportlibResourcesConfigSource":
                return index, resources.files(source.path).joinpath(name).read_bytes()
            if kind == "StructuredConfigSource":
                return index, source.store._open(name)
            return index, object()
    return None


def _parse(load_config: Callable, repository: ConfigRepository, config_path: str, index: int):
    """Hydra's parse of a config file, or a :class:`ConfigurationError` naming the file and what is wrong."""
    try:
        return load_config(repository, config_path)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        source = repository.sources[index]
        where = f"{source.path}/{source._normalize_file_name(config_path)}"
        if isinstance(error, UnicodeDecodeError):
            raise ConfigurationError(f"config file {where} is not UTF-8 text (byte {error.object[error.start]:#04x} "
                                     f"at offset {error.start})") from None
        mark = getattr(error, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or " ".join(str(error).split())
        raise ConfigurationError(f"config file {where}{line}: not valid YAML ({problem})") from None


def check_config_dir(config_dir: str | None) -> None:
    """A config directory given on the command line exists and is a directory (Hydra would fail late)."""
    if config_dir is not None and not Path(config_dir).is_dir():
        what = "is not a directory" if Path(config_dir).exists() else "does not exist"
        raise ConfigurationError(f"--config-dir {config_dir!r} {what}; give a directory of config groups "
                                 f"(e.g. DIR/model/mine.yaml, selected with model=mine)")


def _same_origin(cached: tuple, current: tuple) -> bool:
    """The same source, and the same file content or the very same ConfigStore node."""
    (index, what), (current_index, current_what) = cached, current
    return index == current_index and (what is current_what or (isinstance(what, bytes) and what == current_what))


@contextlib.contextmanager
def faster_composition() -> Iterator[None]:
    """Within the block, Hydra composes as it does, without the work it repeats or discards:

    - its config repositories parse each config file or ConfigStore node once per process (per
      search path) and hand out deep copies, as a fresh read would be: the YAML parse and the
      defaults list cost more than the copy. Every load still finds the source Hydra would use and
      reads the file: a changed file, a file that now shadows it earlier in the search path, or a
      node stored anew in ConfigStore is parsed again. Hydra also deep-copies the repository for
      every composition (``CachingConfigRepository``), and with it ConfigStore's every node (about
      40 ms with the components' schemas) to keep its own list of sources; the copy gets that list
      only (ConfigStore itself copies every node it loads);
    - for each node of the defaults tree Hydra builds an OmegaConf map of every known group choice,
      which it reads only to resolve interpolated entries of that node's defaults list (config.yaml's
      ``optional grid_size: ${experiment}_${size}``); the map is built only for a list that has one
      (a fifth of the time of composing the logistic grid's cells).

    Reentrant."""
    if getattr(ConfigRepository.load_config, "reads_once", False):
        yield
        return
    original = ConfigRepository.load_config
    interpolation_map = defaults_list._create_interpolation_map

    def load_config(repository: ConfigRepository, config_path: str):
        origin = _origin(repository, config_path)
        if origin is None:
            return original(repository, config_path)  # not found: Hydra's own answer
        key = (tuple((type(s).__name__, s.provider, s.path) for s in repository.sources), config_path)
        cached = _PARSED.get(key)
        if cached is None or not _same_origin(cached[0], origin):
            cached = _PARSED[key] = (origin, _parse(original, repository, config_path, origin[0]))
        return copy.deepcopy(cached[1])

    def copy_with_own_sources(repository: ConfigRepository, memo: dict) -> ConfigRepository:
        clone = copy.copy(repository)
        clone.sources = list(repository.sources)
        return clone

    def interpolation_map_if_read(overrides, defaults: list, self_added: bool):
        # the caller reads the map only to resolve interpolated entries of `defaults` (override
        # entries are checked too: a superset, so the map is there whenever it is read)
        if any(default.is_interpolation() for default in defaults if not default.is_self()):
            return interpolation_map(overrides, defaults, self_added)
        return None

    load_config.reads_once = True
    ConfigRepository.load_config, ConfigRepository.__deepcopy__ = load_config, copy_with_own_sources
    defaults_list._create_interpolation_map = interpolation_map_if_read
    try:
        yield
    finally:
        ConfigRepository.load_config = original
        del ConfigRepository.__deepcopy__
        defaults_list._create_interpolation_map = interpolation_map


def compose_from_scratch(loader: ConfigLoaderImpl, config_name: str, overrides: list[str]) -> DictConfig:
    """Hydra's own composition of a job (``load_sweep_config`` without a master config)."""
    return loader.load_configuration(config_name=config_name, overrides=overrides, run_mode=RunMode.RUN)


class CachingConfigLoader:
    """``load_sweep_config`` of a Hydra config loader, composing each distinct set of group
    overrides once (into ``compositions``, which loaders of one command may share); ``check`` sees
    each new composition (the value overrides applied to it are the command line's, checked apart)."""

    def __init__(self, loader: ConfigLoaderImpl, compositions: Compositions | None = None,
                 check: Callable[[DictConfig], None] | None = None):
        self._loader = loader
        self._parser = OverridesParser.create(config_loader=loader)
        self._bases = {} if compositions is None else compositions
        self._check = check

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        # the command's lines as written (${hydra.job.num} in one is the job's, not to be resolved here)
        command = OmegaConf.to_container(master_config.hydra.overrides.hydra)
        overrides = self._parser.parse_overrides([*command, *sweep_overrides])
        values = [o for o in overrides if self._is_value_override(o)]
        groups = [o.input_line for o in overrides if not self._is_value_override(o)]
        name = master_config.hydra.job.config_name
        key = (name, str(master_config.hydra.runtime.config_sources), tuple(groups))
        if key not in self._bases:
            self._bases[key] = compose_from_scratch(self._loader, name, groups)
            if self._check is not None:
                self._check(self._bases[key])
        cfg = copy.deepcopy(self._bases[key])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        # the parts of the hydra node that Hydra derives from the overrides
        cfg.hydra.overrides.hydra = [o.input_line for o in overrides if o.is_hydra_override()]
        task = [o for o in overrides if not o.is_hydra_override()]
        cfg.hydra.overrides.task = [o.input_line for o in task]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=task, exclude_keys=list(dirname.exclude_keys), item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg

    def _is_value_override(self, override) -> bool:
        if override.key_or_group in _STRUCTURAL_VALUES:
            return False
        return isinstance(override.value(), dict) or not self._loader.repository.group_exists(override.key_or_group)


def _sweep_key(master_config: DictConfig) -> tuple:
    """What tells sweeps apart, in any process: the command's overrides, sweep directory and config
    sources (a worker receives a fresh copy of the loader and master config with every job)."""
    hydra = master_config.hydra
    return (str(OmegaConf.to_container(hydra.sweep, resolve=False)),  # unresolved: ${now:...} would differ
            tuple(hydra.overrides.task), tuple(hydra.overrides.hydra), str(hydra.runtime.config_sources))


def _caching(compositions_for: Callable[[DictConfig], Compositions]):
    """``load_sweep_config`` through a :class:`CachingConfigLoader` whose compositions are
    ``compositions_for(master_config)``."""

    def load_sweep_config(
        loader: ConfigLoaderImpl, master_config: DictConfig, sweep_overrides: list[str]
    ) -> DictConfig:
        return CachingConfigLoader(loader, compositions_for(master_config)).load_sweep_config(
            master_config, sweep_overrides
        )

    load_sweep_config.caching = True
    return load_sweep_config


@contextlib.contextmanager
def cached_sweep_composition(compositions: Compositions | None = None, *, jobs_checked: bool = False) -> Iterator[None]:
    """Within the block, every Hydra config loader composes sweep jobs through a
    :class:`CachingConfigLoader` sharing ``compositions`` (pre-flight's, for instance): Hydra's
    sweepers and launchers call ``load_sweep_config``; and each config file is read once.

    ``jobs_checked``: every job the basic sweeper will launch has been composed already (pre-flight),
    so the sweeper does not compose each batch's jobs once more to check them before the launcher
    composes them (``Sweeper.validate_batch_is_legal``: 16 s of CPU for a table of 1,200 jobs)."""
    shared = {} if compositions is None else compositions
    original, validate = ConfigLoaderImpl.load_sweep_config, Sweeper.validate_batch_is_legal
    ConfigLoaderImpl.load_sweep_config = _caching(lambda master_config: shared)
    if jobs_checked:
        Sweeper.validate_batch_is_legal = _unless_basic_sweeper(validate)
    try:
        with faster_composition():
            yield
    finally:
        ConfigLoaderImpl.load_sweep_config, Sweeper.validate_batch_is_legal = original, validate


def _unless_basic_sweeper(validate: Callable) -> Callable:
    """``validate`` for every sweeper but Hydra's basic one, whose jobs pre-flight composes (other
    sweepers choose their jobs as they go). By name: Hydra's plugin scan executes the basic
    sweeper's module again, so its class is not the one an import here would see."""
    def validate_batch_is_legal(sweeper: Sweeper, batch) -> None:
        if f"{type(sweeper).__module__}.{type(sweeper).__qualname__}" != BASIC_SWEEPER:
            validate(sweeper, batch)
    return validate_batch_is_legal


@contextlib.contextmanager
def launching(jobs: list[list[str]] | None) -> Iterator[None]:
    """Within the block, Hydra's basic sweeper launches ``jobs`` (each one job's overrides, in order: a
    sweep by cell's launcher jobs, jobs/cell.py) instead of its expansion of the command line, in
    batches of its ``max_batch_size``; None: its own jobs. By name, as :func:`_unless_basic_sweeper`."""
    if jobs is None:
        yield
        return
    from hydra.core.plugins import Plugins

    def split_arguments(overrides, max_batch_size: int | None) -> list[list[list[str]]]:
        size = max_batch_size or max(len(jobs), 1)
        return [jobs[start:start + size] for start in range(0, len(jobs), size)]

    instantiate = Plugins.instantiate_sweeper

    def instantiate_sweeper(plugins: Plugins, **kwargs) -> Sweeper:
        sweeper = instantiate(plugins, **kwargs)
        if f"{type(sweeper).__module__}.{type(sweeper).__qualname__}" == BASIC_SWEEPER:
            sweeper.split_arguments = split_arguments  # its own static method, called as self.split_arguments
        return sweeper

    Plugins.instantiate_sweeper = instantiate_sweeper
    try:
        yield
    finally:
        Plugins.instantiate_sweeper = instantiate


#: the launching process's compositions, sent to this worker before its first job: a new sweep's cache starts with them
_worker_seed: Compositions = {}


def cache_sweep_composition_in_this_worker(seed: Compositions | None = None) -> None:
    """From now on, compose the jobs this worker process receives (joblib, Ray) through a cache per
    sweep: Hydra composes a job in the worker before calling the task function, so the cache serves
    a worker's second job on, or its first with ``seed``: the compositions of the launching
    process's pre-flight, which a warm worker receives (jobs/workers.py). An entry serves a job
    only if its config name, config sources and group overrides are the job's own. Per sweep, so
    that a worker serving a later sweep reads the config files afresh."""
    if seed is not None:
        _worker_seed.clear()
        _worker_seed.update(seed)
    if not getattr(ConfigLoaderImpl.load_sweep_config, "caching", False):
        per_sweep: dict[tuple, Compositions] = {}
        ConfigLoaderImpl.load_sweep_config = _caching(
            lambda master: per_sweep.setdefault(_sweep_key(master), dict(_worker_seed)))


# ----------------------------------------------------------------------------- Hydra's main object


def create_hydra(primary_config: str, config_dir: str | None = None):
    """Hydra's main object on the config package ``primary_config`` (``pkg://...``), with a user's
    config directory searched first, as ``hydra.main`` builds it."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path

    load_hydra_plugins()
    search_path = create_config_search_path(primary_config)
    if config_dir is not None:
        search_path.prepend("command-line", f"file://{config_dir}")
    return Hydra.create_main_hydra2(task_name="mcsa-bench", config_search_path=search_path)


def load_hydra_plugins() -> None:
    """Hydra's scan of its installed plugins (every module under ``hydra_plugins``), done once per process; a
    plugin that fails to import with anything but an ImportError, which Hydra would let out as a traceback
    from every command, is one line naming it and its distribution (hydra-nevergrad-sweeper 1.2.0, the last
    release, does not load on Python 3.11: a dataclass with a mutable default)."""
    import traceback

    from hydra.core.plugins import Plugins

    try:
        Plugins.instance()
    except Exception as error:
        modules = [frame.f_globals.get("__name__", "") for frame, _ in traceback.walk_tb(error.__traceback__)]
        module = next((m for m in reversed(modules) if m.startswith("hydra_plugins.")), "a module of hydra_plugins")
        distribution = _distribution_of(module)
        named = f" ({distribution[0]} {distribution[1]})" if distribution else ""
        remedy = f"pip uninstall {distribution[0]}, or upgrade it" if distribution else "uninstall or upgrade it"
        raise ConfigurationError(
            f"the Hydra plugin {module}{named} fails to load "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]}), and Hydra loads every installed plugin "
            f"before any command: {remedy}") from None


def _distribution_of(module: str) -> tuple[str, str] | None:
    """(name, version) of the installed distribution that holds ``module``, or None."""
    from importlib.metadata import distributions

    folder = "/".join(module.split(".")[:2]) + "/"
    for distribution in distributions():
        if any(str(path).startswith(folder) for path in distribution.files or ()):
            return distribution.metadata["Name"], distribution.version
    return None


def split_sweep(hydra_app, master: DictConfig) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper expands the master config's sweeper params and
    the command line (in that order)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = [f"{key}={value}" for key, value in (master.hydra.sweeper.params or {}).items()]
    parsed = OverridesParser.create(config_loader=hydra_app.config_loader).parse_overrides(
        params + list(master.hydra.overrides.task))
    return [list(job) for job in BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]]


def searched_keys(hydra_app, master: DictConfig) -> list[str]:
    """The keys a sweeper that chooses its jobs as it goes (Optuna, Nevergrad) searches: its params of the
    config, then those the command line sweeps (``optimizer.lr=interval(0.001,0.1)``, ``seed=0,1``)."""
    params = [f"{key}={value}" for key, value in (master.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create(config_loader=hydra_app.config_loader).parse_overrides(
        params + list(master.hydra.overrides.task))
    return list(dict.fromkeys(o.key_or_group for o in parsed if o.is_sweep_override()))


def hydra_args_parser():
    """Hydra's own command-line parser (``-m``, ``--cfg``, ``-cd``, ...), which `mcsa-bench run` takes."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()
