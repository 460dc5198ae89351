"""The shipped config tree: every experiment composes, builds, and runs at size=tiny; the
generated component nodes carry defaults and types from the factory signatures."""

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from mcsa_bench import get_registry, run
from mcsa_bench.api import ConfigurationError
from mcsa_bench.jobs.config import RunSettings, component_schema, compose_jobs, register_configs, shipped_yaml

EXPERIMENTS = sorted(shipped_yaml("experiment"))
#: the experiments of the papers' settings (not this project's own: the flows grid and its targets, posteriordb's)
PAPERS_EXPERIMENTS = [name for name in EXPERIMENTS if not name.startswith(("flows", "posteriordb"))]


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


def compose(*overrides):
    (_, cfg), = compose_jobs(list(overrides), multirun=False)
    return cfg


def test_every_model_pair_of_the_papers_has_an_experiment():
    expected = {"logistic_pima", "logistic_heart", "logistic_german", "gp_classification_sonar",
                "gp_classification_ionosphere", "gp_classification_breast", "gp_regression_boston",
                "gp_regression_concrete", "bnn_boston", "bnn_concrete", "radon", "stochastic_volatility_sp500"}
    assert expected <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", PAPERS_EXPERIMENTS)
def test_experiment_has_the_papers_setting(experiment):
    settings = RunSettings.from_config(compose(f"experiment={experiment}"))
    assert settings.n_samples == 10 and settings.n_iters >= 10_000
    assert settings.components["optimizer"] == ("adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                                          "schedule": "constant", "decay_every": None,
                                                          "decay_factor": 0.5, "average_from": None})


@pytest.mark.parametrize("experiment", [name for name in EXPERIMENTS if name != "posteriordb"])  # its own: test_grids
def test_tiny_variant_runs(experiment):
    settings = RunSettings.from_config(compose(f"experiment={experiment}", "size=tiny", "seed=1"))
    assert settings.n_iters == 20
    parts = settings.assemble(get_registry())
    result = run(*parts.run_args(), n_iters=settings.n_iters, seed=settings.seed, eval_every=settings.evaluation.every)
    assert np.all(np.isfinite(result.params)) and len(result.history) == 3


def test_split_seed_and_gaussian_target_follow_the_run_seed():
    assert compose("model=logistic", "seed=7").model.split_seed == 7
    assert compose("model=gaussian", "seed=7").model.seed == 7
    assert compose("model=logistic", "seed=7", "model.split_seed=2").model.split_seed == 2


def test_component_nodes_are_typed_from_signatures():
    adam = component_schema(get_registry().get("optimizer", "adam"))()
    assert (adam.name, adam.lr, adam.schedule) == ("adam", 0.01, "constant")
    with pytest.raises(ConfigurationError, match="optimizer.lr: Value 'fast'"):
        compose("optimizer.lr=fast")
    with pytest.raises(
        ConfigurationError,
        match="optimizer 'adam' has no parameter 'step'; allowed: lr, beta1, beta2, eps, schedule, decay_every",
    ):
        compose("optimizer.step=3")


def test_component_nodes_travel_to_a_worker_by_name_not_by_value():
    """Hydra hands every job to its worker with the ConfigStore, whose component nodes are instances
    of schema classes made at run time: they pickle by reference, and a process that has not made
    them (a fresh worker) makes them again from its registry when it unpickles a node."""
    import pickle
    import subprocess
    import sys

    from hydra.core.config_store import ConfigStore
    from joblib.externals import cloudpickle

    from mcsa_bench.jobs import config

    register_configs(get_registry())
    # the project's nodes: Hydra's own group holds every installed Hydra plugin's (Optuna's sweeper adds 25 kB);
    # 111 kB when the classes went by value; by name it grows with the components (about 0.8 kB each)
    ours = {group: node for group, node in ConfigStore.instance().repo.items() if group != "hydra"}
    assert len(cloudpickle.dumps(ours)) < 2_000 * len(get_registry().components())
    schema = component_schema(get_registry().get("model", "gp_classification"))
    assert pickle.loads(pickle.dumps(schema)) is schema is config.model_gp_classification
    node = OmegaConf.structured(schema)
    node.max_rows = 50
    received = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; from omegaconf import OmegaConf; "
         "node = pickle.loads(sys.stdin.buffer.read()); "
         "print(type(node._metadata.object_type).__name__, node._metadata.object_type.__qualname__, node.max_rows)"],
        input=pickle.dumps(node), capture_output=True, timeout=120)
    assert received.returncode == 0, received.stderr.decode()
    assert received.stdout.decode().split() == ["type", "model_gp_classification", "50"]
    with pytest.raises(AttributeError, match="no attribute 'model_nonexistent'"):
        _ = config.model_nonexistent


def test_a_component_with_a_reserved_parameter_is_skipped_not_fatal():
    import types

    from mcsa_bench import hookimpl, load_registry
    from mcsa_bench.builtin.kernels import IMH
    from mcsa_bench.plugins import PluginWarning

    class Named(IMH):
        def __init__(self, name: str = "x"):
            self.label = name

    plugin = types.ModuleType("named_plugin")
    plugin.register_kernels = hookimpl(lambda register: register("named", Named))
    with pytest.warns(PluginWarning, match="'name' is reserved"):
        register_configs(load_registry([plugin]))
    assert compose("kernel=cis").kernel.name == "cis"


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if "paper:" in
                                        (Path(__file__).parents[2] / "conf" / "experiment" / f"{e}.yaml").read_text()])
def test_paper_numbers_name_real_methods_and_do_not_change_the_config_hash(experiment):
    from mcsa_bench.jobs.config import config_hash

    registry = get_registry()
    settings = RunSettings.from_config(compose(f"experiment={experiment}"))
    paper = settings.resolved["paper"]
    assert paper["source"] and paper["replications"] >= 20 and "pmcsa" in paper["values"]
    for method in paper["values"]:
        scheme, _, kernel = method.partition("+")
        registry.get("estimator", scheme)
        if kernel:
            registry.get("kernel", kernel)
    effective = settings.effective_config(registry)
    assert config_hash(effective) == config_hash({**effective, "paper": None})
    # the values as the paper prints them: -0.50 keeps its zero (a YAML number would lose it) and reads as a number
    raw = yaml.load((Path(__file__).parents[2] / "conf" / "experiment" / f"{experiment}.yaml").read_text(),
                    yaml.BaseLoader)["paper"]["values"]
    assert paper["values"] == raw and all(re.fullmatch(r"-?\d+\.\d+", v) for m in raw.values() for v in m.values())


def test_the_default_eval_schedule_keeps_the_config_hash_of_runs_recorded_before_it_existed():
    from mcsa_bench.jobs.config import config_hash

    registry = get_registry()
    effective = RunSettings.from_config(compose()).effective_config(registry)
    assert effective["eval_schedule"] == "linear"
    before = {key: value for key, value in effective.items() if key != "eval_schedule"}
    assert config_hash(effective) == config_hash(before)
    geometric = RunSettings.from_config(compose("eval_schedule=geometric"))
    assert geometric.evaluation.kind == "geometric"
    assert geometric.config_hash(registry) != config_hash(effective)


def test_sweep_composition_equals_hydras_own_job_by_job():
    """The caching loader composes each distinct config-group choice once and applies value overrides
    itself; every job's config, the hydra node included, must equal the one Hydra composes from scratch."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from mcsa_bench.jobs.composition import CachingConfigLoader
    from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME
    from mcsa_bench.jobs.config import compose as compose_sweep

    overrides = ["experiment=logistic_pima,gaussian_fig1", "estimator=msc,pmcsa", "seed=0,3",
                 "optimizer.lr=0.5", "+model.split_seed=1,2", "n_iters=7", "hydra.job.chdir=false"]
    with pytest.raises(ConfigurationError):  # split_seed does not exist for the gaussian model
        compose_sweep(overrides, multirun=True)
    overrides[4] = "optimizer=sgd,adam"
    jobs = compose_sweep(overrides, multirun=True).jobs
    assert len(jobs) == 16
    hydra = Hydra.create_main_hydra2("mcsa-bench", create_config_search_path(f"pkg://{CONFIG_MODULE}"))
    try:
        master = hydra.compose_config(CONFIG_NAME, overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        caching = CachingConfigLoader(hydra.config_loader)
        for job, cfg in jobs:
            exact = hydra.config_loader.load_sweep_config(master, job)
            fast = caching.load_sweep_config(master, job)
            assert OmegaConf.to_container(fast) == OmegaConf.to_container(exact), job  # hydra node too
            sanitized = OmegaConf.to_container(hydra.get_sanitized_cfg(exact, "job"), resolve=True)
            assert OmegaConf.to_container(cfg, resolve=True) == sanitized, job
        assert len(caching._bases) == 8  # experiments x estimators x optimizers: the distinct group choices
    finally:
        GlobalHydra.instance().clear()


def test_the_launch_reuses_preflights_compositions_and_equals_hydra(compositions_from_scratch):
    """`mcsa-bench run -m` composes every job in pre-flight, then launches through Hydra with hydra
    overrides of its own (the jobs' environment, the sweep directory): Hydra's sweeper and launcher
    get each job from pre-flight's compositions, equal to Hydra's own, composing nothing again."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from mcsa_bench.jobs import composition
    from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME
    from mcsa_bench.jobs.config import compose as compose_sweep

    from_scratch, calls = ConfigLoaderImpl.load_sweep_config, compositions_from_scratch
    command = ["experiment=logistic_pima,gaussian_fig1", "estimator=msc,pmcsa", "seed=0,3", "hydra.job.chdir=false"]
    shared = {}
    jobs = compose_sweep(command, multirun=True, compositions=shared).jobs
    assert len(jobs) == 8 and len(calls) == len(shared) == 4
    launch = [
        "++hydra.job.env_set.MCSA_BENCH_PARENT_RUN=abc",
        "++hydra.job.env_set.MCSA_BENCH_SWEEP_KEYS='seed,estimator'",
        "hydra.sweep.dir=/tmp/sweep 1",
    ]
    hydra = Hydra.create_main_hydra2("mcsa-bench", create_config_search_path(f"pkg://{CONFIG_MODULE}"))
    try:
        master = hydra.compose_config(CONFIG_NAME, command + launch, run_mode=RunMode.MULTIRUN,
                                      with_log_configuration=False)
        exact = {tuple(job): from_scratch(hydra.config_loader, master, job) for job, _ in jobs}  # files read afresh
        with composition.cached_sweep_composition(shared):
            for job, _ in jobs:
                cached = hydra.config_loader.load_sweep_config(master, job)
                assert OmegaConf.to_container(cached) == OmegaConf.to_container(exact[tuple(job)]), (
                    job
                )  # hydra node too
                assert cached.hydra.job.env_set.MCSA_BENCH_PARENT_RUN == "abc"
                assert cached.hydra.sweep.dir == "/tmp/sweep 1"
    finally:
        GlobalHydra.instance().clear()
    assert len(calls) == 4  # nothing composed again


def test_a_cli_sweep_composes_each_job_once_in_pre_flight_and_once_for_the_launcher(tmp_path, store_in, monkeypatch):
    """Hydra's basic sweeper would compose every job once more to check it before the launcher
    composes it; pre-flight has checked every job, so the sweeper's check is skipped (and only there)."""
    from hydra.plugins.sweeper import Sweeper

    from mcsa_bench.jobs.composition import CachingConfigLoader
    from tests.support import cli_in_process

    jobs, compose_job, check = [], CachingConfigLoader.load_sweep_config, Sweeper.validate_batch_is_legal
    monkeypatch.setattr(
        CachingConfigLoader,
        "load_sweep_config",
        lambda loader, master, overrides: jobs.append(tuple(overrides)) or compose_job(loader, master, overrides),
    )
    result = cli_in_process("run", "-m", "seed=0,1", "estimator=msc,pmcsa", "model.dim=2", "n_iters=2", "eval_every=1",
                            cwd=store_in(tmp_path), monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    # 4 jobs composed in pre-flight, then the launcher's 2 (one per cell: a cell's seeds run in one launcher
    # job, jobs/cell.py), not the sweeper's
    preflight, launched = jobs[:4], jobs[4:]
    assert len(set(preflight)) == 4 and len(launched) == 2
    assert all(job[:len(preflight[0])] in preflight for job in launched)  # a cell's first job, in its directory
    assert Sweeper.validate_batch_is_legal is check  # Hydra's own check is back after the command


def test_only_the_basic_sweepers_check_is_skipped():
    """Other sweepers choose their jobs as they go: pre-flight has not composed them, so they keep the check."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from mcsa_bench.jobs.composition import _unless_basic_sweeper

    class OtherSweeper(BasicSweeper):
        pass

    checked = []
    validate = _unless_basic_sweeper(lambda sweeper, batch: checked.append(type(sweeper)))
    validate(BasicSweeper(max_batch_size=None), [["seed=0"]])
    validate(OtherSweeper(max_batch_size=None), [["seed=0"]])
    assert checked == [OtherSweeper]


def test_a_worker_composes_through_one_cache_per_sweep_and_equals_hydra(monkeypatch, compositions_from_scratch):
    """A joblib/Ray worker receives a fresh loader and master config with every job: the cache is
    keyed by the sweep, serves its later jobs, and keeps two sweeps apart."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from mcsa_bench.jobs.composition import cache_sweep_composition_in_this_worker
    from mcsa_bench.jobs.config import CONFIG_MODULE, CONFIG_NAME

    from_scratch, calls = ConfigLoaderImpl.load_sweep_config, compositions_from_scratch
    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", from_scratch)  # restored after the test
    cache_sweep_composition_in_this_worker()
    cache_sweep_composition_in_this_worker()  # idempotent: one cache layer

    def in_a_fresh_worker_context(command: list[str], job: list[str]):
        GlobalHydra.instance().clear()
        hydra = Hydra.create_main_hydra2("mcsa-bench", create_config_search_path(f"pkg://{CONFIG_MODULE}"))
        master = hydra.compose_config(CONFIG_NAME, command, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        return hydra.config_loader.load_sweep_config(master, job), from_scratch(hydra.config_loader, master, job)

    # the same job overrides in two sweeps whose command differs: one base each
    sweeps = {
        ("estimator=msc,pmcsa", "seed=0,1"): [["estimator=msc", "seed=0"], ["estimator=msc", "seed=1"]],
        ("estimator=msc,pmcsa", "model.dim=4", "seed=0,1"): [["estimator=msc", "seed=0"], ["estimator=msc", "seed=1"]],
    }
    try:
        for command, jobs in sweeps.items():
            for job in jobs:
                cached, exact = in_a_fresh_worker_context(list(command), job)
                assert OmegaConf.to_container(cached) == OmegaConf.to_container(exact), (command, job)
    finally:
        GlobalHydra.instance().clear()
    assert calls == [["estimator=msc"], ["estimator=msc"]]  # composed from scratch: each sweep's base, once


def test_each_config_file_is_parsed_once_per_process_until_it_changes_or_is_shadowed(tmp_path, monkeypatch):
    """A sweep over two estimators composes three times from scratch (the master config, then each
    distinct group choice), loading config.yaml and the experiment's file each time: each file is
    parsed once (the jobs equal Hydra's own composition: test_sweep_composition_equals_hydras_own_job_by_job),
    the next command parses nothing again, and an edit (of the same size) or a file that shadows a
    shipped one earlier in the search path is seen by the next command."""
    from collections import Counter

    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.plugins import Plugins

    from mcsa_bench.jobs import composition

    Plugins.instance()  # discovers the config sources
    monkeypatch.setattr(composition, "_PARSED", {})  # as in a fresh process
    reads = Counter()
    for source in map(SourcesRegistry.instance().resolve, ("pkg", "file")):  # the classes Hydra instantiates
        monkeypatch.setattr(source, "load_config", lambda self, config_path, load=source.load_config:
                            reads.update([(self.path, config_path)]) or load(self, config_path))
    (tmp_path / "experiment").mkdir()
    mine = tmp_path / "experiment" / "mine.yaml"
    mine.write_text("# @package _global_\nthreads: 2\n")
    command = ["experiment=mine", "estimator=msc,pmcsa"]
    jobs = compose_jobs(command, multirun=True, config_dir=str(tmp_path))
    assert len(jobs) == 2 and {cfg.threads for _, cfg in jobs} == {2}
    assert reads[(str(tmp_path), "experiment/mine")] == 1 and max(reads.values()) == 1, reads.most_common(3)
    first = reads.copy()
    compose_jobs(command, multirun=True, config_dir=str(tmp_path))
    assert reads == first  # nothing parsed again
    mine.write_text("# @package _global_\nthreads: 3\n")
    jobs = compose_jobs(command, multirun=True, config_dir=str(tmp_path))
    assert {cfg.threads for _, cfg in jobs} == {3}
    assert reads - first == Counter({(str(tmp_path), "experiment/mine"): 1})
    (tmp_path / "model").mkdir()  # the user's model/gaussian.yaml comes before the shipped one
    (tmp_path / "model" / "gaussian.yaml").write_text(
        "defaults:\n  - /_components/model/gaussian@_here_\n  - _self_\nseed: ${seed}\ndim: 7\n")
    jobs = compose_jobs(command, multirun=True, config_dir=str(tmp_path))
    assert {cfg.model.dim for _, cfg in jobs} == {7} and reads[(str(tmp_path), "model/gaussian")] == 1


def test_a_bad_value_in_one_job_of_a_sweep_names_that_job():
    with pytest.raises(
        ConfigurationError, match=r"job #1 \(estimator=msc optimizer.lr=abc\): optimizer.lr: Value 'abc'"
    ):
        compose_jobs(["estimator=msc,pmcsa", "optimizer.lr=0.1,abc"], multirun=True)


def test_literal_parameters_list_their_values_in_help_and_refuse_others():
    import types
    from typing import Literal

    from mcsa_bench import hookimpl, load_registry
    from mcsa_bench.builtin.kernels import IMH
    from mcsa_bench.cli import run_help

    class Moody(IMH):
        """An IMH kernel with an enumerated option."""

        def __init__(self, mood: Literal["calm", "eager"] = "calm"):
            super().__init__()
            self.mood = mood

    plugin = types.ModuleType("moody_plugin")
    plugin.register_kernels = hookimpl(lambda register: register("moody", Moody))
    registry = load_registry([plugin])
    assert registry.build("kernel", "moody", mood="eager").mood == "eager"
    with pytest.raises(ConfigurationError, match=r"kernel 'moody' .*: mood must be one of calm, eager; got 'grumpy'"):
        registry.build("kernel", "moody", mood="grumpy")
    assert component_schema(registry.get("kernel", "moody")).__dataclass_fields__["mood"].type is str
    from unittest import mock

    with mock.patch("mcsa_bench.plugins.get_registry", return_value=registry):
        assert "moody                  mood=calm (one of calm|eager)" in run_help()


@pytest.mark.parametrize(
    "kind,name,key,values,table",
    [
        (
            "optimizer",
            "adam",
            "schedule",
            "constant|inverse|inverse_sqrt|cosine|step",
            "mcsa_bench.builtin.optimizers:SCHEDULES",
        ),
        ("family", "meanfield_gaussian", "scale", "softplus|exp", "mcsa_bench.builtin.families:SCALE_TRANSFORMS"),
        ("kernel", "hmc", "mass", "identity|diagonal", "mcsa_bench.builtin.hmc:MASS_MATRICES"),
    ],
)
def test_builtin_enumerated_options_are_listed_and_refused_with_their_values(kind, name, key, values, table):
    import importlib

    from mcsa_bench.cli import run_help
    from mcsa_bench.plugins import literal_choices

    module, attribute = table.split(":")
    choices = literal_choices(get_registry().get(kind, name).parameters()[key].annotation)
    assert set(choices) == set(getattr(importlib.import_module(module), attribute))  # the annotation is the table
    assert f"{key}=" in run_help() and f"(one of {values})" in run_help()
    with pytest.raises(ConfigurationError, match=f"{key} must be one of {', '.join(values.split('|'))}; got 'nope'"):
        get_registry().build(kind, name, **({"dim": 2} if kind == "family" else {}), **{key: "nope"})


def test_each_job_of_a_sweep_has_its_own_output_directory_as_hydra_resolves_it():
    from mcsa_bench.jobs.config import compose as compose_command

    composition = compose_command(["seed=0,1", "hydra.sweep.dir=/sweep", "hydra.sweep.subdir=s${hydra.job.num}"],
                                  multirun=True)
    assert composition.output_dirs == ["/sweep/s0", "/sweep/s1"] and composition.log_name == "run.log"


@pytest.mark.parametrize("logging", [
    "hydra/job_logging=default", "hydra/job_logging=stdout", "hydra/job_logging=none", "hydra/job_logging=disabled",
    "hydra/hydra_logging=default", "hydra/hydra_logging=hydra_debug", "hydra/hydra_logging=disabled",
])
def test_hydras_own_logging_options_and_the_allowed_variables_pass_the_composed_check(logging):
    """The other side of the refusals in tests/test_cli_errors.py (a --config-dir logging file that
    opens another file, env_set outside the allow-list): what Hydra ships and the allow-list compose."""
    env = [f"++hydra.job.env_set.{name}=1" for name in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TZ")]
    (overrides, _), = compose_jobs([logging, *env], multirun=False)
    assert overrides[0] == logging
