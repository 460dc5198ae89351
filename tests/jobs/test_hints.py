"""What `mcsa-bench run` says before it runs, beside what it runs: a paper setting that holds out test data
logs no posterior-accuracy metrics, and the line names the experiment that does (one job each, size=tiny)."""

from __future__ import annotations

import pytest

from tests.support import cli_in_process

NOTE = ("holds out test data: no reference posterior fits, so no posterior-accuracy metrics (ref_*, "
        "excess_inclusive_kl) will be logged; experiment=logistic_pima_all_rows logs them")


@pytest.mark.parametrize("experiment,said", [("logistic_pima", True), ("logistic_pima_all_rows", False)])
def test_a_split_experiment_says_in_one_line_that_it_logs_no_posterior_accuracy(experiment, said, tmp_path,
                                                                                monkeypatch):
    result = cli_in_process("run", f"experiment={experiment}", "size=tiny", "n_iters=2", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 0, result
    notes = [line for line in result.stdout.splitlines() if "posterior-accuracy" in line]
    assert notes == ([f"Note: experiment=logistic_pima {NOTE} (docs/references.md)"] if said else []), notes
