"""``mcsa-bench references make`` (mcsa_bench/jobs/make_reference.py): a reference made for a NumPyro file is
stored under the model's identity and found by a later run of the same files (the posterior-accuracy
metrics logged), listed by ``mcsa-bench references``; NUTS short of the bar is one line, exit 1, nothing
stored; bad options are one line, exit 2."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpyro")

DATA = Path(__file__).resolve().parents[1] / "data" / "ppl"
MODEL = ["model=numpyro", "model.source=model.py:model", "model.data=data.json"]


def cli(tmp_path, *arguments):
    environment = {"MCSA_BENCH_REFERENCES": str(tmp_path / "references")}
    import os

    return subprocess.run([sys.executable, "-m", "mcsa_bench.cli", *arguments], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, env={**os.environ, **environment})


@pytest.fixture
def files(tmp_path):
    shutil.copy(DATA / "eight_schools_numpyro.py", tmp_path / "model.py")
    shutil.copy(DATA / "eight_schools.json", tmp_path / "data.json")
    return tmp_path


@pytest.mark.slow
def test_a_made_reference_is_found_by_later_runs_of_the_same_files(files):
    made = cli(files, "references", "make", "--target-accept", "0.95", *MODEL)  # 4 x 5,000 draws: ESS >= 12,000
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Reference of numpyro stored in" in made.stdout and "no divergences" in made.stdout
    listed = json.loads(cli(files, "references", "--json").stdout)
    (mine,) = [reference for reference in listed if reference["made_by_user"]]
    assert mine["model"] == "numpyro" and set(mine["params"]) == {"source_sha256", "function", "data_sha256"}
    run = cli(files, "run", *MODEL, "n_iters=400", "eval_every=200")
    assert run.returncode == 0 and "ref_mean_error_max=" in run.stdout, run.stdout + run.stderr


def test_nuts_short_of_the_bar_is_one_line_and_stores_nothing(files):
    done = cli(files, "references", "make", "--chains", "2", "--draws", "200", "--warmup", "200", *MODEL)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("mcsa-bench:")]
    assert line.startswith("mcsa-bench: no reference stored for numpyro") and "bulk ESS" in line and "--draws" in line
    assert not (files / "references").exists()


def test_help_says_the_options_and_the_bar(tmp_path):
    done = cli(tmp_path, "references", "make", "--help")
    assert done.returncode == 0 and "--target-accept" in done.stdout and "bulk ESS >= 10,000" in done.stdout


@pytest.mark.parametrize("arguments, message", [
    (["--draws"], "references make: argument --draws: expected one argument"),
    (["--fast", *MODEL], "unknown option --fast"),
    (["--chains", "1", *MODEL], "--chains >= 2"),
    (["--pilot", "-1", *MODEL], "--pilot >= 0"),
    (["n_iters=3"], "references make needs the model"),
])
def test_bad_options_are_one_line(tmp_path, arguments, message):
    done = cli(tmp_path, "references", "make", *arguments)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_pilot_too_short_for_the_models_covariance_is_one_line(files):
    done = cli(files, "references", "make", "--chains", "2", "--pilot", "4", *MODEL)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert ("--pilot 4 gives 8 draws over 2 chains, too few for the covariance of numpyro's 10 latents: use "
            "--pilot 11 or more") in done.stderr
    assert not (files / "references").exists()
