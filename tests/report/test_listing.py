"""Seeing the runs (issue 53 §2): `mcsa-bench runs` lists a store's job runs with filters, `mcsa-bench ui` opens on
the experiment's runs in MLflow's Model-training view with the key columns, a bundle's report says what its run
that is not a job is, and export states a small bundle's size in KB."""

from __future__ import annotations

import json

import pytest

from mcsa_bench.cli import file_size
from mcsa_bench.report.listing import VIEW_KEY, runs_view
from mcsa_bench.tracking.record import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, RUNS_VIEW_TAG
from tests.support import cli_in_process


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A sweep of 4 short jobs (2 schemes x 2 seeds) into a fresh store: (its directory, the store's URI)."""
    workdir = tmp_path_factory.mktemp("listing")
    with pytest.MonkeyPatch.context() as monkeypatch:
        done = cli_in_process("run", "-m", "model.dim=2", "n_iters=20", "eval_every=10", "estimator=pmcsa,jsa",
                              "seed=0,1", cwd=workdir, monkeypatch=monkeypatch)
    assert done.returncode == 0, done.stderr
    return workdir, f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}"


def runs(workdir, monkeypatch, *args):
    return cli_in_process("runs", *args, cwd=workdir, monkeypatch=monkeypatch)


def test_runs_lists_the_job_runs_newest_first_with_their_settings_tags_and_metrics(swept, monkeypatch):
    workdir, _ = swept
    listed = runs(workdir, monkeypatch)
    assert listed.returncode == 0, listed.stderr
    header, *rows, total = listed.stdout.splitlines()
    assert header.split()[:11] == ["RUN", "STARTED", "STATUS", "METHOD", "MODEL", "SEED", "T", "HEALTH", "ACCURACY",
                                   "kl_inclusive", "kl_exclusive"]
    assert len(rows) == 4 and all("FINISHED" in row and "too_short" in row for row in rows)
    assert [row.split()[-1] for row in rows] == ["#3", "#2", "#1", "#0"]  # newest first
    assert total.startswith("4 of the 4 job runs of experiment 'mcsa-bench', in sqlite:///")


def test_runs_filters_by_setting_status_and_health_and_says_how_many_matched(swept, monkeypatch):
    workdir, _ = swept
    jsa = runs(workdir, monkeypatch, "--where", "method=jsa", "--status", "finished")
    assert [line.split()[4] for line in jsa.stdout.splitlines()[1:-1]] == ["jsa", "jsa"]  # the start is two words
    none = runs(workdir, monkeypatch, "--health", "suspect,diverged")
    assert none.stdout.splitlines() == [none.stdout.splitlines()[-1]] and none.stdout.startswith("0 of the 4 job runs")
    newest = runs(workdir, monkeypatch, "--sweep", "latest", "--limit", "1")
    assert len(newest.stdout.splitlines()) == 3 and "the newest 1 listed (--limit 0: all)" in newest.stdout
    records = json.loads(runs(workdir, monkeypatch, "--json", "--where", "seed=1").stdout)
    assert {(r["method"], r["seed"], r["health"]) for r in records} == {("pmcsa", "1", "too_short"),
                                                                         ("jsa", "1", "too_short")}
    assert all("kl_inclusive" in r["metrics"] for r in records)
    typo = runs(workdir, monkeypatch, "--where", "metod=jsa")
    assert typo.returncode == 2 and "no run has a setting, param or tag 'metod' (did you mean 'method'?)" in typo.stderr


def test_the_ui_opens_on_the_runs_in_the_model_training_view_with_the_key_columns(swept):
    """MLflow 3's UI opens an experiment as its kind tag says (GenAI's overview without one); the runs table reads
    its columns from the shared view state the address names. The experiment a run creates has its kind already."""
    from mlflow.tracking import MlflowClient

    _, uri = swept
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mcsa-bench")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    client.delete_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG)  # as in a store made before it
    page = runs_view(uri, "mcsa-bench")
    assert page == (f"/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey={VIEW_KEY}"
                    "&workflowType=machine_learning")
    tags = client.get_experiment(experiment.experiment_id).tags
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    view = json.loads(tags[RUNS_VIEW_TAG])
    assert view["selectedColumns"][:8] == ["tags.`method`", "tags.`model`", "tags.`dataset`", "tags.`N`", "tags.`lr`",
                                           "tags.`seed`", "tags.`mcsa_bench.health`", "tags.`mcsa_bench.accuracy`"]
    assert {"metrics.`kl_inclusive`", "metrics.`wall_time`"} <= set(view["selectedColumns"])
    assert view["columnOrder"][0] == "attributes.`Run Name`" and view["orderByKey"] == "attributes.start_time"
    assert runs_view(uri, "no such experiment") is None


def test_a_bundles_report_says_what_its_run_that_is_not_a_job_is_and_export_says_kb(swept, tmp_path, monkeypatch):
    workdir, _ = swept
    bundle = tmp_path / "sweep.zip"
    exported = cli_in_process("export", "--sweep", "latest", "--out", str(bundle), cwd=workdir, monkeypatch=monkeypatch)
    assert exported.returncode == 0, exported.stderr
    assert ": 5 runs," in exported.stdout and exported.stdout.rstrip().endswith(" KB)")
    report = cli_in_process("report", "--bundle", str(bundle), "--no-figures", "--out", str(tmp_path / "report"),
                            cwd=workdir, monkeypatch=monkeypatch)
    assert report.returncode == 0, report.stderr
    assert "4 job runs (and 1 sweep parent run, which computes nothing: left out)" in report.stdout


def test_file_sizes_below_a_megabyte_are_in_kilobytes():
    assert (file_size(42_123), file_size(999_499), file_size(1_300_000)) == ("42 KB", "999 KB", "1.3 MB")
