"""What made a report, for its reader to reproduce it: the versions of the project and of the libraries
its numbers pass through, every installed plugin distribution with its version, the commit, the machine
and the command; and what made the runs (the versions and commits their tags record)."""

from __future__ import annotations

import os
import platform
from importlib import metadata

#: the distributions a report's numbers pass through (the runs: numpy, scipy; the store: MLflow; the
#: configs: Hydra; the figures: matplotlib)
LIBRARIES = ("numpy", "scipy", "mlflow", "hydra-core", "omegaconf", "matplotlib")
#: the entry point group plugins register under (mcsa_bench.plugins.ENTRY_POINT_GROUP)
PLUGIN_GROUP = "mcsa_bench"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def plugins() -> list[str]:
    """mcsa-bench and every installed plugin distribution, with its version (``name version``), read
    from the installed packages' metadata: the report loads no plugin."""
    from mcsa_bench.version import __version__

    found = {(point.dist.name, point.dist.version) for point in metadata.entry_points(group=PLUGIN_GROUP)
             if point.dist is not None}
    return [f"{name} {version}" for name, version in sorted({("mcsa-bench", __version__), *found})]


def provenance(command: str, runs) -> dict[str, object]:
    from mcsa_bench.tracking.record import COMMIT_TAG, DIRTY_TAG, VERSION_TAG
    from mcsa_bench.tracking.store import source_tags
    from mcsa_bench.version import __version__

    source = source_tags()
    commit = source.get(COMMIT_TAG)
    dirty = " (with uncommitted changes)" if source.get(DIRTY_TAG) == "true" else ""
    made_by = {tag: sorted({run.tags[tag] for run in runs if tag in run.tags}) for tag in (VERSION_TAG, COMMIT_TAG)}
    return {
        "mcsa-bench": __version__,
        "commit": f"{commit}{dirty}" if commit else "not a git checkout",
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "plugins": plugins(),
        "machine": f"{platform.node()}: {platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs",
        "command": command,
        "runs made by": {"mcsa-bench versions": made_by[VERSION_TAG], "commits": made_by[COMMIT_TAG]},
    }
