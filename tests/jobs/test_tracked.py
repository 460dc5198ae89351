"""How a tracked run is named and what it says of itself (mcsa_bench.jobs.tracked): run names that tell a
sweep's jobs and single runs of different settings apart, and the note of a single run of a paper setting."""

from mcsa_bench.jobs.tracked import run_name


def test_run_names_tell_the_jobs_of_a_sweep_apart(monkeypatch):
    tags = {"method": "msc+hmc", "model": "logistic", "dataset": "pima", "seed": "3"}
    assert run_name(tags, ["estimator=msc", "kernel=hmc"], None) == "msc+hmc-logistic-pima-seed3"
    monkeypatch.setenv("MCSA_BENCH_SWEEP_KEYS", "optimizer.lr,seed")
    assert (
        run_name(tags, ["optimizer.lr=0.1", "seed=3", "n_iters=5"], 7)
        == "msc+hmc-logistic-pima-seed3 optimizer.lr=0.1 #7"
    )
    # a grid's jobs: no Hydra package syntax, and the method under the name it was chosen by
    monkeypatch.setenv("MCSA_BENCH_SWEEP_KEYS", "experiment@_global_,method,seed")
    elbo = {"method": "elbo", "model": "logistic", "dataset": "pima", "seed": "0"}
    assert (
        run_name(elbo, ["experiment@_global_=logistic_pima", "method=elbo_n1", "seed=0"], 4)
        == "elbo_n1-logistic-pima-seed0 #4"
    )


def test_single_runs_of_different_settings_get_different_names():
    """The tour's runs of pMCSA on the Gaussian target: the settings they change are in their names; what
    changes no result (where it is tracked, how often it evaluates) is not."""
    tags = {"method": "pmcsa", "model": "gaussian", "dataset": "", "seed": "0"}
    names = [run_name(tags, overrides, None) for overrides in (
        [], ["model.dim=10", "n_iters=2000"], ["n_iters=2000"], ["optimizer=momentum", "optimizer.lr=0.005"],
        ["model=gaussian", "tracking.uri=sqlite:///x.db", "eval_every=50", "seed=0"],
    )]
    assert names == ["pmcsa-gaussian-seed0", "pmcsa-gaussian-seed0 model.dim=10 n_iters=2000",
                     "pmcsa-gaussian-seed0 n_iters=2000", "pmcsa-gaussian-seed0 optimizer=momentum optimizer.lr=0.005",
                     "pmcsa-gaussian-seed0"]


def test_a_single_run_of_a_paper_setting_says_what_it_is_and_how_to_get_the_average():
    from mcsa_bench import get_registry
    from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs
    from mcsa_bench.jobs.tracked import paper_note

    register_configs(get_registry())
    (_, cfg), = compose_jobs(["experiment=logistic_pima", "seed=3"], multirun=False)
    note = paper_note(RunSettings.from_config(cfg), "pmcsa", "logistic_pima")
    assert "one replication (seed 3" in note and "the parallel-state paper, Table 2 averages over 100" in note
    assert "pmcsa scored test_accuracy 0.77, test_lpd -0.51" in note
    assert "mcsa-bench run -m experiment=logistic_pima seed='range(20)'" in note and "mcsa-bench report" in note
