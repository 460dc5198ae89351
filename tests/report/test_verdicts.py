"""The report's accuracy pieces (mcsa_bench.report.verdicts and the tables' noise floors): verdict counts
per cell from the runs' tags, the cost to reach 0.1 sd from their histories, and bold sets that never
separate methods by less than the reference's noise floor. Runs without the new tags and metrics show "—"."""

from __future__ import annotations

import numpy as np

from mcsa_bench.report.runs import RunRecord
from mcsa_bench.report.tables import Metric, build_tables, to_markdown
from mcsa_bench.report.verdicts import accuracy_tables, cost_to_reach, verdict_counts

ERROR = Metric("ref_mean_error_max", False)


def record(method: str, seed: int, error: float, *, floor: float | None = None, accuracy: str | None = None,
           health: str = "ok") -> RunRecord:
    metrics = {"ref_mean_error_max": error, **({} if floor is None else {"ref_mean_error_max_floor": floor})}
    tags = {"mcsa_bench.health": health, **({} if accuracy is None else {"mcsa_bench.accuracy": accuracy})}
    return RunRecord(f"{method}-{seed}", method, "FINISHED", seed, tags, {}, metrics,
                     {"method": method, "dataset": "pima", "seed": str(seed)})


def table_of(runs):
    (table,), _ = build_tables(runs, ERROR, ("dataset",), "method")
    return table


def test_verdict_counts_per_cell_and_runs_without_a_verdict_show_a_dash():
    runs = [record("pmcsa", 0, 0.05, accuracy="accurate"), record("pmcsa", 1, 0.5, accuracy="rough"),
            record("pmcsa", 2, 5.0, accuracy="off", health="suspect"), record("snis", 0, 20.0)]
    table = table_of(runs)
    counts = verdict_counts(table)
    assert counts[("pima",), "pmcsa"] == {"accurate": 1, "rough": 1, "off": 1, "suspect": 1}
    assert (("pima",), "snis") not in counts  # recorded before verdicts existed
    (verdicts,) = accuracy_tables({"ref_mean_error_max": [table]}, None)
    assert verdicts.cells[("pima",), "pmcsa"] == "accurate 1 · rough 1 · off 1 of 3; flagged 1"
    assert verdicts.cells[("pima",), "snis"] == "—"
    assert "| pima | accurate 1 · rough 1 · off 1 of 3; flagged 1 | — |" in verdicts.markdown()


def test_the_cost_to_reach_is_the_median_over_replications_counting_a_miss_as_infinite():
    steps = np.arange(0.0, 501.0, 100.0)
    # per run: the error over the evaluations, and 10 evaluations per iteration (pMCSA, N = 10)
    errors = {"pmcsa-0": [3, 1, 0.3, 0.09, 0.05, 0.05], "pmcsa-1": [3, 1, 0.09, 0.05, 0.05, 0.05],
              "pmcsa-2": [3, 2, 2, 2, 2, 2], "snis-0": [3, 2, 2, 2, 2, 2], "snis-1": [3, 2, 2, 2, 2, 2]}

    def history(run_id, metric):
        if metric == "log_density_evals":
            return (steps, 10 * steps) if run_id != "old-0" else (np.array([]), np.array([]))
        return steps, np.asarray(errors.get(run_id, [3] * 6), dtype=float)

    runs = [record(r.split("-")[0], int(r.split("-")[1]), errors[r][-1]) for r in errors]
    runs.append(record("old", 0, 3.0))
    reach = cost_to_reach(table_of(runs), history)
    pmcsa = reach[("pima",), "pmcsa"]
    assert (pmcsa.median, pmcsa.reached, pmcsa.runs) == (3000.0, 2, 3)  # at 3000 and 2000 evaluations; one never
    assert reach[("pima",), "snis"].median is None and reach[("pima",), "snis"].reached == 0
    assert (("pima",), "old") not in reach  # no cost logged
    # the noise floor widens the threshold: 0.3 is within 0.1 + 0.25
    widened = cost_to_reach(table_of([record("pmcsa", 0, 0.05, floor=0.25)]), history)
    assert widened[("pima",), "pmcsa"].median == 2000.0  # from 3000


def test_methods_within_the_noise_floor_of_the_best_are_bold_and_the_notes_say_why():
    """Five seeds where pmcsa beats jsa by 0.02 sd every time: Wilcoxon separates them, unless the
    reference's noise floor (0.05 sd) says such a difference is not there to see."""
    runs = [record(m, seed, base + 0.001 * seed) for seed in range(6) for m, base in (("pmcsa", 0.10), ("jsa", 0.12))]
    separated = table_of(runs)
    assert separated.row_rankings[("pima",)].indistinguishable == {"pmcsa"}
    floored = table_of([record(r.settings["method"], int(r.seed), r.metrics["ref_mean_error_max"], floor=0.05)
                        for r in runs])
    assert floored.row_rankings[("pima",)].indistinguishable == {"pmcsa", "jsa"}
    assert any("Noise floor of ref_mean_error_max" in note and "pima 0.05" in note for note in floored.notes)
    assert "| pima | **0.1225** " in to_markdown(floored)
    far = table_of([record(m, s, v, floor=0.05) for s in range(6) for m, v in (("pmcsa", 0.1), ("jsa", 0.5 + s))])
    assert far.row_rankings[("pima",)].indistinguishable == {"pmcsa"}  # a real difference still separates


def test_a_report_of_runs_with_verdicts_and_costs_shows_both_tables_and_draws_accuracy_against_cost(
        tmp_path, migrated_store):
    """Through `mcsa-bench report`: the verdict and cost tables in tables.md, summary.json and the page,
    and the posterior-accuracy curves against log-density evaluations; a run recorded before them: "—"."""
    import json
    import shutil

    from mlflow.tracking import MlflowClient

    from mcsa_bench.cli import main
    from tests.report.test_build import add_run, create_experiment

    shutil.copy(migrated_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = create_experiment(client, tmp_path, "accuracy")
    for seed in range(3):
        for method, error, level in (("pmcsa", 0.05, "accurate"), ("snis", 20.0, "off")):
            add_run(client, experiment, method=method, dataset="pima", seed=seed, final=error,
                    metric="ref_mean_error_max", tags={"mcsa_bench.accuracy": level},
                    extra={"log_density_evals": 1000.0 * (seed + 1), "ref_mean_error_max_floor": 0.02})
        add_run(client, experiment, method="jsa", dataset="pima", seed=seed, final=0.5, metric="ref_mean_error_max")
    out = tmp_path / "out"
    assert main(["report", "--experiment", "accuracy", "--out", str(out), f"tracking.uri={uri}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    verdicts, reach = summary["accuracy"]
    cells = {c["column"]: c["text"] for c in verdicts["cells"]}
    assert cells == {"pmcsa": "accurate 3 of 3", "snis": "off 3 of 3", "jsa": "—"}
    assert {c["column"]: c["text"] for c in reach["cells"]} == {
        "pmcsa": "2e+03 (3 of 3 reached)", "snis": "not reached (0 of 3 reached)", "jsa": "—"}
    markdown = (out / "tables.md").read_text()
    assert "### accuracy verdicts" in markdown and "### log_density_evals to reach ref_mean_error_max ≤ 0.1" in markdown
    assert "Accuracy verdicts and cost" in (out / "report.html").read_text()
    kinds = {figure["kind"] for figure in summary["figures"]}
    assert "ref_mean_error_max vs log_density_evals" in kinds
