"""The package's version (mcsa_bench.version) is the installed distribution's, and the package exports it."""

from importlib.metadata import version

import mcsa_bench
from mcsa_bench.version import __version__


def test_the_version_is_the_installed_distributions():
    assert __version__ == version("mcsa-bench") != "0+unknown"
    assert mcsa_bench.__version__ is __version__
