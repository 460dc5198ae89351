"""Composing a sweep's jobs at the cost of its distinct config-group choices.

Hydra composes every job of a sweep from scratch (defaults list, YAML files, schema), about 0.1 s
each on a quiet machine, and does it twice in the launching process: its basic sweeper validates
every job, then the launcher composes it again. For a table of 1,200 jobs that is four minutes
before the first job runs. A job's overrides are of two kinds: those that change the defaults list
(config-group choices such as ``estimator=msc`` or ``experiment=logistic_pima``, deletions,
additions and ``hydra.*`` settings) and plain value overrides (``seed=3``, ``optimizer.lr=0.1``).
Hydra applies the second kind after composing the first, to the composed config, with
``ConfigLoaderImpl._apply_overrides_to_config``. :class:`CachingConfigLoader` does the same,
composing each distinct set of structural overrides once and copying it; the result equals Hydra's
own composition, the ``hydra`` node included (tests/test_configs.py).

Pre-flight (``config.compose``) uses it directly; :func:`cached_sweep_composition` makes Hydra's own
sweeper and launchers (basic, joblib, submitit, ray) use it while ``mcsa-bench run`` launches.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, Iterator

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

ComposeFromScratch = Callable[[ConfigLoaderImpl, DictConfig, list[str]], DictConfig]


class CachingConfigLoader:
    """``load_sweep_config`` of a Hydra config loader, composing each distinct set of structural
    overrides once (``compose_from_scratch``: Hydra's own ``load_sweep_config``)."""

    def __init__(self, loader: ConfigLoaderImpl,
                 compose_from_scratch: ComposeFromScratch = ConfigLoaderImpl.load_sweep_config):
        self._loader, self._compose = loader, compose_from_scratch
        self._parser = OverridesParser.create(config_loader=loader)
        self._bases: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        overrides = self._parser.parse_overrides(list(sweep_overrides))
        values = [o for o in overrides if self._is_value_override(o)]
        structural = tuple(o.input_line for o in overrides if not self._is_value_override(o))
        if structural not in self._bases:
            self._bases[structural] = self._compose(self._loader, master_config, list(structural))
        cfg = copy.deepcopy(self._bases[structural])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        # the parts of the hydra node that Hydra derives from the job's overrides
        task = [o for o in overrides if not o.is_hydra_override()]
        cfg.hydra.overrides.task = [o.input_line for o in task]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=task, exclude_keys=list(dirname.exclude_keys), item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg

    def _is_value_override(self, override) -> bool:
        return (not override.is_hydra_override() and not override.is_delete() and not override.is_add()
                and not override.is_force_add() and not self._loader.repository.group_exists(override.key_or_group))


@contextlib.contextmanager
def cached_sweep_composition() -> Iterator[None]:
    """Within the block, every Hydra config loader composes sweep jobs through a
    :class:`CachingConfigLoader` (Hydra's sweepers and launchers call ``load_sweep_config``)."""
    original = ConfigLoaderImpl.load_sweep_config
    cachers: dict[int, CachingConfigLoader] = {}

    def load_sweep_config(loader: ConfigLoaderImpl, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        cacher = cachers.setdefault(id(loader), CachingConfigLoader(loader, original))
        return cacher.load_sweep_config(master_config, sweep_overrides)

    ConfigLoaderImpl.load_sweep_config = load_sweep_config
    try:
        yield
    finally:
        ConfigLoaderImpl.load_sweep_config = original
