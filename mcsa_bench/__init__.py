"""mcsa-bench: benchmarking Markov chain score ascent (inclusive-KL VI with MCMC gradients)."""

from mcsa_bench.engine import Settings, run
from mcsa_bench.hookspecs import hookimpl  # plugin authors: `from mcsa_bench import hookimpl`
from mcsa_bench.plugins import get_registry, load_registry
from mcsa_bench.version import __version__

__all__ = ["__version__", "hookimpl", "get_registry", "load_registry", "run", "Settings"]
