"""``mcsa-bench report`` on synthetic runs with known values in a real (temporary SQLite) MLflow store:
means, intervals and bold sets against hand computations and scipy, the listing of failed,
unfinished, superseded and missing runs, the files and figures, and the page in a headless browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from mcsa_bench.cli import main
from mcsa_bench.report.runs import key_settings, split_overrides

METHODS = ("jsa", "msc", "pmcsa")
SEEDS = range(5)
BASE = np.array([-0.50, -0.45, -0.55, -0.40, -0.60])  # per seed: the split's difficulty, shared by the methods
# "alpha": pmcsa > msc > jsa in every seed. "beta": cyclic ranks, no method better. "gamma": two methods only.
CYCLIC_RANKS = {"pmcsa": [1, 3, 2, 1, 3], "msc": [2, 1, 3, 2, 1], "jsa": [3, 2, 1, 3, 2]}
GAMMA_GAP = np.array([0.01, 0.02, 0.03, 0.04, 0.05])


def lpd(dataset: str, method: str, seed: int) -> float:
    if dataset == "alpha":
        return BASE[seed] - 0.1 * {"pmcsa": 0, "msc": 1, "jsa": 2}[method]
    if dataset == "beta":
        return BASE[seed] - 0.01 * CYCLIC_RANKS[method][seed]
    return BASE[seed] - (GAMMA_GAP[seed] if method == "msc" else 0.0)


def add_run(client, experiment_id, *, method, dataset, seed, final, status="FINISHED", tags=None, error=None,
            metric="test_lpd", model="logistic", dim=None, n_samples=10, extra=None, optimizer="adam", lr="0.01",
            more_params=None, n_iters=100):
    """A job run as mcsa-bench logs it: key-setting tags, flattened params, metric histories
    (``metric`` rising to ``final``; ``extra`` metrics logged at the last step)."""
    from mlflow.entities import Metric, Param

    scheme = method.split("+")[0]
    kernel = method.split("+")[1] if "+" in method else ("cis" if scheme == "msc" else "imh")
    settings = {
        "method": method,
        "scheme": scheme,
        "kernel": kernel,
        "family": "meanfield_gaussian",
        "optimizer": optimizer,
        "model": model,
        "dataset": dataset,
        "N": str(n_samples),
        "lr": lr,
        "seed": str(seed),
        "T": str(n_iters),
    }
    params = {"estimator.name": scheme, "kernel.name": kernel, "family.name": "meanfield_gaussian",
              "optimizer.name": optimizer, "optimizer.lr": lr, "model.name": model, "n_samples": str(n_samples),
              "n_iters": str(n_iters), "seed": str(seed), "tracking.uri": "sqlite:///elsewhere.db"}
    if dataset:
        params.update({"model.dataset": dataset, "model.split_seed": str(seed)})
    if dim is not None:
        params["model.dim"] = str(dim)
    params.update(more_params or {})
    run = client.create_run(experiment_id, run_name=f"{method}-{dataset or model}-seed{seed}",
                            tags={"mcsa_bench.role": "job", **settings, **(tags or {})})
    steps = (0, 50, 100) if status == "FINISHED" else (0, 50)
    history = [Metric(metric, final - 0.3 * (1 - s / 100), 0, s) for s in steps]
    history += [Metric("wall_time", 0.01 * s * (1 + seed / 10), 0, s) for s in steps]
    history += [Metric(name, value, 0, steps[-1]) for name, value in (extra or {}).items()]
    client.log_batch(run.info.run_id, metrics=history, params=[Param(k, v) for k, v in params.items()])
    if error:
        client.set_tag(run.info.run_id, "error", error)
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def create_experiment(client, root, name: str) -> str:
    """An experiment whose artifacts (the report's, logged to a sweep's parent run) go under the store's
    temporary root, not to MLflow's default ./mlruns in the checkout."""
    return client.create_experiment(name, artifact_location=(root / "artifacts" / name).as_uri())


@pytest.fixture(scope="module")
def store(tmp_path_factory, migrated_store):
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("report")
    shutil.copy(migrated_store, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = create_experiment(client, root, "synthetic")
    ids = {}
    for dataset in ("alpha", "beta", "gamma"):
        for method in METHODS:
            if dataset == "gamma" and method == "jsa":
                continue  # a method never run on a data set: a missing cell
            for seed in SEEDS:
                if (dataset, method, seed) == ("alpha", "jsa", 4):
                    ids["failed"] = add_run(
                        client,
                        experiment,
                        method=method,
                        dataset=dataset,
                        seed=seed,
                        final=-9.0,
                        status="FAILED",
                        error="DivergenceError: non-finite gradient at iteration 7",
                    )
                    continue
                if (dataset, method, seed) == ("beta", "msc", 0):  # an older run of the same cell and seed
                    ids["superseded"] = add_run(
                        client, experiment, method=method, dataset=dataset, seed=seed, final=5.0
                    )
                ids[dataset, method, seed] = add_run(client, experiment, method=method, dataset=dataset, seed=seed,
                                                     final=lpd(dataset, method, seed))
    ids["running"] = add_run(client, experiment, method="pmcsa", dataset="beta", seed=7, final=-0.4, status="RUNNING")
    ids["killed"] = add_run(client, experiment, method="msc", dataset="gamma", seed=8, final=-0.4, status="KILLED")
    ids["no_lpd"] = add_run(client, experiment, method="msc", dataset="gamma", seed=9, final=1.0, metric="grad_norm")
    return root, uri, client, ids


@pytest.fixture(scope="module")
def report(store):
    root, uri, _, _ = store
    out = root / "out"
    assert main(["report", "--experiment", "synthetic", "--out", str(out), f"tracking.uri={uri}"]) == 0
    return out, json.loads((out / "summary.json").read_text())


def cells_of(summary, metric="test_lpd"):
    (table,) = [t for t in summary["tables"] if t["metric"] == metric]
    return table, {(c["row"][0], c["column"]): c for c in table["cells"]}


def test_means_and_intervals_are_the_replications_mean_and_scipys_bootstrap(report):
    _, summary = report
    table, cells = cells_of(summary)
    assert table["rows"] == [["alpha"], ["beta"], ["gamma"]] and table["columns"] == [
        "pmcsa",
        "jsa",
        "msc",
    ]  # the papers' order
    for (dataset, method), cell in cells.items():
        seeds = [s for s in SEEDS if (dataset, method, s) != ("alpha", "jsa", 4)]
        values = [lpd(dataset, method, s) for s in seeds]
        assert cell["n"] == len(seeds) and cell["mean"] == pytest.approx(np.mean(values), abs=1e-12)
        direct = stats.bootstrap((np.array(values),), np.mean, confidence_level=0.95, method="BCa",
                                 n_resamples=9999, rng=np.random.default_rng(0)).confidence_interval
        assert (cell["low"], cell["high"]) == pytest.approx((direct.low, direct.high), abs=1e-12)
    # the superseded run (final 5.0) did not enter beta x msc; the failed run did not enter alpha x jsa
    assert cells["beta", "msc"]["values"]["0"] == pytest.approx(lpd("beta", "msc", 0))
    assert sorted(cells["alpha", "jsa"]["values"]) == ["0", "1", "2", "3"]


def test_bold_sets_follow_friedman_nemenyi_by_hand(report):
    _, summary = report
    table, cells = cells_of(summary)
    rankings = {r["row"][0]: r for r in table["row_rankings"]}
    # alpha: 4 complete seeds (jsa failed at seed 4), ranks 1, 2, 3: χ² = 12·4/12·14 − 48 = 8, p = e^{-4},
    # CD = q(3) √(12/24) = 1.657: msc (1 from the best) is bold, jsa (2) is not
    alpha = rankings["alpha"]
    assert (alpha["test"], alpha["n_blocks"]) == ("friedman", 4)
    assert (alpha["statistic"], alpha["pvalue"]) == pytest.approx((8.0, np.exp(-4.0)))
    assert alpha["critical_difference"] == pytest.approx(2.3437 * np.sqrt(0.5), abs=1e-3)
    assert alpha["indistinguishable"] == ["msc", "pmcsa"]
    # beta: cyclic ranks, χ² = 0.4, p = e^{-0.2}: every method bold
    assert rankings["beta"]["statistic"] == pytest.approx(0.4) and rankings["beta"]["indistinguishable"] == list(
        METHODS
    )
    # gamma: two methods, Wilcoxon over 5 seeds all won by pmcsa: p = 2/32 > 0.05, both bold
    gamma = rankings["gamma"]
    assert (
        gamma["test"] == "wilcoxon"
        and gamma["pvalue"] == pytest.approx(1 / 16)
        and gamma["indistinguishable"] == ["msc", "pmcsa"]
    )
    assert {k for k, c in cells.items() if c["bold"]} == {
        ("alpha", "msc"),
        ("alpha", "pmcsa"),
        ("beta", "jsa"),
        ("beta", "msc"),
        ("beta", "pmcsa"),
        ("gamma", "msc"),
        ("gamma", "pmcsa"),
    }
    # average ranks over the rows that have every method (gamma lacks jsa)
    assert table["overall"]["n_blocks"] == 2 and "gamma" in table["notes"][-1]


def test_failed_unfinished_superseded_and_missing_runs_are_listed(store, report):
    _, _, _, ids = store
    out, summary = report
    assert {r["run_id"]: r["status"] for r in summary["not_finished"]} == {
        ids["failed"]: "FAILED", ids["running"]: "RUNNING", ids["killed"]: "KILLED"}
    assert [r["run_id"] for r in summary["superseded"]] == [ids["superseded"]]
    assert [(r["run_id"], r["lacks"]) for r in summary["without_metrics"]] == [(ids["no_lpd"], ["test_lpd"])]
    table, _ = cells_of(summary)
    assert set(table["missing"]) == {"alpha × jsa: no finished run for seed 4", "gamma × jsa: no finished run"}
    page = (out / "report.html").read_text()
    for text in ("DivergenceError: non-finite gradient at iteration 7", ids["running"], ids["killed"],
                 ids["superseded"], ids["no_lpd"], "gamma × jsa: no finished run"):
        assert text in page
    markdown = (out / "tables.md").read_text()
    assert (
        "| alpha | −" not in markdown and "| gamma | " in markdown and " | — | " in markdown
    )  # the missing cell is shown as such
    alpha_row = next(line for line in markdown.splitlines() if line.startswith("| alpha |"))
    assert (
        alpha_row.startswith("| alpha | **-0.50** [") and "| -0.68 [" in alpha_row and " n=4 | **-0.60** [" in alpha_row
    )
    assert markdown.count("| data set | pMCSA | JSA | MSC |") == 1  # the papers' names and order
    latex = (out / "tables.tex").read_text()
    assert r"\begin{tabular}{lccc}" in latex and r"$\mathbf{" in latex and r"\toprule" in latex


def test_files_and_figures_are_produced(report):
    out, summary = report
    for name in ("report.html", "tables.md", "tables.tex", "tables.html", "runs.csv"):
        assert (out / name).stat().st_size > 500, name
    kinds = {f["kind"] for f in summary["figures"]}
    assert {"test_lpd vs iteration", "test_lpd vs wall-clock time", "critical-difference diagram"} <= kinds
    for figure in summary["figures"]:
        png, svg = out / figure["png"], out / figure["svg"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert "<svg" in svg.read_text()[:2000]
    skipped = {s["kind"]: s["reason"] for s in summary["skipped_figures"]}
    assert skipped["gradient variance vs N"] == "no finished run logged grad_variance"
    assert skipped["final test_lpd vs stepsize per optimizer"] == "lr takes one value (0.01)"
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(summary["figures"]) and "http" not in page.replace(
        "http-equiv", ""
    )


def test_a_sweep_report_finds_missing_jobs_splits_tables_by_n_and_is_logged_on_the_parent(store, tmp_path):
    from mcsa_bench.jobs.config import RunSettings, compose, register_configs
    from mcsa_bench.plugins import get_registry

    register_configs(get_registry())
    root, uri, client, _ = store
    experiment = create_experiment(client, root, "sweeps")
    sweep = "model=gaussian model.dim=2 estimator=msc,pmcsa n_samples=4,16 seed=0,1 resume=true"
    parent = client.create_run(experiment, run_name="sweep x", tags={
        "mcsa_bench.role": "sweep", "mcsa_bench.sweep.id": "x", "hydra.overrides": sweep}).info.run_id
    for method in ("msc", "pmcsa"):
        for n in (4, 16):
            for seed in (0, 1):
                # a job's tag as Hydra writes it (values normalized: resume=True)
                job = f"model=gaussian model.dim=2 estimator={method} n_samples={n} seed={seed} resume=True"
                if (method, n, seed) == ("pmcsa", 16, 1):
                    continue  # a job that never produced a run
                tags = {"mlflow.parentRunId": parent, "hydra.overrides": job}
                if (method, n, seed) == ("msc", 16, 1):  # skipped by resume=true: an earlier run computed it
                    (_, cfg), = compose(job.split(), multirun=False).jobs
                    tags = {"mcsa_bench.config_hash": RunSettings.from_config(cfg).config_hash(get_registry())}
                add_run(client, experiment, method=method, dataset="", model="gaussian", dim=2, seed=seed, n_samples=n,
                        final=0.1 * (seed + 1) * (2 if method == "msc" else 1), metric="kl_inclusive",
                        extra={"grad_variance": (8 if method == "msc" else 1) / n}, tags=tags)
    out = tmp_path / "sweep"
    assert main(["report", "--sweep", parent, "--out", str(out), f"tracking.uri={uri}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    missing = "model=gaussian model.dim=2 estimator=pmcsa n_samples=16 seed=1 resume=True"
    assert summary["missing_jobs"] == [missing] and missing in (out / "report.html").read_text()
    assert [(r["settings"]["method"], r["settings"]["N"], r["settings"]["seed"]) for r in summary["reused"]] == [
        ("msc", "16", "1")]
    # N varies within each (model, method) cell: one table per N, never averaged over
    tables = [t for t in summary["tables"] if t["metric"] == "kl_inclusive"]
    assert [t["panel"] for t in tables] == [{"N": "4"}, {"N": "16"}]
    for table in tables:
        cells = {c["column"]: c for c in table["cells"]}
        assert table["rows"] == [["gaussian"]] and table["higher_is_better"] is False
        assert cells["msc"]["n"] == 2 and cells["msc"]["mean"] == pytest.approx(0.3)  # the reused run counts
        assert cells["pmcsa"]["mean"] == pytest.approx(0.15 if table["panel"]["N"] == "4" else 0.1)
    variance = [f for f in summary["figures"] if f["kind"] == "gradient variance vs N"]
    assert len(variance) == 1 and (out / variance[0]["png"]).stat().st_size > 5000
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert {"report/report.html", "report/summary.json", "report/tables.md", "report/figures"} <= logged


def test_final_metric_vs_stepsize_is_drawn_per_optimizer_with_a_row_per_optimizer_and_stepsize(store, tmp_path):
    """The NeurIPS paper's Fig. 2 layout: `--rows optimizer,lr` gives a row per optimizer and stepsize, and
    the final metric is drawn against lr with a panel per optimizer and a line per method."""
    root, uri, client, _ = store
    experiment = create_experiment(client, root, "stepsizes")
    for optimizer in ("sgd", "adam"):
        for lr in ("0.01", "0.1"):
            for method in ("msc", "pmcsa"):
                for seed in (0, 1):
                    final = float(lr) * (10 if method == "msc" else 1) * (1 + seed)
                    add_run(client, experiment, method=method, dataset="", model="gaussian", seed=seed, final=final,
                            metric="kl_inclusive", optimizer=optimizer, lr=lr)
    out = tmp_path / "stepsizes"
    assert main(["report", "--experiment", "stepsizes", "--rows", "optimizer,lr", "--metric", "kl_inclusive",
                 "--out", str(out), f"tracking.uri={uri}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (table,) = summary["tables"]
    assert table["rows"] == [["adam", "0.01"], ["adam", "0.1"], ["sgd", "0.01"], ["sgd", "0.1"]]
    means = {(*c["row"], c["column"]): c["mean"] for c in table["cells"]}
    assert means["sgd", "0.1", "msc"] == pytest.approx(1.5) and means["adam", "0.01", "pmcsa"] == pytest.approx(0.015)
    (figure,) = [f for f in summary["figures"] if f["kind"] == "final kl_inclusive vs stepsize per optimizer"]
    assert (out / figure["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (
        out / figure["png"]
    ).stat().st_size > 5000
    svg = (out / figure["svg"]).read_text()  # the SVG keeps its texts as text (svg.fonttype none): editable in a paper
    for text in (
        "optimizer=adam",
        "optimizer=sgd",
        "MSC",
        "pMCSA",
        "stepsize γ",
        "final KL(π‖q) (nats)",
        "0.01",
        "0.1",
    ):
        assert f">{text}</text>" in svg, text
    assert ">optimizer=momentum</text>" not in svg  # negative control: only the optimizers run
    assert (out / figure["pdf"]).read_bytes()[:5] == b"%PDF-"


def test_bad_arguments_are_one_line_and_exit_2(store, capsys):
    _, uri, _, _ = store
    for argv, message in [
        (["--metric", "test_lpd:up"], "--metric takes NAME or NAME:max or NAME:min"),
        (["--experiment", "synthetic", "--rows", "colour"], "unknown setting 'colour'"),
        (["--experiment", "nope"], "no experiment 'nope' in the store; experiments: "),
        (["--sweep", "0123"], "no run '0123' in the store"),
        (["--confidence", "95"], "must lie in (0, 1)"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["model=gaussian"], "tracking.uri=URI as its only key=value argument"),
    ]:
        assert main(["report", *argv, f"tracking.uri={uri}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, (argv, err)
    assert main(["report", "tracking.uri=sqlite:////nonexistent/mlflow.db"]) == 2
    assert "no MLflow store at" in capsys.readouterr().err


def test_key_settings_fall_back_to_params_for_older_runs():
    class Defaults:  # the scheme's default kernel, as today's plugins say (mcsa_bench.jobs.reconstruction)
        def default_kernel(self, scheme):
            return {"msc": "cis", "pmcsa": "imh"}.get(scheme)

    defaults = Defaults()
    params = {"estimator.name": "msc", "kernel.name": "hmc", "model.name": "logistic", "model.dataset": "pima",
              "n_samples": "10", "optimizer.lr": "0.01", "optimizer.name": "adam", "seed": "3", "n_iters": "10000"}
    settings = key_settings({}, params, defaults)
    assert settings["method"] == "msc+hmc"  # the parallel-state paper's single-HMC
    assert (settings["dataset"], settings["N"], settings["lr"], settings["seed"], settings["T"]) == (
        "pima",
        "10",
        "0.01",
        "3",
        "10000",
    )
    assert key_settings({}, {**params, "kernel.name": "cis"}, defaults)["method"] == "msc"
    assert key_settings({"method": "tagged", "N": "20"}, params, defaults)["N"] == "20"
    assert key_settings({}, {**params, "kernel.name": "cis"})["method"] == "msc+cis"  # no default known: named whole
    assert split_overrides("model.x=[1, 2] seed=0,1 ~model.y") == ["model.x=[1, 2]", "seed=0,1", "~model.y"]


def chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


def test_the_page_renders_in_a_headless_browser_with_the_table(report, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium)")
    from matplotlib.image import imread

    out, _ = report
    shot = tmp_path / "page.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1600",
                    (out / "report.html").resolve().as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1200) and pixels.std() > 0.05  # not blank
    # the bold numbers of the table are drawn in the page's bold colour (#0b3d91) near the top
    bold = np.all(np.abs(pixels[:800] - np.array([0x0B, 0x3D, 0x91]) / 255) < 0.08, axis=-1)
    assert bold.sum() > 200


def test_an_unknown_metric_is_one_line_naming_the_logged_ones_and_leaves_the_report_as_it_was(store, tmp_path, capsys):
    _, uri, _, _ = store
    out = tmp_path / "kept"
    assert main(["report", "--experiment", "synthetic", "--out", str(out), f"tracking.uri={uri}"]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any(p.suffix == ".png" for p in before)
    capsys.readouterr()
    assert (
        main(["report", "--experiment", "synthetic", "--metric", "test_lp", "--out", str(out), f"tracking.uri={uri}"])
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "unknown metric 'test_lp' (did you mean 'test_lpd'?)" in err and "Traceback" not in err
    )
    assert "the runs logged test_lpd (diagnostics: grad_norm, wall_time)" in err
    # a filter that leaves no finished run: nothing to report, and the report is not replaced by an empty one
    assert (
        main(["report", "--experiment", "synthetic", "--where", "seed=7", "--out", str(out), f"tracking.uri={uri}"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to report" in err and "is left as it was" in err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # never into a directory that holds something else than a report
    other = tmp_path / "papers"
    other.mkdir()
    (other / "draft.tex").write_text("mine")
    assert main(["report", "--experiment", "synthetic", "--out", str(other), f"tracking.uri={uri}"]) == 2
    assert "holds no report" in capsys.readouterr().err and (other / "draft.tex").read_text() == "mine"


def test_a_rewritten_report_replaces_its_files_and_the_sweeps_artifacts_whole(store, tmp_path):
    root, uri, client, _ = store
    experiment = create_experiment(client, root, "rewritten")
    parent = client.create_run(experiment, run_name="sweep y", tags={
        "mcsa_bench.role": "sweep", "hydra.overrides": "experiment=nonexistent_grid size=bench"}).info.run_id
    for method in ("msc", "pmcsa"):
        for seed in (0, 1):
            add_run(client, experiment, method=method, dataset="pima", seed=seed, final=-0.5 - 0.1 * seed,
                    tags={"mlflow.parentRunId": parent})
    out = tmp_path / "rewritten"
    assert main(["report", "--sweep", parent, "--out", str(out), f"tracking.uri={uri}"]) == 0
    assert any((out / "figures").glob("*.png"))
    assert any(a.path == "report/figures" for a in client.list_artifacts(parent, "report"))
    assert main(["report", "--sweep", parent, "--no-figures", "--out", str(out), f"tracking.uri={uri}"]) == 0
    assert not (out / "figures").exists() and json.loads((out / "summary.json").read_text())["figures"] == []
    assert {a.path for a in client.list_artifacts(parent, "report")} == {
        f"report/{name}"
        for name in ("report.html", "runs.csv", "summary.json", "tables.html", "tables.md", "tables.tex")
    }
    assert not list(tmp_path.glob(".rewritten*"))  # no staging directory left behind


def test_diagnostics_get_no_default_table_and_no_missing_metric_listing(store, tmp_path):
    """snis_ess (the SNIS baseline's effective sample size) is a diagnostic like cis_ess: only the methods that
    have it log it, so as a default table it would list every other run as lacking it."""
    root, uri, client, _ = store
    experiment = create_experiment(client, root, "diagnostics")
    for method in ("snis", "pmcsa"):
        for seed in (0, 1, 2):
            add_run(client, experiment, method=method, dataset="pima", seed=seed, final=-0.5 - 0.01 * seed,
                    extra={"snis_ess": 3.0 + seed} if method == "snis" else {"acceptance_rate": 0.5})
    out = tmp_path / "diagnostics"
    assert main(["report", "--experiment", "diagnostics", "--out", str(out), f"tracking.uri={uri}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {t["metric"] for t in summary["tables"]} == {"test_lpd"} and summary["without_metrics"] == []
    assert main(["report", "--experiment", "diagnostics", "--metric", "snis_ess", "--out", str(out),
                 f"tracking.uri={uri}"]) == 0  # asked for: a table
    assert {t["metric"] for t in json.loads((out / "summary.json").read_text())["tables"]} == {"snis_ess"}


def test_a_missing_sweep_names_the_store_it_read(store, tmp_path, capsys):
    _, uri, _, _ = store
    assert main(["report", "--experiment", "synthetic", "--sweep", "latest", f"tracking.uri={uri}"]) == 2
    err = capsys.readouterr().err
    path = uri[len("sqlite:///"):]
    assert (
        err.count("\n") == 1
        and "no sweep in experiment 'synthetic'" in err
        and f"(store read: sqlite:///{path})" in err
    )


def test_a_sweeps_report_is_named_after_its_grid():
    from mcsa_bench.report.command import report_name
    from mcsa_bench.report.runs import RunSet, grid_of, swept_name

    assert grid_of("experiment=logistic size=bench hydra/launcher=joblib seed=0,1") == "logistic-bench"
    assert grid_of("+experiment=bnn") == "bnn"
    assert grid_of("experiment=logistic_pima,logistic_heart method=msc") is None
    assert report_name(RunSet("sweep", [], parent_run_id="9ece8aaa0123", sweep_overrides="experiment=logistic"),
                       "mcsa-bench") == "logistic"
    assert report_name(RunSet("sweep", [], parent_run_id="9ece8aaa0123", sweep_overrides="model=gaussian seed=0,1"),
                       "mcsa-bench") == "gaussian-seed"
    assert swept_name("model=gaussian model.dim=10 estimator=msc,msc_rb,jsa,pmcsa seed=0,1 n_iters=2000") == \
        "gaussian-estimator-seed"
    assert swept_name("hydra/sweeper=optuna optimizer.lr=interval(0.001,0.1) hydra.sweeper.n_trials=4") == "optuna-lr"
    assert swept_name("experiment=logistic_pima,logistic_heart method=msc seed=range(5)") == "experiment-seed"
    assert swept_name("model.x=[1,2] seed=0") is None  # a list is one value: nothing swept
    assert report_name(RunSet("sweep", [], parent_run_id="9ece8aaa0123", sweep_overrides="seed=0"),
                       "mcsa-bench") == "sweep-9ece8aaa"
    assert report_name(RunSet("experiment", []), "my runs") == "my_runs"


def test_tables_split_on_settings_that_change_results_warn_where_methods_differ_and_show_the_papers_values(
    store, tmp_path
):
    """The logistic grid's shape: ELBO at N = 1 beside the others at N = 10 (a warning and the column says so),
    eval_every differing (changes no result: no split), three replications (a warning), and the paper's values
    of experiment logistic_pima beside ours, inside or outside our interval (runs of the paper's T, 10⁴)."""
    _, uri, client, _ = store
    experiment = create_experiment(client, tmp_path, "settings")
    # the paper: pmcsa -0.51, elbo -0.53, msc -0.68
    finals = {"pmcsa": [-0.50, -0.52, -0.51], "elbo": [-0.90, -0.95, -0.93], "msc": [-0.6, -0.7, -0.8]}
    for method, values in finals.items():
        for seed, final in enumerate(values):
            add_run(client, experiment, method=method, dataset="pima", seed=seed, final=final,
                    n_samples=1 if method == "elbo" else 10, more_params={"eval_every": str(50 + 50 * (seed % 2))},
                    tags={"hydra.overrides": f"experiment@_global_=logistic_pima method={method} seed={seed}"},
                    n_iters=10_000)
    out = tmp_path / "settings"
    assert main(["report", "--experiment", "settings", "--out", str(out), f"tracking.uri={uri}"]) == 0
    (table,) = json.loads((out / "summary.json").read_text())["tables"]
    assert table["panel"] == {} and table["columns"] == ["pmcsa", "msc", "elbo"]  # no split on eval_every, nor on N
    papers = {c["column"]: (c["paper"], c["paper_inside_interval"]) for c in table["cells"]}
    assert papers == {"pmcsa": (-0.51, True), "msc": (-0.68, True), "elbo": (-0.53, False)}
    assert table["differing_settings"] == {"N": {"pmcsa": "10", "msc": "10", "elbo": "1"}}
    markdown = (out / "tables.md").read_text()
    assert "| data set | pMCSA | MSC | ELBO (N=1) |" in markdown
    assert (
        "Warning: samples per iteration N differs between the methods of a row: ELBO (N=1): 1; the others: 10."
        in markdown
    )
    assert "Warning: cells with fewer than 5 replications (n = 3)" in markdown
    assert (
        "Settings: model logistic, family meanfield_gaussian, optimizer adam, stepsize γ 0.01, "
        "iterations T 10000, 3 replications (run seeds)."
        in markdown
    )
    assert "(paper -0.51 ✓)" in markdown and "(paper -0.53 ✗)" in markdown
    assert "the parallel-state paper, Table 2" in markdown
    latex = (out / "tables.tex").read_text()
    assert r"(paper $-0.51$ \ding{51})" in latex and r"(paper $-0.53$ \ding{55})" in latex and "✓" not in latex
    assert main(["report", "--experiment", "settings", "--no-papers", "--methods", "elbo=ELBO-1,pmcsa",
                 "--out", str(out), f"tracking.uri={uri}"]) == 0
    markdown = (out / "tables.md").read_text()
    assert "| data set | ELBO-1 (N=1) | pmcsa | msc |" in markdown and "(paper " not in markdown


def test_runs_of_another_size_than_the_papers_show_its_value_unmarked(store, tmp_path):
    """size=tiny (20 iterations on 60 rows), or the paper's setting run shorter: nobody expects its numbers to
    match the paper's, so no ✗ says they do not (issue 53 §2); the paper's value is still shown."""
    _, uri, client, _ = store
    experiment = create_experiment(client, tmp_path, "tiny")
    for seed, final in enumerate([-0.9, -0.95, -0.93]):
        add_run(client, experiment, method="pmcsa", dataset="pima", seed=seed, final=final, n_iters=20,
                more_params={"max_rows": "60"},
                tags={"hydra.overrides": f"experiment=logistic_pima size=tiny seed={seed}"})
    out = tmp_path / "tiny"
    assert main(["report", "--experiment", "tiny", "--no-figures", "--out", str(out), f"tracking.uri={uri}"]) == 0
    (table,) = json.loads((out / "summary.json").read_text())["tables"]
    (cell,) = table["cells"]
    assert (cell["paper"], cell["paper_inside_interval"]) == (-0.51, None)
    markdown = (out / "tables.md").read_text()
    assert "(paper -0.51)" in markdown and "✗" not in markdown.split("paper: the published mean")[0]
    assert "unmarked where the runs are of another size than the paper's" in markdown


def test_the_iteration_axis_is_logarithmic_for_runs_that_recorded_the_geometric_schedule_only(tmp_path):
    """eval_schedule=geometric logs at 0, 10, 20, 40, 80 and T = 100: a log axis past the first point (0
    still drawn) says so in the caption. A short linear run (T = 3 x eval_every: 0, 100, 200, 300, points
    spaced like doubling ones) and a run from before the schedule was recorded keep a linear axis and no note."""
    from mcsa_bench.report.figures import FigureMaker
    from mcsa_bench.report.labels import MethodNames
    from mcsa_bench.report.runs import RunRecord
    from mcsa_bench.report.tables import Metric, build_tables

    def table_of(params):
        runs = [RunRecord(f"{m}-{seed}", m, "FINISHED", seed, {}, params, {"test_lpd": -0.5},
                          {"method": m, "dataset": "pima", "seed": str(seed)})
                for m in ("pmcsa", "msc") for seed in range(3)]
        return build_tables(runs, Metric("test_lpd", True), ("dataset",), "method", names=MethodNames())[0][0]

    scales = {}
    for case, params, steps in (
        ("geometric", {"eval_schedule": "geometric"}, [0.0, 10.0, 20.0, 40.0, 80.0, 100.0]),
        ("short linear", {"eval_schedule": "linear"}, [0.0, 100.0, 200.0, 300.0]),
        ("recorded before the schedule", {}, [0.0, 100.0, 200.0, 300.0]),
    ):
        evaluated = np.asarray(steps)
        maker = FigureMaker(tmp_path / case, lambda run_id, metric: (evaluated, -1.0 + evaluated / 200), {},
                            MethodNames())
        figure, _, notes = maker._curves_figure(table_of(params), "iteration")
        scales[case] = (figure.axes[0].get_xscale(), notes)
    assert scales == {
        "geometric": ("symlog", ["iterations on a log axis past 10 (the runs evaluate at doubling iterations)"]),
        "short linear": ("linear", []),
        "recorded before the schedule": ("linear", []),
    }


def test_a_slow_method_does_not_flatten_the_wall_clock_axis_and_power_laws_get_log_axes(tmp_path):
    """single-HMC takes 10x the others' time: the axis ends near the next slowest and the caption says where
    it runs on; gradient variance against N is drawn on log axes (a power law)."""
    from mcsa_bench.report.figures import FigureMaker, method_colors
    from mcsa_bench.report.labels import MethodNames
    from mcsa_bench.report.runs import RunRecord
    from mcsa_bench.report.tables import Metric, build_tables

    seconds_per_step = {"pmcsa": 0.01, "msc": 0.012, "msc+hmc": 0.12}
    runs = [RunRecord(f"{m}-{seed}-{n}", m, "FINISHED", seed, {}, {}, {"test_lpd": -0.5, "grad_variance": 10.0 / n},
                      {"method": m, "dataset": "pima", "seed": str(seed), "N": str(n)})
            for m in seconds_per_step for seed in range(3) for n in (8, 32)]

    def history(run_id, metric):
        method = run_id.split("-")[0]
        steps = np.arange(0.0, 101.0, 10.0)
        if metric == "wall_time":
            return steps, steps * seconds_per_step[method]
        return steps, -1.0 + steps / 200
    names = MethodNames()
    tables, _ = build_tables(runs, Metric("test_lpd", True), ("dataset",), "method", names=names)
    maker = FigureMaker(tmp_path, history, method_colors(seconds_per_step, names), names)
    maker.curves(tables[0], "wall_time")
    (figure,) = maker.figures
    assert "runs on beyond the axis: single-HMC to 12 s" in figure.caption
    svg = figure.svg.read_text()
    assert ">single-HMC</text>" in svg and ">1.0</text>" in svg and ">12</text>" not in svg  # the axis ends near 1.3 s
    variance, _ = build_tables(runs, Metric("grad_variance", False), ("dataset", "N"), "method", names=names)
    maker.final_vs_setting(variance, "N", "gradient variance vs N")
    assert ">samples per iteration N</text>" in maker.figures[-1].svg.read_text()
    from matplotlib.figure import Figure

    from mcsa_bench.report.figures import _log_scale

    scales = {}
    for metric, values in [("grad_variance", [0.5, 2.0]), ("test_lpd", [-2.0, -0.5]), ("test_rmse", [0.01, 3.0]),
                           ("test_rmse", [0.5, 2.0]), ("kl_inclusive", [-0.1, 2.0])]:
        axis = Figure().add_subplot()
        _log_scale(axis, values, metric)
        scales[metric, values[0]] = axis.get_yscale()
    # a power law on log axes; values spanning two decades too; never for values that are not all positive
    assert scales == {("grad_variance", 0.5): "log", ("test_lpd", -2.0): "linear", ("test_rmse", 0.01): "log",
                      ("test_rmse", 0.5): "linear", ("kl_inclusive", -0.1): "linear"}


def test_the_report_states_its_provenance(report):
    from importlib import metadata

    import mcsa_bench

    out, summary = report
    provenance = summary["provenance"]
    assert provenance["mcsa-bench"] == mcsa_bench.__version__
    assert {name: provenance["libraries"][name] for name in ("numpy", "scipy", "mlflow", "hydra-core")} == {
        name: metadata.version(name) for name in ("numpy", "scipy", "mlflow", "hydra-core")}
    assert f"mcsa-bench {mcsa_bench.__version__}" in provenance["plugins"]
    assert any(p.startswith("mcsa-bench-extras ") for p in provenance["plugins"])  # the extras plugin, installed in dev
    assert provenance["command"].startswith("mcsa-bench report --experiment synthetic")
    assert str(__import__("os").cpu_count()) in provenance["machine"] and provenance["commit"]
    page = (out / "report.html").read_text()
    assert '<h2 id="provenance">Provenance</h2>' in page and f"numpy: {metadata.version('numpy')}" in page
    assert "## Provenance" in (out / "tables.md").read_text()


def test_the_interactive_page_chooses_metric_and_scale_offline_in_a_headless_browser(store, tmp_path):
    """--interactive: the curves in both y scales and a few lines of inline script; the address
    report.html#metric=...&scale=... chooses, as the page's selects do. Without it the page has no script."""
    _, uri, client, _ = store
    experiment = create_experiment(client, tmp_path, "interactive")
    for method in ("msc", "pmcsa"):
        for seed in (0, 1, 2):
            add_run(client, experiment, method=method, dataset="", model="gaussian", seed=seed, metric="kl_inclusive",
                    final=1.0 + seed, extra={"kl_exclusive": 0.2})
    out = tmp_path / "interactive"
    assert (
        main(["report", "--experiment", "interactive", "--interactive", "--out", str(out), f"tracking.uri={uri}"]) == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    curves = [f for f in summary["figures"] if "vs iteration" in f["kind"]]
    assert len(curves) == 2 and all((out / f["alternate_png"]).stat().st_size > 5000 for f in curves)
    page = (out / "report.html").read_text()
    assert page.count("<script>") == 1 and "http" not in page.replace("http-equiv", "")
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium)")
    address = (out / "report.html").resolve().as_uri() + "#metric=kl_inclusive&scale=log"
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", address],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    sections = dict(re.findall(r'<section class="metric" data-metric="(\w+)"( hidden="")?', dom))
    assert sections == {"kl_inclusive": "", "kl_exclusive": ' hidden=""'}
    images = re.findall(r'<img alt="iteration__kl_inclusive[.\w]*" data-scale="(\w+)"([^>]*)>', dom)
    shown = sorted((scale, "hidden" in rest) for scale, rest in images)
    assert shown == [("linear", True), ("log", False)]  # drawn linear (within a decade); log chosen


def test_a_producers_declared_metric_is_tabled_as_declared_and_an_undeclared_one_never(store, tmp_path):
    """A plugin's metrics the catalogue does not know: a stored declaration (tag mcsa_bench.metric.<name>)
    gives the kind, direction and label; a metric nobody described is a diagnostic, whatever its name says."""
    from mcsa_bench.tracking.record import DIAGNOSTIC, LOWER, RESULT, MetricSpec, metric_spec_tags

    _, uri, client, _ = store
    experiment = create_experiment(client, tmp_path, "declared")
    declared = metric_spec_tags({"energy_distance": MetricSpec(RESULT, LOWER, "energy distance to π", "nats"),
                                 "leapfrog_steps": MetricSpec(DIAGNOSTIC, None, "leapfrog steps")})
    for method in ("msc", "pmcsa"):
        for seed in (0, 1, 2):
            add_run(client, experiment, method=method, dataset="pima", seed=seed, final=-0.5 - 0.01 * seed,
                    extra={"energy_distance": (1.0 if method == "msc" else 2.0) + seed, "leapfrog_steps": 8,
                           "test_error_rate": 0.3},  # undeclared: not a result, though its name reads like one
                    tags=declared)
    out = tmp_path / "declared"
    assert main(["report", "--experiment", "declared", "--no-figures", "--out", str(out), f"tracking.uri={uri}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [t["metric"] for t in summary["tables"]] == ["test_lpd", "energy_distance"]
    table, cells = cells_of(summary, "energy_distance")
    assert table["higher_is_better"] is False and cells["pima", "msc"]["mean"] == pytest.approx(2.0)
    assert r"\caption{energy distance to $\pi$ (nats), lower is better" in (out / "tables.tex").read_text()
    # a diagnostic without a direction is tabled when asked for with one, and refused without
    assert (
        main(
            [
                "report",
                "--experiment",
                "declared",
                "--metric",
                "leapfrog_steps:min",
                "--no-figures",
                "--out",
                str(out),
                f"tracking.uri={uri}",
            ]
        )
        == 0
    )
    assert main(["report", "--experiment", "declared", "--metric", "test_error_rate", "--out", str(out),
                 f"tracking.uri={uri}"]) == 2


#: a process that reports with no Hydra, no plugin registry, no jobs and no plugin package to import
WITHOUT_CONFIGS_OR_PLUGINS = """
import sys
BLOCKED = ("hydra", "omegaconf", "mcsa_bench_extras", "mcsa_bench.jobs.config", "mcsa_bench.jobs.composition",
           "mcsa_bench.assembly", "mcsa_bench.builtin")

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, Block())
from mcsa_bench.cli import main
sys.exit(main(sys.argv[1:]))
"""


OLD_STORE = Path(__file__).parents[1] / "data" / "store_before_record"


def tables_and_listings(summary: dict) -> dict:
    """What two reports of one store must share: the function the old store's own reports were cut with."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("store_before_record", OLD_STORE / "make.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    return maker.table_summary(summary)


@pytest.mark.slow  # two sweeps and a report in a process of its own: about 20 s
def test_a_store_reports_the_same_tables_without_todays_configs_or_its_plugins(tmp_path, store_in, monkeypatch):
    """A sweep with a plugin's kernel (rwmh, of mcsa-bench-extras) on a paper setting, resumed with a third
    seed, one run deleted: reported in a process where Hydra, the configs, the registry and the plugin cannot
    be imported, its tables, paper values, missing job and reused runs are those of the report made here."""
    from mlflow.tracking import MlflowClient

    from tests.support import cli_in_process

    store_in(tmp_path)
    sweep = ["run", "-m", "experiment=logistic_pima", "size=tiny", "estimator=pmcsa", "kernel=imh,rwmh"]
    assert cli_in_process(*sweep, "seed=0,1", cwd=tmp_path, monkeypatch=monkeypatch).returncode == 0
    assert cli_in_process(*sweep, "seed=0,1,2", "resume=true", cwd=tmp_path, monkeypatch=monkeypatch).returncode == 0
    client = MlflowClient(f"sqlite:///{tmp_path}/outputs/mlflow.db")
    (latest,) = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id],
                                   "tags.`mcsa_bench.role` = 'sweep'", order_by=["attributes.start_time DESC"],
                                   max_results=1)
    children = client.search_runs([latest.info.experiment_id], f"tags.`mlflow.parentRunId` = '{latest.info.run_id}'")
    client.delete_run(next(r for r in children if r.data.tags["method"] == "pmcsa+rwmh").info.run_id)
    # the plugin kernel's declaration is stored with its runs (the catalogue's metrics need none)
    declarations = {k: v for r in children for k, v in r.data.tags.items() if k.startswith("mcsa_bench.metric.")}
    assert declarations == {"mcsa_bench.metric.jump_distance": "diagnostic;higher;;mean jump distance of the chains"}

    report = ["report", "--sweep", "latest", "--no-figures", "--out"]
    assert cli_in_process(*report, "here", cwd=tmp_path, monkeypatch=monkeypatch).returncode == 0
    bare = subprocess.run([__import__("sys").executable, "-c", WITHOUT_CONFIGS_OR_PLUGINS, *report, "bare"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bare.returncode == 0, bare.stderr
    here, there = (json.loads((tmp_path / name / "summary.json").read_text()) for name in ("here", "bare"))
    assert tables_and_listings(there) == tables_and_listings(here)
    assert there["missing_jobs"] == [
        "experiment=logistic_pima size=tiny estimator=pmcsa kernel=rwmh seed=2 resume=True"
    ]
    assert len(there["reused"]) == 4 and "as stored at launch" in there["grid_note"]
    papers = {
        c["column"]: c["paper"] for table in there["tables"] for c in table["cells"] if table["metric"] == "test_lpd"
    }
    assert papers == {"pmcsa": -0.51, "pmcsa+rwmh": None}  # the paper ran no random-walk kernel
    assert any(p.startswith("mcsa-bench-extras ") for p in there["provenance"]["plugins"])  # installed, not loaded


def test_a_store_written_before_the_run_record_reports_the_same_tables(tmp_path):
    """tests/data/store_before_record: a store and its reports made by the code before runs stored their
    sweep's jobs and paper values (make.py there); the report rebuilds those from today's configs."""
    import gzip
    import sqlite3

    with gzip.open(OLD_STORE / "mlflow.db.gz") as packed:
        (tmp_path / "mlflow.db").write_bytes(packed.read())
    database = sqlite3.connect(tmp_path / "mlflow.db")  # its artifacts (none kept) go under tmp_path now
    database.execute("UPDATE experiments SET artifact_location = ?", ((tmp_path / "artifacts").as_uri(),))
    database.execute("UPDATE runs SET artifact_uri = ? || '/' || run_uuid || '/artifacts'",
                     ((tmp_path / "artifacts").as_uri(),))
    database.commit()
    database.close()
    expected = json.loads((OLD_STORE / "expected.json").read_text())
    for name, arguments in {"sweep": ["--sweep", "latest"], "experiment": ["--experiment", "mcsa-bench"]}.items():
        out = tmp_path / name
        assert (
            main(
                [
                    "report",
                    *arguments,
                    "--no-figures",
                    "--out",
                    str(out),
                    f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                ]
            )
            == 0
        )
        summary = json.loads((out / "summary.json").read_text())
        assert tables_and_listings(summary) == expected[name], name
    assert expected["sweep"]["missing_jobs"] and len(expected["sweep"]["reused"]) == 4  # the fixture holds both cases
    assert {c["paper"] for c in expected["sweep"]["cells"]} == {-0.68, -0.51, 0.69, 0.77}


def test_a_sweeps_stored_job_list_gives_its_missing_jobs_and_reused_runs_without_any_config(store, tmp_path):
    """The parent's sweep_jobs.json alone: a job without a run is missing, a skipped job's earlier run found
    by the stored config hash; the report is made with no reconstruction from today's configs at all."""
    from mcsa_bench.report.command import main as report
    from mcsa_bench.tracking.record import SWEEP_JOBS_ARTIFACT, SweepJobs, encode_sweep_jobs

    _, uri, client, _ = store
    experiment = create_experiment(client, tmp_path, "stored jobs")
    jobs = {seed: f"experiment=gone_grid method=msc seed={seed} resume=True" for seed in range(3)}
    parent = client.create_run(
        experiment,
        run_name="sweep z",
        tags={"mcsa_bench.role": "sweep", "hydra.overrides": "experiment=gone_grid method=msc seed=0,1,2 resume=true"},
    ).info.run_id
    client.log_text(parent, encode_sweep_jobs(SweepJobs(tuple(jobs.values()), True, ("h0", "h1", "h2"))),
                    SWEEP_JOBS_ARTIFACT)
    add_run(client, experiment, method="msc", dataset="pima", seed=0, final=-0.5,
            tags={"mlflow.parentRunId": parent, "hydra.overrides": jobs[0]})
    earlier = add_run(client, experiment, method="msc", dataset="pima", seed=1, final=-0.6,
                      tags={"mcsa_bench.config_hash": "h1"})  # seed 1: skipped, its earlier run reused; seed 2: missing
    out = tmp_path / "stored"
    assert (
        report(["--sweep", parent, "--no-figures", "--out", str(out), f"tracking.uri={uri}"], reconstruction=None) == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing_jobs"] == [jobs[2]] and [r["run_id"] for r in summary["reused"]] == [earlier]
    assert (
        summary["grid_note"].startswith("expected jobs: the 3 combinations")
        and "as stored at launch" in summary["grid_note"]
    )
    (table,) = summary["tables"]
    assert [c["n"] for c in table["cells"]] == [2]
