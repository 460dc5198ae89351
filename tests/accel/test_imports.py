"""What importing the backend costs and needs: no Hydra, MLflow or other sweep machinery (the
accelerator machines have numpy, scipy, pluggy and JAX only), one line without JAX, and a plugin's
broken twins as a warning that leaves the others loaded."""

import subprocess
import sys
import warnings

import pytest

pytest.importorskip("jax")

from mcsa_bench.accel import twins

SWEEP_MACHINERY = ("hydra", "omegaconf", "mlflow", "tqdm", "threadpoolctl", "matplotlib")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_backend_and_the_models_import_no_sweep_machinery():
    done = run_python(
        "import sys; from mcsa_bench import get_registry; from mcsa_bench.assembly import assemble; "
        "import mcsa_bench.builtin.models, mcsa_bench.accel.engine, mcsa_bench.accel.twins; "
        f"get_registry(); print(sorted({{m.split('.')[0] for m in sys.modules}} & set({SWEEP_MACHINERY!r})))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_jax_the_backend_is_one_line():
    done = run_python("import sys; sys.modules['jax'] = None\n"
                      "from mcsa_bench.api import ConfigurationError\n"
                      "try:\n    import mcsa_bench.accel\nexcept ConfigurationError as error:\n    print(error)")
    assert done.stdout.strip() == "backend=jax needs JAX: pip install 'mcsa-bench[jax]'"


def test_a_plugin_whose_twins_fail_is_a_warning_and_the_others_load(monkeypatch):
    class Entry:
        def __init__(self, name, register_twins):
            self.name, self.value, self._register = name, f"{name}:register_jax_twins", register_twins

        def load(self):
            return self._register

    def broken(register):
        register("kernel", "half_registered", lambda kernel: kernel)
        raise RuntimeError("no GPU build of this plugin")

    def working(register):
        register("kernel", "fine", lambda kernel: kernel)

    monkeypatch.setattr(twins, "_twins", {})
    monkeypatch.setattr(twins, "_loaded", False)
    monkeypatch.setattr(twins, "entry_points", lambda group: [Entry("broken", broken), Entry("working", working)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        covered = twins.covered("kernel")
    assert [str(w.message) for w in caught] == [
        "JAX twins of plugin 'broken' (broken:register_jax_twins) failed to load: "
        "RuntimeError: no GPU build of this plugin"]
    assert covered == ["cis", "fine", "hmc", "imh"]
