"""The experiment grids (conf/experiment/<grid>.yaml): every grid composes to the jobs it promises at
each size (data sets x methods x budgets x stepsizes x replications), and runs at size=smoke through
the CLI's main in the test's process (one replication of every cell: the replications differ only in
the seed; tests/e2e/ runs run commands in processes of their own) with every job
FINISHED and the grid's metric logged; `mcsa-bench report --sweep latest` on that sweep re-derives
its jobs, finds none missing and tabulates every cell with the run's final value."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcsa_bench import get_registry
from mcsa_bench.cli import main
from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME, RunSettings, compose_jobs, register_configs
from mcsa_bench.jobs.tracked import key_setting_tags
from mcsa_bench.tracking.record import METRICS
from tests.support import cli_in_process

SCHEMES = {"pmcsa": 10, "jsa": 10, "msc": 10, "msc_rb": 10}  # method tag: budget N


@dataclass(frozen=True)
class Grid:
    datasets: tuple[str, ...]
    methods: dict[str, int]  # method tag (mcsa_bench.jobs.tracked.key_setting_tags): N
    metric: str  # what the grid's table or figure shows
    smoke_seeds: int = 2
    budgets: tuple[int, ...] = ()  # swept N (replaces the methods' N)
    optimizers: tuple[str, ...] = ("adam",)
    smoke_stepsizes: tuple[float, ...] = (0.01,)

    def smoke_cells(self) -> Counter:
        """(dataset, method, N, optimizer, lr) -> replications at size=smoke."""
        return Counter({(dataset, method, str(n), optimizer, str(lr)): self.smoke_seeds
                        for dataset in self.datasets for method, budget in self.methods.items()
                        for n in (self.budgets or (budget,)) for optimizer in self.optimizers
                        for lr in self.smoke_stepsizes})


GRIDS = {
    "gaussian_variance": Grid(("",), SCHEMES, "grad_variance", budgets=(8, 16)),
    "stepsize_robustness": Grid(("",), SCHEMES, "kl_inclusive", optimizers=("sgd", "momentum", "nesterov", "adam"),
                                smoke_stepsizes=(0.01, 0.1), smoke_seeds=1),
    "logistic": Grid(("pima", "heart", "german_numeric"), {**SCHEMES, "msc+hmc": 10, "snis": 10, "elbo": 1},
                     "test_lpd"),
    "gp_classification": Grid(("sonar", "ionosphere", "breast"), {**SCHEMES, "snis": 10, "elbo": 1}, "test_lpd"),
    "bnn": Grid(("boston", "concrete"), {**SCHEMES, "elbo": 10}, "test_lpd"),
    "gp_regression": Grid(("boston", "concrete"), {**SCHEMES, "elbo": 1}, "test_lpd"),
    "marginal_likelihood": Grid(("radon", "sp500"), {**SCHEMES, "snis": 10, "elbo": 1}, "log_z"),
    # one posterior and the mean-field family at size=smoke (the posterior is model.posterior, not a data set)
    "posteriordb": Grid(("",), {**SCHEMES, "snis": 10, "elbo": 1}, "ref_mean_error_max"),
}

#: jobs at the paper size: the papers' lists and replications (the grids' header comments)
PAPER_JOBS = {"gaussian_variance": 4 * 5 * 8, "stepsize_robustness": 4 * 4 * 20 * 20, "logistic": 3 * 7 * 100,
              "gp_classification": 3 * 6 * 100, "bnn": 2 * 5 * 20, "gp_regression": 2 * 5 * 20,
              "marginal_likelihood": 2 * 6 * 100, "posteriordb": 11 * 6 * 2 * 5}
#: jobs at size=bench: every method, 5 replications, subsets of the budgets' and stepsizes' lists
BENCH_JOBS = {
    "gaussian_variance": 4 * 5 * 5,
    "stepsize_robustness": 4 * 4 * 5 * 5,
    "logistic": 3 * 7 * 5,
    "gp_classification": 3 * 6 * 5,
    "bnn": 2 * 5 * 5,
    "gp_regression": 2 * 5 * 5,
    "marginal_likelihood": 2 * 6 * 5,
    "posteriordb": 11 * 6 * 2 * 2,
}


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


def sweep_size(*overrides: str) -> int:
    """How many jobs `mcsa-bench run -m` launches, from the composed sweeper lists (no job is composed)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from mcsa_bench.jobs.composition import create_hydra, split_sweep

    hydra = create_hydra(f"pkg://{CONFIG_MODULE}")
    try:
        master = hydra.compose_config(CONFIG_NAME, list(overrides), run_mode=RunMode.MULTIRUN,
                                      with_log_configuration=False)
        return len(split_sweep(hydra, master))
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_composes_at_smoke_size_to_every_cell(grid):
    registry = get_registry()
    cells, settings = Counter(), []
    for _, cfg in compose_jobs([f"experiment={grid}", "size=smoke"], multirun=True):
        job = RunSettings.from_config(cfg).resolve(registry)
        tags = key_setting_tags(job, job.effective_config(registry))
        cells[tags["dataset"], tags["method"], tags["N"], tags["optimizer"], tags["lr"]] += 1
        settings.append(job)
    assert cells == GRIDS[grid].smoke_cells()
    assert sum(cells.values()) == sweep_size(f"experiment={grid}", "size=smoke")
    assert {job.n_iters for job in settings} == {20}
    assert {job.seed for job in settings} == set(range(GRIDS[grid].smoke_seeds))


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_has_the_papers_job_count_at_paper_size_and_fewer_at_bench_size(grid):
    assert sweep_size(f"experiment={grid}") == PAPER_JOBS[grid]
    assert sweep_size(f"experiment={grid}", "size=bench") == BENCH_JOBS[grid]


def test_grids_keep_the_papers_settings_per_job():
    """Spot checks of what each job composes: the Gaussian targets, the diagnostic, single-HMC's kernel,
    raw features for logistic regression, and the data slice of the smoke size."""
    def job(*overrides):
        (_, cfg), = compose_jobs(list(overrides), multirun=False)
        return cfg

    variance = job("experiment=gaussian_variance", "method=msc", "n_samples=128")
    assert (variance.model.dim, variance.model.nu, variance.n_iters) == (50, 500.0, 10_000)
    assert (variance.diagnostics.every, variance.diagnostics.replicas, variance.estimator.name) == (100, 512, "msc")
    stepsize = job("experiment=stepsize_robustness", "optimizer=nesterov", "optimizer.lr=0.00144")
    assert (stepsize.model.dim, stepsize.n_samples, stepsize.optimizer.name, stepsize.optimizer.lr) == (
        100,
        10,
        "nesterov",
        0.00144,
    )
    german = job("experiment=logistic", "experiment@_global_=logistic_german", "method=msc_hmc")
    assert (german.model.dataset, german.model.standardize, german.kernel.name, german.kernel.n_leapfrog) == \
        ("german_numeric", False, "hmc", 256)
    smoke = job("experiment=gp_classification", "experiment@_global_=gp_classification_breast", "size=smoke")
    assert (smoke.model.dataset, smoke.model.standardize, smoke.max_rows, smoke.n_iters) == ("breast", True, 60, 20)


# ------------------------------------------------------------------------- runs through the CLI


def all_child_runs(store: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("mcsa-bench")
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    parents = [r for r in runs if r.data.tags.get("mcsa_bench.role") == "sweep"]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


@pytest.mark.slow
@pytest.mark.parametrize("grid", GRIDS)
def test_grid_runs_at_smoke_size_through_the_cli(grid, tmp_path, store_in, monkeypatch):
    store = store_in(tmp_path, "mlflow.db") / "mlflow.db"
    result = cli_in_process("run", "-m", f"experiment={grid}", "size=smoke", "seed=0", f"tracking.uri=sqlite:///{store}",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    parents, children = all_child_runs(store)
    expected = Counter(dict.fromkeys(GRIDS[grid].smoke_cells(), 1))  # seed=0: one replication per cell
    assert {run.data.params["seed"] for run in children} == {"0"}
    assert len(parents) == 1 and len(children) == sum(expected.values())
    assert {run.data.tags["mlflow.parentRunId"] for run in children} == {parents[0].info.run_id}
    assert Counter(run.info.status for run in children) == Counter({"FINISHED": len(children)})
    tags = Counter((r.data.tags["dataset"], r.data.tags["method"], r.data.tags["N"], r.data.tags["optimizer"],
                    r.data.tags["lr"]) for r in children)
    assert tags == expected
    metric = GRIDS[grid].metric
    assert all(math.isfinite(run.data.metrics[metric]) for run in children), metric
    # the run record's catalogue describes every metric the shipped components log
    assert set().union(*(run.data.metrics for run in children)) <= set(METRICS)

    # the report on the real sweep: every job re-derived from the parent's overrides and found, one
    # cell per grid cell (budgets and stepsizes as panels), each holding its run's final value
    out = tmp_path / "report"
    assert main(["report", "--sweep", "latest", "--metric", metric, "--no-figures", "--out", str(out),
                 f"tracking.uri=sqlite:///{store}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["grid_note"].startswith(f"expected jobs: the {len(children)} combinations")
    assert (summary["missing_jobs"], summary["not_finished"]) == ([], [])
    finals = {run.info.run_id: run.data.metrics[metric] for run in children}
    cells = [cell for table in summary["tables"] for cell in table["cells"]]
    assert len(cells) == len(children) and not any(table["missing"] for table in summary["tables"])
    assert {cell["run_ids"]["0"]: cell["mean"] for cell in cells} == finals


def test_the_flows_grid_sweeps_five_targets_six_methods_and_three_families():
    """experiment=flows (issue 51 §5): 5 x 6 x 3 x 10 = 900 jobs; q@_global_=... sets each family with its options."""
    assert sweep_size("experiment=flows") == 900
    jobs = compose_jobs(["experiment=flows", "seed=0", "method=elbo", "experiment@_global_=flows_many_well"],
                        multirun=True)
    families = {(cfg.family.name, cfg.family.get("coupling")) for _, cfg in jobs}
    assert families == {("fullrank_gaussian", None), ("flow", "affine"), ("flow", "spline")}
