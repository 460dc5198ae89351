"""`mcsa-bench sync` (mcsa_bench.tracking.sync): a job directory uploaded into another store, once."""

from __future__ import annotations

import json

import pytest

from mcsa_bench.tracking.record import ORIGIN_TAG, SYNCED_FROM_TAG
from tests.support import cli_in_process


def test_sync_into_another_store_twice_makes_one_copy_with_the_run_level_metrics(tmp_path, store_in, monkeypatch):
    """Issue 39: a second `sync DIR tracking.uri=<another store>` made a second full copy, and the
    copies lacked the run-level `diverged` metric, which the local record did not hold."""
    from mlflow.tracking import MlflowClient

    store_in(tmp_path)
    assert cli_in_process("run", "model.dim=2", "n_iters=100", "eval_every=50", cwd=tmp_path,
                          monkeypatch=monkeypatch).returncode == 0
    directory = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl")).parent
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["iteration"] == 100 and rows[-1]["diverged"] == 0.0  # the run-level metrics, at the end
    other = f"sqlite:///{store_in(tmp_path, 'other/mlflow.db') / 'other' / 'mlflow.db'}"
    first = cli_in_process("sync", str(directory), f"tracking.uri={other}", cwd=tmp_path, monkeypatch=monkeypatch)
    second = cli_in_process("sync", str(directory), f"tracking.uri={other}", cwd=tmp_path, monkeypatch=monkeypatch)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "0 metric values added" in second.stdout
    client = MlflowClient(other)
    copy, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    assert copy.info.status == "FINISHED" and copy.data.metrics["diverged"] == 0.0
    original, = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}").search_runs(["1"])
    assert copy.data.tags[ORIGIN_TAG] == original.info.run_id  # the tag merge keys on too
    assert len(client.get_metric_history(copy.info.run_id, "kl_inclusive")) == 3


def test_a_copy_tagged_as_older_syncs_did_is_found_by_sync_and_by_merge(tmp_path, store_in, monkeypatch):
    """One identity for a copied run: a copy that an older `sync` tagged `mcsa_bench.synced_from` is the
    same copy to a later sync, and to a merge of its store's bundle back into the original's store."""
    from mlflow.tracking import MlflowClient

    def cli(*args):
        result = cli_in_process(*args, cwd=tmp_path, monkeypatch=monkeypatch)
        assert result.returncode == 0, result.stderr
        return result.stdout

    store_in(tmp_path)
    cli("run", "model.dim=2", "n_iters=100", "eval_every=50")
    directory = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl")).parent
    other = f"sqlite:///{store_in(tmp_path, 'other/mlflow.db') / 'other' / 'mlflow.db'}"
    cli("sync", str(directory), f"tracking.uri={other}")
    client = MlflowClient(other)
    experiment = client.get_experiment_by_name("mcsa-bench").experiment_id
    copy, = client.search_runs([experiment])
    client.delete_tag(copy.info.run_id, ORIGIN_TAG)  # as an older sync left it
    client.set_tag(copy.info.run_id, SYNCED_FROM_TAG, copy.data.tags[ORIGIN_TAG])

    assert "0 metric values added" in cli("sync", str(directory), f"tracking.uri={other}")
    assert [r.info.run_id for r in client.search_runs([experiment])] == [copy.info.run_id]
    cli("export", "--out", "other.zip", f"tracking.uri={other}")
    assert "0 runs copied, 1 already" in cli("merge", "other.zip")


def test_a_run_whose_artifact_upload_the_store_refuses_ends_failed_there_and_sync_completes_it(
        tmp_path, store_in, monkeypatch):
    """Issue 52: with an admin password the server's artifact route would not take, a run's artifact upload got
    401, the job exited 1 and its run stayed RUNNING in the store while its local record said FINISHED. A write
    the store refuses now ends the run FAILED there, saying which; `sync` of its directory then completes it
    FINISHED, the refusal's error tag gone."""
    import requests
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.record import ERROR_TAG

    store_in(tmp_path)

    def refused(self, run_id, local_dir, artifact_path=None):  # what MLflow's HTTP artifact store raises
        raise requests.HTTPError("401 Client Error: UNAUTHORIZED for url: "
                                 "http://127.0.0.1:5000/api/2.0/mlflow-artifacts/artifacts/1/run/artifacts/x")

    with monkeypatch.context() as patch, pytest.raises(SystemExit) as ended:  # a single run's exit 1, one line
        patch.setattr(MlflowClient, "log_artifacts", refused)
        cli_in_process("run", "model.dim=2", "n_iters=100", "eval_every=50", cwd=tmp_path, monkeypatch=monkeypatch)
    assert "lost the tracking store" in str(ended.value) and "mcsa-bench sync" in str(ended.value)
    directory = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl")).parent
    assert json.loads((directory / "run.json").read_text())["status"] == "FINISHED"
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    run, = client.search_runs(["1"])
    assert run.info.status == "FAILED" and "refused the run's log_artifacts" in run.data.tags[ERROR_TAG]
    assert "401" in run.data.tags[ERROR_TAG]
    synced = cli_in_process("sync", str(directory), cwd=tmp_path, monkeypatch=monkeypatch)
    assert synced.returncode == 0 and "status FINISHED" in synced.stdout, synced.stderr
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and ERROR_TAG not in run.data.tags
    assert "variational.npz" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_concurrent_syncs_of_one_job_make_one_copy_and_each_says_what_it_added(tmp_path, store_in, monkeypatch):
    """Issue 52: three concurrent syncs of one job each printed that they added all of its values (the store
    ended right). Here three at once, each made to wait until all three have looked for the run in the store
    (as concurrent processes may): one at a time, the first adds the values and the others, and say, none;
    one copy."""
    import threading

    from mlflow.tracking import MlflowClient

    import mcsa_bench.tracking.sync as sync

    store_in(tmp_path)
    assert cli_in_process("run", "model.dim=2", "n_iters=200", "eval_every=10", cwd=tmp_path,
                          monkeypatch=monkeypatch).returncode == 0
    directory = next((tmp_path / "outputs" / "runs").rglob("metrics.jsonl")).parent
    values = sum(len(json.loads(line)) - 1 for line in (directory / "metrics.jsonl").read_text().splitlines())
    other = f"sqlite:///{store_in(tmp_path, 'other/mlflow.db') / 'other' / 'mlflow.db'}"
    looked, find = threading.Barrier(3, timeout=3), sync._run_in_store

    def found_then_wait(*args):
        run = find(*args)
        try:
            looked.wait()  # all three meet here unless they go one at a time
        except threading.BrokenBarrierError:
            pass
        return run

    monkeypatch.setattr(sync, "_run_in_store", found_then_wait)
    said = []
    threads = [threading.Thread(target=lambda: said.append(sync.sync_directory(directory, other))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    added = sorted(int(line.split(" metric values added")[0].rsplit(" ", 1)[1]) for line in said)
    assert added == [0, 0, values], said
    client = MlflowClient(other)
    copy, = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    assert len(client.get_metric_history(copy.info.run_id, "kl_inclusive")) == 21
