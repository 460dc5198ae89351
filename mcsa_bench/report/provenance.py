"""What made a report, for its reader to reproduce it: the versions of the project and of the libraries
its numbers pass through, every plugin with its version, the commit, the machine and the command;
and what made the runs (the versions and commits their tags record)."""

from __future__ import annotations

import os
import platform
from importlib import metadata

#: the distributions a report's numbers pass through (the runs: numpy, scipy; the store: MLflow; the
#: configs: Hydra; the figures: matplotlib)
LIBRARIES = ("numpy", "scipy", "mlflow", "hydra-core", "omegaconf", "matplotlib")
RUN_VERSION_TAGS = ("mcsa_bench.version", "mlflow.source.git.commit")


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def plugins() -> list[str]:
    """Every plugin distribution that registered a component, with its version (``name version``)."""
    from mcsa_bench.plugins import get_registry

    found = {(c.plugin.distribution or c.plugin.name, c.plugin.version or "") for c in get_registry().components()}
    return [f"{name} {version}".strip() for name, version in sorted(found)]


def provenance(command: str, runs) -> dict[str, object]:
    from mcsa_bench.tracking.store import source_tags
    from mcsa_bench.version import __version__

    source = source_tags()
    commit = source.get("mlflow.source.git.commit")
    dirty = " (with uncommitted changes)" if source.get("mcsa_bench.git.dirty") == "true" else ""
    made_by = {}
    for tag in RUN_VERSION_TAGS:
        values = sorted({run.tags[tag] for run in runs if tag in run.tags})
        made_by[tag] = values
    return {
        "mcsa-bench": __version__,
        "commit": f"{commit}{dirty}" if commit else "not a git checkout",
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "plugins": plugins(),
        "machine": f"{platform.node()}: {platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs",
        "command": command,
        "runs made by": {"mcsa-bench versions": made_by["mcsa_bench.version"],
                         "commits": made_by["mlflow.source.git.commit"]},
    }
