"""The report's store reading (mcsa_bench.report.runs)."""

from mcsa_bench.report.runs import open_client


def test_a_relative_store_is_the_one_in_the_current_directory(tmp_path, store_in, monkeypatch):
    """MLflow keeps one store per URI string: a process that reports in two directories (the tests'
    in-process commands) must read each directory's own outputs/mlflow.db, not the first one opened."""
    relative = "sqlite:///outputs/mlflow.db"
    first, second = store_in(tmp_path / "first"), store_in(tmp_path / "second")
    monkeypatch.chdir(first)
    open_client(relative).create_experiment("only-in-the-first")
    monkeypatch.chdir(second)
    assert open_client(relative).get_experiment_by_name("only-in-the-first") is None
