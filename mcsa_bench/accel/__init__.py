"""The accelerated backend (``backend=jax``): the methods in JAX, a grid cell's replicates as one
compiled, batched program (docs/architecture.md). JAX is an optional extra; nothing outside this
package imports it at module level. Arrays are float64 unless a component is asked for float32."""

from mcsa_bench.api import ConfigurationError

try:
    import jax
except ImportError:
    raise ConfigurationError("backend=jax needs JAX: pip install 'mcsa-bench[jax]'") from None

jax.config.update("jax_enable_x64", True)
