"""The installed distribution's version (``mcsa_bench.__version__``), in a module of its own so that
modules below the package's entry point can read it without importing the package itself."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcsa-bench")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
