"""What a report of a store written by an older mcsa-bench rebuilds from today's configs and plugins.

Runs and sweeps record everything a report needs (mcsa_bench.tracking.record): the method tag, the
``paper`` block, a sweep's job list. Stores written before they did lack some of it; for those runs
only, :class:`TodaysConfigs` answers the report's :class:`~mcsa_bench.report.runs.Reconstruction` from
the configs and plugins installed now (which may have changed since: docs/report.md, "Stores written
by older versions"). The command line hands it to the report, which itself imports none of this.
"""

from __future__ import annotations

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.record import split_overrides


class TodaysConfigs:
    """The report's reconstruction from today's conf/ and plugins; Hydra and the registry load on first use."""

    def default_kernel(self, scheme: str) -> str | None:
        from mcsa_bench.plugins import get_registry

        try:
            return getattr(get_registry().get("estimator", scheme).factory, "default_kernel", None)
        except ConfigurationError:
            return None

    def sweep_jobs(self, sweep_overrides: str) -> tuple[list[str], bool]:
        """Every job Hydra's BasicSweeper launches for a sweep's overrides (the parent's overrides tag), each
        as its run's overrides tag holds it, and whether the sweep resumes. Composes only the master config."""
        from hydra.core.global_hydra import GlobalHydra
        from hydra.errors import HydraException
        from hydra.types import RunMode
        from omegaconf.errors import OmegaConfBaseException

        from mcsa_bench.jobs.composition import create_hydra, split_sweep
        from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME, describe_composition_error, register_configs
        from mcsa_bench.plugins import get_registry

        register_configs(get_registry())
        hydra = create_hydra(f"pkg://{CONFIG_MODULE}")
        try:
            master = hydra.compose_config(CONFIG_NAME, split_overrides(sweep_overrides), run_mode=RunMode.MULTIRUN,
                                          with_log_configuration=False)
            return [" ".join(job) for job in split_sweep(hydra, master)], bool(master.get("resume", False))
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            raise ConfigurationError(describe_composition_error(error)) from error
        finally:
            GlobalHydra.instance().clear()

    def config_hash(self, job_overrides: str) -> str | None:
        from mcsa_bench.jobs.config import RunSettings, compose
        from mcsa_bench.plugins import get_registry

        (_, cfg), = compose(split_overrides(job_overrides), multirun=False).jobs
        return RunSettings.from_config(cfg).config_hash(get_registry())

    def paper(self, experiment: str) -> dict | None:
        from omegaconf import OmegaConf

        from mcsa_bench.jobs.config import compose, register_configs
        from mcsa_bench.plugins import get_registry

        register_configs(get_registry())
        (_, cfg), = compose([f"experiment={experiment}"], multirun=False).jobs
        paper = cfg.get("paper")
        return None if paper is None else OmegaConf.to_container(paper)
