"""The accelerated backend's package without JAX: one line naming the extra to install (runs without JAX)."""

import subprocess
import sys


def test_importing_the_backend_without_jax_names_the_extra():
    code = (
        "import sys; sys.modules['jax'] = None\n"  # a None entry makes `import jax` raise ImportError
        "from mcsa_bench.api import ConfigurationError\n"
        "try:\n    import mcsa_bench.accel\nexcept ConfigurationError as error:\n    print(error)\n    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "backend=jax needs JAX: pip install 'mcsa-bench[jax]'"
