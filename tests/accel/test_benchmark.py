"""benchmarks/measure/accelerator.py --quick runs end to end on the CPU and writes its JSON and table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "measure" / "accelerator.py"


@pytest.mark.slow
def test_the_quick_run_measures_every_column(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path / "quick")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "warning: imported" not in done.stderr
    [row] = json.loads((tmp_path / "quick.json").read_text())["rows"]
    assert row["model"] == "logistic_pima" and row["dim"] == 11
    assert row["numpy_one_core_us"] > 0 and row["numpy_all_cores_us"] > 0
    assert set(row["jax"]) == {"1", "64"} and all(m["us"] > 0 and m["failed"] == 0 for m in row["jax"].values())
    assert "| logistic_pima | 11 |" in (tmp_path / "quick.md").read_text()


def test_an_unknown_model_is_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "logistic_pima,nope"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("accelerator.py: error: unknown model nope; allowed: logistic_pima, "
                                   "gp_classification_sonar, gp_classification_breast, radon, bnn_boston")
