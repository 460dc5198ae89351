"""benchmarks/measure/paper_table_gpu.py on a slice of the logistic table, on the CPU: the plan, the
run with Hydra and MLflow unimportable (as on the accelerator machine), and the import into a store
that reports it, with the very numbers `mcsa-bench run -m backend=jax` records for the same slice."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

from tests.jobs.test_cell import by_seed, job_runs  # noqa: E402
from tests.support import cli_in_process  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "measure" / "paper_table_gpu.py"
SLICE = ["experiment=logistic", "size=smoke", "experiment@_global_=logistic_pima", "method=pmcsa,snis", "seed=0,1,2"]


def script():
    spec = importlib.util.spec_from_file_location("paper_table_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_table_planned_run_without_hydra_or_mlflow_and_imported_is_the_direct_runs_table(tmp_path, store_in,
                                                                                           monkeypatch):
    table = tmp_path / "table"
    found = script().plan(table, SLICE)
    assert found["jobs"] == 6 and [[job["seed"] for job in cell["jobs"]] for cell in found["cells"]] == [[0, 1, 2]] * 2

    blocked = tmp_path / "blocked"
    for name in ("hydra", "mlflow", "omegaconf"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('no {name} on this machine')\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "run", str(table)], capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(blocked), "JAX_PLATFORMS": "cpu", "PATH": ""})
    assert done.returncode == 0, done.stderr
    timing = json.loads((table / "timing.json").read_text())
    assert timing["cells"] == 2 and [cell["programs"] for cell in timing["per_cell"]] == [1, 1]  # one per cell

    imported, direct = tmp_path / "imported", tmp_path / "direct"
    for workdir in (imported, direct):
        workdir.mkdir()
        store_in(workdir)
    monkeypatch.chdir(imported)
    assert script().main(["import", str(table), *SLICE]) == 0
    ran = cli_in_process("run", "-m", "backend=jax", *SLICE, cwd=direct, monkeypatch=monkeypatch)
    assert ran.returncode == 0, ran.stderr
    for method in ("pmcsa", "snis"):
        mine = by_seed(r for r in job_runs(imported) if r.data.tags["method"] == method)
        theirs = by_seed(r for r in job_runs(direct) if r.data.tags["method"] == method)
        assert sorted(mine) == sorted(theirs) == [0, 1, 2]
        for seed, run in mine.items():
            assert run.info.status == "FINISHED" and run.data.tags["mcsa_bench.cell"].endswith("(imported) R=3 chunk=3")
            assert {k: v for k, v in run.data.metrics.items() if k != "wall_time"} == {
                k: v for k, v in theirs[seed].data.metrics.items() if k != "wall_time"}
            assert run.data.params == theirs[seed].data.params
    out = tmp_path / "report"
    report = cli_in_process("report", "--sweep", "latest", "--no-figures", "--out", str(out), cwd=imported,
                            monkeypatch=monkeypatch)
    assert report.returncode == 0, report.stderr
    tables = json.loads((out / "summary.json").read_text())["tables"]
    assert {cell["column"] for t in tables for cell in t["cells"]} == {"pmcsa", "snis"}
    assert all(cell["n"] == 3 for t in tables for cell in t["cells"])
