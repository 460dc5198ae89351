"""What importing the backend costs and needs: no Hydra, MLflow or other sweep machinery (the
accelerator machines have numpy, scipy, pluggy and JAX only), and one line without JAX (a plugin's
broken twin: tests/test_plugins.py)."""

import subprocess
import sys

import pytest

pytest.importorskip("jax")


SWEEP_MACHINERY = ("hydra", "omegaconf", "mlflow", "tqdm", "threadpoolctl", "matplotlib")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_backend_and_the_models_import_no_sweep_machinery():
    done = run_python(
        "import sys; from mcsa_bench import get_registry; from mcsa_bench.assembly import assemble; "
        "import mcsa_bench.builtin.models, mcsa_bench.accel.engine, mcsa_bench.autodiff.twins; "
        f"get_registry(); print(sorted({{m.split('.')[0] for m in sys.modules}} & set({SWEEP_MACHINERY!r})))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_jax_the_backend_is_one_line():
    done = run_python("import sys; sys.modules['jax'] = None\n"
                      "from mcsa_bench.api import ConfigurationError\n"
                      "try:\n    import mcsa_bench.accel\nexcept ConfigurationError as error:\n    print(error)")
    assert done.stdout.strip() == "backend=jax needs JAX: pip install 'mcsa-bench[jax]'"
