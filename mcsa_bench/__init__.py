"""mcsa-bench: benchmarking Markov chain score ascent (inclusive-KL VI with MCMC gradients)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcsa-bench")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from mcsa_bench.hookspecs import hookimpl  # noqa: E402  (plugin authors: `from mcsa_bench import hookimpl`)
from mcsa_bench.plugins import get_registry, load_registry  # noqa: E402
from mcsa_bench.engine import run  # noqa: E402

__all__ = ["__version__", "hookimpl", "get_registry", "load_registry", "run"]
