"""The accelerated backend (JAX): a grid cell's replicates as one compiled, batched program
(docs/architecture.md, "The accelerated backend"). Optional: ``pip install 'mcsa-bench[jax]'``.

float64 by default (x64 is switched on here); the engine takes a ``dtype`` option for float32. JAX's
persistent compilation cache is switched on here too (accel/programs.py: where, and how to turn it off).
"""

from __future__ import annotations

from mcsa_bench.api import ConfigurationError

try:
    import jax
except ImportError as error:  # one line for the user, no traceback (ConfigurationError)
    raise ConfigurationError("backend=jax needs JAX: pip install 'mcsa-bench[jax]'") from error

jax.config.update("jax_enable_x64", True)

from mcsa_bench.accel.programs import use_persistent_cache  # noqa: E402

use_persistent_cache()
